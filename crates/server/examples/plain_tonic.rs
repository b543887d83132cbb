//! The RLS load harness's baseline (bench/rls.sh, bench/instructions.sh): a
//! plain tonic server answering every `ShouldRateLimit` with `OK` and one
//! `OK` status per descriptor, deciding nothing. tonic's own server on
//! tokio's default runtime: what a gRPC call costs through the stack most
//! Rust RLS servers are built on, with no limiter behind it.
//!
//!   plain_tonic            # prints `grpc listening on ADDR`

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

struct AlwaysOk;

#[tonic::async_trait]
impl RateLimitService for AlwaysOk {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let statuses = request
            .get_ref()
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            })
            .collect();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..RateLimitResponse::default()
        }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("grpc listening on {}", listener.local_addr()?);
    tonic::transport::Server::builder()
        .max_concurrent_streams(1_024)
        .add_service(RateLimitServiceServer::new(AlwaysOk))
        .serve_with_incoming(TcpListenerStream::new(listener))
        .await?;
    Ok(())
}

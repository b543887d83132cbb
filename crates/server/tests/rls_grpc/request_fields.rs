//! Every request field is honoured (hits_addend, a limit override, the
//! domain); bad requests and malformed messages are refused and spend nothing.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::transport::Channel;

use crate::examples::{EXAMPLE_1, EXAMPLE_3, EXAMPLE_5};
use crate::harness::*;
use crate::support::metric;

#[tokio::test]
async fn hits_addend_on_the_request_and_on_each_descriptor() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let users = || desc(&[("database", "users")]);
    let r = rls.ask_hits("mongo_cps", vec![users()], 300).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 200));
    // A descriptor's own hits_addend wins over the request's; 0 is a peek.
    let mut peek = users();
    peek.hits_addend = Some(UInt64Value { value: 0 });
    let r = rls.ask_hits("mongo_cps", vec![peek], 300).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 200));
    let mut big = users();
    big.hits_addend = Some(UInt64Value { value: 201 });
    let r = rls.ask_hits("mongo_cps", vec![big], 1).await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 500, SECOND, 200));
    let mut exact = users();
    exact.hits_addend = Some(UInt64Value { value: 200 });
    let r = rls.ask("mongo_cps", vec![exact]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 0));
}

#[tokio::test]
async fn a_limit_override_replaces_the_configured_limit() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let mut d = desc(&[("database", "users")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 3,
        unit: MINUTE,
    });
    for left in [2, 1, 0] {
        let r = rls.ask("mongo_cps", vec![d.clone()]).await;
        assert_eq!(brief(&r.statuses[0]), (OK, 3, MINUTE, left));
    }
    let r = rls.ask("mongo_cps", vec![d.clone()]).await;
    assert_eq!(brief(&r.statuses[0]), (OVER, 3, MINUTE, 0));
    // The configured limit's bucket is untouched.
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 499));
    // An override needs no matching rule, only a known domain.
    let mut any = desc(&[("anything", "x")]);
    any.limit = d.limit;
    let r = rls.ask("mongo_cps", vec![any.clone()]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 3, MINUTE, 2));
    let r = rls.ask("unknown_domain", vec![any]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, 0));
}

#[tokio::test]
async fn several_domains_from_one_directory_are_independent() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1, EXAMPLE_3, EXAMPLE_5]).await;
    let r = rls
        .ask("edge_proxy_per_ip", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 0, 0, 0));
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 499));
    let r = rls.ask("internal", vec![desc(&[("azure", "users")])]).await;
    assert_eq!(brief(&r.statuses[0]), (OK, 100, MINUTE, 99));
}

#[tokio::test]
async fn bad_requests_are_invalid_arguments() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    let cases = [
        (
            request("", vec![desc(&[("database", "users")])], 0),
            "domain must not be empty",
        ),
        (
            request("mongo_cps", vec![], 0),
            "descriptor list must not be empty",
        ),
        (
            request("mongo_cps", vec![desc(&[])], 0),
            "descriptors[0] has no entries",
        ),
    ];
    for (req, message) in cases {
        let status = rls.send(req).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains(message), "{}", status.message());
    }
    let mut bad_unit = desc(&[("database", "users")]);
    bad_unit.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 99,
    });
    let status = rls
        .send(request("mongo_cps", vec![bad_unit], 0))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    // Nothing was spent by the refused requests.
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 499));
    let m = rls.metrics();
    assert_eq!(
        metric(&m, "tollgate_rls_requests_total{code=\"invalid_argument\"}"),
        Some(4.0)
    );
}

/// Bytes sent as the request message as they are, and the answer's bytes
/// back: for messages a generated client would never write.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let n = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, n).to_vec()))
    }
}

async fn call_raw(addr: &str, message: Vec<u8>) -> Result<RateLimitResponse, tonic::Status> {
    use prost::Message;
    let channel = Channel::from_shared(addr.to_owned())
        .expect("address")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    let answer = grpc
        .unary(tonic::Request::new(message), path, RawCodec)
        .await?
        .into_inner();
    Ok(RateLimitResponse::decode(&answer[..]).expect("a RateLimitResponse"))
}

#[tokio::test]
async fn malformed_messages_are_refused_naming_the_field_and_spend_nothing() {
    let mut rls = Rls::envoy_only(&[EXAMPLE_1]).await;
    // domain "mongo_cps"; one descriptor of one entry (database, users);
    // the value's bytes are `users` unless changed below.
    let message = |value: &[u8], hits: &[u8]| {
        let entry = [
            &[0x0a, 8][..],
            b"database",
            &[0x12, value.len() as u8],
            value,
        ]
        .concat();
        let descriptor = [&[0x0a, entry.len() as u8][..], &entry, hits].concat();
        [
            &[0x0a, 9][..],
            b"mongo_cps",
            &[0x12, descriptor.len() as u8],
            &descriptor,
        ]
        .concat()
    };
    let refused = [
        (
            message(b"us\xffrs", &[]),
            "the request message: descriptors[0].entries[0].value: a string is not UTF-8",
        ),
        (
            message(b"users", &[0x1a, 9, 0x08]),
            "the request message: descriptors[0].hits_addend: the bytes end inside a field",
        ),
        (
            [&message(b"users", &[])[..], &[0x18, 0xff]].concat(),
            "the request message: hits_addend: the bytes end inside a field",
        ),
    ];
    for (bytes, expected) in refused {
        let status = call_raw(&rls.grpc, bytes).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), expected);
    }
    // A descriptor's hits_addend sent twice: the last wins, as for every
    // protobuf reader (Envoy's own, envoyproxy/ratelimit's).
    let twice = message(b"users", &[0x1a, 2, 0x08, 1, 0x1a, 3, 0x08, 0xc8, 0x01]);
    let r = call_raw(&rls.grpc, twice).await.expect("answered");
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 300));
    // The refused messages spent nothing: 500 - 200, then one more.
    let r = rls
        .ask("mongo_cps", vec![desc(&[("database", "users")])])
        .await;
    assert_eq!(brief(&r.statuses[0]), (OK, 500, SECOND, 299));
    let m = rls.metrics();
    assert_eq!(
        metric(&m, "tollgate_rls_requests_total{code=\"invalid_argument\"}"),
        Some(3.0)
    );
}

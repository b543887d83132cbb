//! What the load harnesses' baselines share: the body of `/v1/check` they
//! parse (its `policy` is read and ignored, as tollgate's is not), and for
//! the per-core baselines, their runtimes and listeners.

use std::future::Future;
use std::net::SocketAddr;

use serde::Deserialize;
use tokio::net::{TcpListener, TcpSocket};

#[derive(Deserialize)]
#[allow(dead_code)]
pub struct CheckBody<'a> {
    #[allow(dead_code)]
    pub policy: &'a str,
    pub key: &'a str,
    #[serde(default)]
    pub cost: Option<u64>,
}

fn listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Runs `serve` on one current-thread runtime per core, each with its own
/// listener on one loopback port (SO_REUSEPORT), and prints the URL.
#[allow(dead_code)]
pub fn serve_per_core<S, F>(serve: S) -> std::io::Result<()>
where
    S: Fn(TcpListener) -> F + Clone + Send + 'static,
    F: Future<Output = ()>,
{
    serve_per_core_as("listening on http://", serve)
}

/// [`serve_per_core`], printing the address after `announce`.
#[allow(dead_code)]
pub fn serve_per_core_as<S, F>(announce: &str, serve: S) -> std::io::Result<()>
where
    S: Fn(TcpListener) -> F + Clone + Send + 'static,
    F: Future<Output = ()>,
{
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    // The first socket picks the port; the others join it.
    let first = runtime()?;
    let bound = first.block_on(async { listener(SocketAddr::from(([127, 0, 0, 1], 0))) })?;
    let addr = bound.local_addr()?;
    let mut threads = Vec::new();
    for _ in 1..cores {
        let rt = runtime()?;
        let other = rt.block_on(async { listener(addr) })?;
        let serve = serve.clone();
        threads.push(std::thread::spawn(move || rt.block_on(serve(other))));
    }
    println!("{announce}{addr}");
    first.block_on(serve(bound));
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

//! A TCP proxy that puts distance and faults between a region and its Redis.
//!
//! Tests of limits across regions need a link that is slow (each chunk is
//! held for a delay drawn from a range, in each direction, without ever
//! overtaking an earlier chunk), and one that can fail the two ways real links
//! fail: reset (`Link::Drop`) or partitioned (`Link::BlackHole`). The proxy
//! runs on its own single-threaded tokio runtime on a background thread, so
//! sync tests, async tests and tests with paused time all see it move in real
//! time. Every queue has a limit: connections, and queued bytes a direction.

use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::time::{Instant, sleep, sleep_until};

use crate::{HarnessError, io};

/// Connections open at once; one more is accepted and closed at once.
pub const MAX_CONNECTIONS: usize = 1024;
/// Bytes read but not yet delivered, a direction of a connection; beyond
/// it the proxy stops reading and the sender's TCP window fills.
pub const MAX_QUEUED_BYTES: usize = 1 << 20;
/// Chunks read but not yet delivered, a direction of a connection.
const MAX_QUEUED_CHUNKS: usize = 4096;
/// The most one read takes, so one chunk never exceeds the byte budget.
const CHUNK_BYTES: usize = 16 * 1024;
/// Fixed so that a run's delays are the same from one run to the next.
const SEED: u64 = 0x746f_6c6c_6761_7465;

/// How long a chunk waits before it is delivered, drawn uniformly from
/// `[min, max]` for each chunk and each direction (a `max` below `min`
/// counts as `min`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delay {
    /// The shortest wait.
    pub min: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Delay {
    /// Bytes pass as soon as they are read.
    pub const fn none() -> Self {
        Self {
            min: Duration::ZERO,
            max: Duration::ZERO,
        }
    }

    fn sample(&self, rng: &mut SplitMix64) -> Duration {
        let span = self.max.saturating_sub(self.min);
        let span = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
        if span == 0 {
            return self.min;
        }
        self.min + Duration::from_nanos(rng.next() % span.saturating_add(1))
    }
}

/// The state of the link the proxy stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Bytes pass, after their delay.
    Pass,
    /// A reset link: every open connection is closed with a reset (both
    /// ends), and a new one is accepted and closed at once.
    Drop,
    /// A partition: nothing is delivered in either direction (bytes read are
    /// thrown away, so senders never block) and a new connection is accepted
    /// but never connected onward. A connection that lived through a black
    /// hole is reset when the link passes again: bytes were lost from its
    /// stream, so nothing after them could be trusted.
    BlackHole,
}

/// A TCP proxy on a free loopback port in front of `target`; it stops, closing
/// its listener and every connection, when dropped.
#[derive(Debug)]
pub struct DelayProxy {
    addr: SocketAddr,
    settings: watch::Sender<Settings>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Listens on `127.0.0.1:0` and forwards every connection to `target`.
    pub fn start(target: SocketAddr, delay: Delay) -> Result<Self, HarnessError> {
        let listener = StdListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(io("binding the delay proxy's port"))?;
        let addr = listener
            .local_addr()
            .map_err(io("reading the delay proxy's port"))?;
        listener
            .set_nonblocking(true)
            .map_err(io("making the delay proxy's listener non-blocking"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("building the delay proxy's runtime"))?;
        let listener = {
            let _runtime = runtime.enter();
            TcpListener::from_std(listener).map_err(io("registering the delay proxy's port"))?
        };
        let (settings, watched) = watch::channel(Settings {
            link: Link::Pass,
            delay,
            drops: 0,
            holes: 0,
        });
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(format!("delay-proxy-{}", addr.port()))
            // The runtime ends with the thread, dropping every connection.
            .spawn(move || runtime.block_on(serve(listener, target, watched, stopped)))
            .map_err(io("starting the delay proxy's thread"))?;
        Ok(Self {
            addr,
            settings,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The loopback address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port of [`DelayProxy::addr`].
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// Switches the link; open connections follow at their next chunk.
    pub fn set_link(&self, link: Link) {
        self.settings.send_modify(|settings| {
            if settings.link == link {
                return;
            }
            match link {
                Link::Pass => {}
                Link::Drop => settings.drops += 1,
                Link::BlackHole => settings.holes += 1,
            }
            settings.link = link;
        });
    }

    /// Chunks read from now on wait for a delay drawn from `delay`.
    pub fn set_delay(&self, delay: Delay) {
        self.settings.send_modify(|settings| settings.delay = delay);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        // A dropped sender wakes the accept loop as a sent one would.
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            // A panicked proxy has nothing left to close.
            let _ = thread.join();
        }
    }
}

/// What every connection watches. `drops` and `holes` count the times the
/// link went to `Drop` and `BlackHole`, so a connection sees a fault even
/// when the link came back before the connection looked.
#[derive(Debug, Clone, Copy)]
struct Settings {
    link: Link,
    delay: Delay,
    drops: u64,
    holes: u64,
}

/// The settings a connection was accepted under.
#[derive(Debug, Clone, Copy)]
struct Born {
    drops: u64,
    holes: u64,
    onward: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pass,
    Swallow,
    Close,
}

impl Born {
    fn under(settings: &Settings) -> Self {
        Self {
            drops: settings.drops,
            holes: settings.holes,
            onward: settings.link == Link::Pass,
        }
    }

    fn fate(&self, now: &Settings) -> Fate {
        let in_its_hole = now.link == Link::BlackHole;
        if now.drops != self.drops {
            Fate::Close
        } else if !self.onward {
            // Accepted inside a black hole: it lives as long as that hole.
            if in_its_hole && now.holes == self.holes {
                Fate::Swallow
            } else {
                Fate::Close
            }
        } else if now.holes != self.holes {
            if in_its_hole {
                Fate::Swallow
            } else {
                Fate::Close
            }
        } else {
            Fate::Pass
        }
    }
}

async fn serve(
    listener: TcpListener,
    target: SocketAddr,
    settings: watch::Receiver<Settings>,
    mut stop: oneshot::Receiver<()>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = tokio::task::JoinSet::new();
    let mut accepted: u64 = 0;
    loop {
        let client = tokio::select! {
            _ = &mut stop => return,
            client = listener.accept() => client,
        };
        while connections.try_join_next().is_some() {}
        let Ok((client, _)) = client else {
            // Out of descriptors, most likely: let connections close first.
            sleep(Duration::from_millis(10)).await;
            continue;
        };
        if settings.borrow().link == Link::Drop {
            reset(&client);
            continue;
        }
        // Over the limit, a connection is refused rather than queued.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            reset(&client);
            continue;
        };
        accepted += 1;
        let seed = SEED ^ accepted.wrapping_mul(2);
        connections.spawn(connection(client, target, settings.clone(), seed, slot));
    }
}

async fn connection(
    mut client: TcpStream,
    target: SocketAddr,
    settings: watch::Receiver<Settings>,
    seed: u64,
    _slot: OwnedSemaphorePermit,
) {
    let born = Born::under(&settings.borrow());
    if !born.onward {
        swallow(&mut client, settings, born).await;
        return;
    }
    let server = tokio::select! {
        server = TcpStream::connect(target) => server,
        () = until_closed(settings.clone(), born) => Err(std::io::ErrorKind::ConnectionAborted.into()),
    };
    let Ok(mut server) = server else {
        // The client sees the refusal as a reset.
        reset(&client);
        return;
    };
    // Chunks are delayed on purpose; Nagle would add delays nobody asked for.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let closed = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let up = pump(client_read, server_write, &settings, born, SplitMix64(seed));
        let down = pump(
            server_read,
            client_write,
            &settings,
            born,
            SplitMix64(seed ^ 1),
        );
        let relay = async {
            tokio::join!(up, down);
            // Both ends closed inside a black hole: even that is not delivered.
            if born.fate(&settings.borrow()) != Fate::Pass {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = relay => false,
            () = until_closed(settings.clone(), born) => true,
        }
    };
    if closed {
        reset(&client);
        reset(&server);
    }
}

/// One direction: a reader that stamps each chunk with its delivery time, and
/// a writer that delivers the chunks in order, each no earlier than its time.
async fn pump<R, W>(
    mut from: R,
    mut to: W,
    settings: &watch::Receiver<Settings>,
    born: Born,
    mut rng: SplitMix64,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let budget = Arc::new(Semaphore::new(MAX_QUEUED_BYTES));
    let (queue, mut queued) = mpsc::channel::<Chunk>(MAX_QUEUED_CHUNKS);
    let read = async move {
        let mut buffer = vec![0u8; CHUNK_BYTES];
        loop {
            let read = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            let now = Instant::now();
            let current = *settings.borrow();
            if born.fate(&current) != Fate::Pass {
                // Lost on the link.
                continue;
            }
            let due = now + current.delay.sample(&mut rng);
            // `read` is at most CHUNK_BYTES, far below u32::MAX.
            let permits = u32::try_from(read).unwrap_or(u32::MAX);
            let Ok(budget) = budget.clone().acquire_many_owned(permits).await else {
                break;
            };
            let chunk = Chunk {
                due,
                bytes: buffer[..read].to_vec(),
                _budget: budget,
            };
            if queue.send(chunk).await.is_err() {
                break;
            }
        }
        // Dropping `queue` lets the writer deliver what is queued, then stop.
    };
    let write = async move {
        // One writer delivering in order: a chunk due before the previous
        // one was delivered goes right after it, never before.
        while let Some(chunk) = queued.recv().await {
            sleep_until(chunk.due).await;
            if born.fate(&settings.borrow()) != Fate::Pass {
                continue;
            }
            if to.write_all(&chunk.bytes).await.is_err() {
                return;
            }
        }
        if born.fate(&settings.borrow()) == Fate::Pass {
            // The half-close travels like the bytes before it.
            let _ = to.shutdown().await;
        }
    };
    tokio::join!(read, write);
}

struct Chunk {
    due: Instant,
    bytes: Vec<u8>,
    _budget: OwnedSemaphorePermit,
}

/// A connection accepted inside a black hole: read and forget until the hole
/// closes, then reset.
async fn swallow(client: &mut TcpStream, settings: watch::Receiver<Settings>, born: Born) {
    let forget = async {
        let mut buffer = vec![0u8; CHUNK_BYTES];
        while let Ok(read) = client.read(&mut buffer).await {
            if read == 0 {
                break;
            }
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = forget => {}
        () = until_closed(settings, born) => {}
    }
    reset(client);
}

/// Returns once the link's state means this connection must close.
async fn until_closed(mut settings: watch::Receiver<Settings>, born: Born) {
    loop {
        if born.fate(&settings.borrow_and_update()) == Fate::Close {
            return;
        }
        if settings.changed().await.is_err() {
            // The proxy is stopping.
            return;
        }
    }
}

/// Makes the close that follows a reset (RST), as a failed link would.
fn reset(stream: &TcpStream) {
    // A socket that cannot take the option still closes, with a FIN.
    let _ = stream.set_zero_linger();
}

/// splitmix64: small, fast and good enough to spread delays; no `rand`.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests;

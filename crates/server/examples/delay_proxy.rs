//! A delay proxy in front of a TCP service (testkit's `DelayProxy`), for the
//! load harnesses: prints `listening on HOST:PORT`, then forwards until
//! killed, each chunk held MIN..MAX ms each way.
//!
//!   delay_proxy TARGET_ADDR MIN_MS MAX_MS

use std::io::Write;
use std::time::Duration;

use tollgate_testkit::{Delay, DelayProxy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, target, min, max] = args.as_slice() else {
        return Err("usage: delay_proxy TARGET_ADDR MIN_MS MAX_MS".into());
    };
    let delay = Delay {
        min: Duration::from_millis(min.parse()?),
        max: Duration::from_millis(max.parse()?),
    };
    let proxy = DelayProxy::start(target.parse()?, delay)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", proxy.addr())?;
    out.flush()?;
    drop(out);
    // Forward until killed; the proxy runs on its own thread.
    loop {
        std::thread::park();
    }
}

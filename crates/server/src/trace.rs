//! `server.trace`: the capture file's writer. Decisions reach it over a
//! bounded queue ([`QUEUE_LINES`]) from the limiter, which drops and counts
//! when it is full; this thread appends them to a file opened append-only
//! at start, up to its `max_bytes`, past which lines are dropped and
//! counted too (rotate by moving the file aside and restarting).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::{Receiver, TryRecvError, sync_channel};

use prometheus_client::metrics::counter::Counter;
use tollgate_limiter::{HotSeries, TraceSink};

use crate::config::TraceSettings;

/// Lines waiting for the writer at most; a burst beyond it is dropped.
pub const QUEUE_LINES: usize = 16_384;

/// Opens `settings.path` (relative to `config_dir`) for appending and
/// starts its writer; returns the sink the limiter captures into.
pub fn open_trace(
    settings: &TraceSettings,
    config_dir: &Path,
    identity: HotSeries,
    dropped: Counter,
) -> io::Result<TraceSink> {
    let path = config_dir.join(&settings.path);
    let file = OpenOptions::new().create(true).append(true).open(&path)?;
    let written = file.metadata()?.len();
    let (lines, queue) = sync_channel(QUEUE_LINES);
    let cap = settings.max_bytes;
    let writer_dropped = dropped.clone();
    std::thread::Builder::new()
        .name("tollgate-trace".to_owned())
        .spawn(move || write_lines(queue, file, written, cap, &writer_dropped))?;
    Ok(TraceSink::new(
        lines,
        dropped,
        settings.sample_percent,
        identity,
    ))
}

/// Appends each line, flushing whenever the queue runs dry, so a reader
/// sees every decision soon after it is made. Ends when the sink is gone.
fn write_lines(queue: Receiver<String>, file: File, mut written: u64, cap: u64, dropped: &Counter) {
    let mut out = BufWriter::new(file);
    loop {
        let line = match queue.try_recv() {
            Ok(line) => line,
            Err(TryRecvError::Empty) => {
                if out.flush().is_err() {
                    tracing::warn!("server.trace: flushing the capture file failed");
                }
                match queue.recv() {
                    Ok(line) => line,
                    Err(_) => return,
                }
            }
            Err(TryRecvError::Disconnected) => {
                let _ = out.flush();
                return;
            }
        };
        let bytes = line.len() as u64 + 1;
        if written.saturating_add(bytes) > cap {
            dropped.inc();
            continue;
        }
        if writeln!(out, "{line}").is_err() {
            dropped.inc();
            continue;
        }
        written += bytes;
    }
}

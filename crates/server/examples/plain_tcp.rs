//! The HTTP load harness's floor (bench/http.sh): the same work as
//! plain_axum (parse the JSON, update one map entry) with HTTP/1.1 framed by
//! hand on raw TCP, one current-thread runtime per core sharing the port. It
//! is not a server anyone should run (it understands only what wrk sends:
//! keep-alive requests with a Content-Length), but it measures what no HTTP
//! implementation on this machine can beat: one read and one write a
//! request, with nothing between them but the work.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod baseline;

use baseline::CheckBody;

type Counts = Arc<DashMap<String, u64>>;

fn answer(counts: &Counts, body: &[u8], out: &mut Vec<u8>) {
    let text = match serde_json::from_slice::<CheckBody<'_>>(body) {
        Ok(parsed) => {
            let count = {
                let mut entry = counts.entry(parsed.key.to_owned()).or_insert(0);
                *entry += parsed.cost.unwrap_or(1);
                *entry
            };
            format!("{{\"allowed\":true,\"count\":{count}}}")
        }
        Err(_) => "{\"error\":\"bad json\"}".to_owned(),
    };
    out.extend_from_slice(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        )
        .as_bytes(),
    );
}

/// The head's length and the body's, once the head is complete.
fn framing(buf: &[u8]) -> Option<(usize, usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(0);
    Some((end, length))
}

async fn connection(mut stream: TcpStream, counts: Counts) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let mut out = Vec::with_capacity(256);
    loop {
        while let Some((head, body)) = framing(&buf) {
            if buf.len() < head + body {
                break;
            }
            answer(&counts, &buf[head..head + body], &mut out);
            buf.drain(..head + body);
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}

async fn serve(listener: TcpListener, counts: Counts) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(stream, Arc::clone(&counts)));
    }
}

fn main() -> std::io::Result<()> {
    let counts: Counts = Arc::new(DashMap::new());
    baseline::serve_per_core(move |listener| serve(listener, Arc::clone(&counts)))
}

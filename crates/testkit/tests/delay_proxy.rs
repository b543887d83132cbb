//! The delay proxy against a real redis-server: delays that hold, bytes that
//! keep their order, and the link faults a test of regions will inject.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tollgate_testkit::{Delay, DelayProxy, Link, RedisServer};

const READ_TIMEOUT: Duration = Duration::from_millis(300);

fn redis() -> (RedisServer, SocketAddr) {
    let server = RedisServer::start().expect("redis-server starts");
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()));
    (server, addr)
}

/// A connection whose handshake and commands time out after `READ_TIMEOUT`.
fn connect(proxy: &DelayProxy) -> redis::RedisResult<redis::Connection> {
    let connection = redis::Client::open(proxy.url())?.get_connection_with_timeout(READ_TIMEOUT)?;
    connection.set_read_timeout(Some(READ_TIMEOUT))?;
    Ok(connection)
}

/// A connection that waits as long as its replies take.
fn connect_patient(proxy: &DelayProxy) -> redis::Connection {
    redis::Client::open(proxy.url())
        .and_then(|client| client.get_connection())
        .expect("connects")
}

fn ping(connection: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(connection)
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn jitter(max: Duration) -> Delay {
    Delay {
        min: Duration::ZERO,
        max,
    }
}

#[test]
fn ping_passes_through_the_proxy() {
    let (_server, addr) = redis();
    let proxy = DelayProxy::start(addr, Delay::none()).expect("proxy starts");
    assert_eq!(proxy.addr().port(), proxy.port());
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
    let mut connection = connect(&proxy).expect("connects");
    assert_eq!(ping(&mut connection).expect("PING"), "PONG");
}

#[test]
#[allow(
    clippy::disallowed_methods,
    reason = "the proxy delays in wall time, so the test measures in wall time"
)]
fn a_round_trip_waits_at_least_the_minimum_delay_each_way() {
    let (_server, addr) = redis();
    let delay = Delay {
        min: ms(30),
        max: ms(80),
    };
    let proxy = DelayProxy::start(addr, delay).expect("proxy starts");
    let mut connection = connect_patient(&proxy);
    for _ in 0..5 {
        let sent = Instant::now();
        assert_eq!(ping(&mut connection).expect("PING"), "PONG");
        // A lower bound of a delay this test injected: correctness, not speed.
        assert!(sent.elapsed() >= ms(60), "took {:?}", sent.elapsed());
    }
}

#[test]
#[allow(
    clippy::disallowed_methods,
    reason = "the proxy delays in wall time, so the test measures in wall time"
)]
fn a_new_delay_holds_the_chunks_read_after_it() {
    let (_server, addr) = redis();
    let proxy = DelayProxy::start(addr, Delay::none()).expect("proxy starts");
    let mut connection = connect_patient(&proxy);
    assert_eq!(ping(&mut connection).expect("PING"), "PONG");
    proxy.set_delay(Delay {
        min: ms(50),
        max: ms(50),
    });
    let sent = Instant::now();
    assert_eq!(ping(&mut connection).expect("PING"), "PONG");
    assert!(sent.elapsed() >= ms(100), "took {:?}", sent.elapsed());
}

#[test]
fn a_thousand_pipelined_increments_come_back_in_order() {
    let (_server, addr) = redis();
    let proxy = DelayProxy::start(addr, jitter(ms(20))).expect("proxy starts");
    let mut connection = connect_patient(&proxy);
    let mut pipe = redis::pipe();
    for _ in 0..1_000 {
        pipe.cmd("INCR").arg("counter");
    }
    let values: Vec<i64> = pipe.query(&mut connection).expect("pipeline");
    assert_eq!(values, (1..=1_000).collect::<Vec<i64>>());
}

#[test]
fn commands_written_one_by_one_with_jitter_never_overtake_each_other() {
    let (_server, addr) = redis();
    let proxy = DelayProxy::start(addr, jitter(ms(20))).expect("proxy starts");
    let mut stream = TcpStream::connect(proxy.addr()).expect("connects");
    stream.set_nodelay(true).expect("nodelay");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    // Each command is its own write, so many are their own chunk with their
    // own delay: a later one drawing a shorter delay must still wait.
    for _ in 0..1_000 {
        stream
            .write_all(b"*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n")
            .expect("write");
    }
    let mut replies = BufReader::new(stream);
    for expected in 1..=1_000 {
        let mut line = String::new();
        replies.read_line(&mut line).expect("reply");
        assert_eq!(line, format!(":{expected}\r\n"));
    }
}

#[test]
fn a_value_larger_than_the_queue_bound_arrives_intact() {
    let (_server, addr) = redis();
    let proxy = DelayProxy::start(addr, jitter(ms(5))).expect("proxy starts");
    let mut connection = connect_patient(&proxy);
    let value: Vec<u8> = (0..4 * tollgate_testkit::MAX_QUEUED_BYTES)
        .map(|i| (i % 251) as u8)
        .collect();
    let () = redis::cmd("SET")
        .arg("big")
        .arg(&value)
        .query(&mut connection)
        .expect("SET");
    let back: Vec<u8> = redis::cmd("GET")
        .arg("big")
        .query(&mut connection)
        .expect("GET");
    assert!(back == value, "the value came back changed");
}

#[test]
fn a_dropped_link_fails_the_next_command_and_closes_new_connections() {
    let (_server, addr) = redis();
    let proxy = DelayProxy::start(addr, Delay::none()).expect("proxy starts");
    let mut open = connect(&proxy).expect("connects");
    assert_eq!(ping(&mut open).expect("PING"), "PONG");

    proxy.set_link(Link::Drop);
    assert!(
        ping(&mut open).is_err(),
        "an open connection survived a drop"
    );
    let refused = connect(&proxy).and_then(|mut new| ping(&mut new));
    assert!(refused.is_err(), "a new connection passed a dropped link");

    proxy.set_link(Link::Pass);
    let mut new = connect(&proxy).expect("connects");
    assert_eq!(ping(&mut new).expect("PING"), "PONG");
}

#[test]
fn a_black_hole_times_commands_out_and_passing_again_serves_new_connections() {
    let (_server, addr) = redis();
    let proxy = DelayProxy::start(addr, Delay::none()).expect("proxy starts");
    let mut before = connect(&proxy).expect("connects");
    assert_eq!(ping(&mut before).expect("PING"), "PONG");

    proxy.set_link(Link::BlackHole);
    let lost = ping(&mut before).expect_err("a reply crossed a black hole");
    assert!(lost.is_timeout(), "not a timeout: {lost}");
    // The handshake of a new client is lost the same way...
    let Err(lost) = connect(&proxy) else {
        panic!("a handshake crossed a black hole");
    };
    assert!(lost.is_timeout(), "not a timeout: {lost}");
    // ...though the proxy accepted its TCP connection.
    let mut during = TcpStream::connect(proxy.addr()).expect("a black hole still accepts");
    during
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("read timeout");
    during.write_all(b"PING\r\n").expect("write");
    let mut reply = [0u8; 16];
    let lost = during
        .read(&mut reply)
        .expect_err("a reply crossed a black hole");
    assert!(
        matches!(lost.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "not a timeout: {lost}"
    );

    proxy.set_link(Link::Pass);
    let mut after = connect(&proxy).expect("connects");
    assert_eq!(ping(&mut after).expect("PING"), "PONG");
    // Bytes were lost from their streams: those connections are reset.
    assert!(
        ping(&mut before).is_err(),
        "a connection outlived its black hole"
    );
    let reset = during.read(&mut reply);
    let closed = match &reset {
        Ok(read) => *read == 0,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    };
    assert!(closed, "a connection outlived its black hole: {reset:?}");
}

#[test]
fn dropping_the_proxy_closes_its_connections_and_its_port() {
    let (_server, addr) = redis();
    let proxy = DelayProxy::start(addr, Delay::none()).expect("proxy starts");
    let proxy_addr = proxy.addr();
    let mut open = connect(&proxy).expect("connects");
    assert_eq!(ping(&mut open).expect("PING"), "PONG");

    drop(proxy);
    assert!(ping(&mut open).is_err(), "a connection outlived its proxy");
    assert!(
        TcpStream::connect(proxy_addr).is_err(),
        "the port still listens"
    );
}

#[tokio::test]
async fn an_async_client_works_through_the_proxy_and_the_proxy_drops_inside_a_runtime() {
    let (_server, addr) = redis();
    let proxy = DelayProxy::start(addr, Delay::none()).expect("proxy starts");
    let client = redis::Client::open(proxy.url()).expect("client");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let pong: String = redis::cmd("PING")
        .query_async(&mut connection)
        .await
        .expect("PING");
    assert_eq!(pong, "PONG");
    drop(proxy);
}

//! Upstream connection handling against a scripted HTTP/1.1 server on loopback: connections are
//! reused, a pooled connection the server closed while it was idle is replaced, and a request
//! that died unanswered on a reused connection (the server closed it as the request arrived) is
//! sent again on a new one, but not one the server read and dropped later. Every wait is
//! bounded.

mod common;

use common::*;
use http::StatusCode;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the scripted upstream does on each connection.
#[derive(Clone, Copy)]
enum Script {
    /// Answers every request; closes the connection after it has been idle this long.
    CloseWhenIdle(Duration),
    /// Answers the first request; on the second, reads it and closes without an answer.
    DropSecond,
    /// As `DropSecond`, closing this long after reading the second request (a worker that
    /// crashed while on it).
    DropSecondAfter(Duration),
}

#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    requests: AtomicUsize,
}

const ANSWER: &str = r#"{"choices":[{"index":0,"text":"ok","finish_reason":"stop"}],"usage":{"completion_tokens":1}}"#;

/// Reads one request (head and `content-length` body); `false` at end of file or on error.
async fn read_request(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                buf.drain(..end + 4 + len);
                return true;
            }
        }
        let mut chunk = [0u8; 4096];
        match tcp.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn scripted(script: Script) -> (SocketAddr, Arc<Seen>, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut tcp, _)) = l.accept().await {
            s.connections.fetch_add(1, Ordering::SeqCst);
            let s = s.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for n in 0.. {
                    let read = read_request(&mut tcp, &mut buf);
                    let got = match script {
                        Script::CloseWhenIdle(idle) if n > 0 => {
                            tokio::time::timeout(idle, read).await.unwrap_or(false)
                        }
                        _ => read.await,
                    };
                    if !got {
                        return;
                    }
                    s.requests.fetch_add(1, Ordering::SeqCst);
                    if matches!(script, Script::DropSecond) && n == 1 {
                        return;
                    }
                    if let Script::DropSecondAfter(hold) = script
                        && n == 1
                    {
                        tokio::time::sleep(hold).await;
                        return;
                    }
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{ANSWER}",
                        ANSWER.len()
                    );
                    if tcp.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen, task)
}

async fn complete(gw: SocketAddr) -> StatusCode {
    let a = call(
        gw,
        "POST",
        "/v1/completions",
        r#"{"prompt":"p","max_tokens":1}"#,
        &[],
    )
    .await;
    assert!(
        a.status != StatusCode::OK || a.body == ANSWER,
        "the answer passes through unchanged: {}",
        a.body
    );
    a.status
}

fn stops(text: &str) -> Option<f64> {
    value(
        text,
        "headroom_gateway_requests_total{class=\"default\",tenant=\"other\",outcome=\"stop\"}",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_requests_reuse_one_upstream_connection() {
    let (up, seen, task) = scripted(Script::CloseWhenIdle(Duration::from_secs(5))).await;
    let gw = gateway("{}", &[url(up)], None).await;
    for _ in 0..5 {
        assert_eq!(complete(gw.addr).await, StatusCode::OK);
    }
    assert_eq!(seen.requests.load(Ordering::SeqCst), 5);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    assert_eq!(stops(&scrape(gw.addr).await), Some(5.0));
    gw.shutdown().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_closed_by_the_server_is_replaced_at_once() {
    // The server closes a connection idle for 50 ms (uvicorn does so after 5 s).
    let (up, seen, task) = scripted(Script::CloseWhenIdle(Duration::from_millis(50))).await;
    let gw = gateway("{}", &[url(up)], None).await;
    assert_eq!(complete(gw.addr).await, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    assert_eq!(complete(gw.addr).await, StatusCode::OK);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 2);
    assert_eq!(stops(&scrape(gw.addr).await), Some(2.0));
    gw.shutdown().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_lost_on_a_closing_reused_connection_goes_to_a_new_one() {
    let (up, seen, task) = scripted(Script::DropSecond).await;
    let gw = gateway("{}", &[url(up)], None).await;
    assert_eq!(complete(gw.addr).await, StatusCode::OK);
    let t0 = Instant::now();
    // Sent on the pooled connection, which the server reads and closes unanswered; then sent
    // again on a new connection, which answers.
    assert_eq!(complete(gw.addr).await, StatusCode::OK);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 2);
    assert_eq!(stops(&scrape(gw.addr).await), Some(2.0));
    gw.shutdown().await;
    task.abort();
}

/// A request the upstream read and then dropped 50 ms later is not sent again (the engine would
/// run it twice): the client gets a 502, and the upstream saw it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_upstream_read_and_dropped_is_not_sent_again() {
    let (up, seen, task) = scripted(Script::DropSecondAfter(Duration::from_millis(50))).await;
    let gw = gateway("{}", &[url(up)], None).await;
    assert_eq!(complete(gw.addr).await, StatusCode::OK);
    assert_eq!(complete(gw.addr).await, StatusCode::BAD_GATEWAY);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1);
    gw.shutdown().await;
    task.abort();
}

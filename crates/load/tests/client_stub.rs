//! The streaming client against the loopback stub server: timing, usage, and every outcome.
//! Every test is bounded (timeouts of a few seconds) and the stub stops when dropped.

use headroom_core::Outcome;
use headroom_load::client::{
    CancellationFlag, ClientConfig, PreparedRequest, RequestRecord, Target,
};
use headroom_load::prompt::DrawnRequest;
use headroom_load::testkit::{StubConfig, StubFault, StubServer};
use headroom_load::workload::Endpoint;
use headroom_testkit::refusing_port;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn request(endpoint: Endpoint, max_tokens: u32) -> PreparedRequest {
    PreparedRequest::encode(
        &DrawnRequest {
            class: 0,
            endpoint,
            prefix: Arc::from("system words"),
            prompt: " three more words".into(),
            requested_prompt_tokens: 5,
            max_tokens,
            ignore_eos: true,
        },
        Some("tiny"),
    )
}

fn target(stub: &StubServer, timeout: Duration) -> Target {
    Target::with_config(
        &stub.url(),
        Some("sk-test"),
        Some("tiny"),
        ClientConfig {
            request_timeout: timeout,
            ..ClientConfig::default()
        },
    )
    .unwrap()
}

const MS: u64 = 1_000_000;

#[tokio::test]
async fn chat_stream_timing_and_usage() {
    let stub = StubServer::start(StubConfig {
        ttft: Duration::from_millis(40),
        itl: Duration::from_millis(10),
        ..StubConfig::default()
    })
    .unwrap();
    let t = target(&stub, Duration::from_secs(10));
    let start = Instant::now();
    let r = t
        .send(&request(Endpoint::Chat, 6), start, &CancellationFlag::new())
        .await;
    assert_eq!(r.outcome, Outcome::Length, "{:?}", r.message);
    // 6 content chunks; the role-only chunk does not count
    assert_eq!(r.timing.content_chunk_ns.len(), 6);
    // role + 6 content + usage + [DONE]
    assert_eq!(r.sse_events, 9);
    assert_eq!(r.timing.output_tokens, Some(6));
    // the stub counts words: "system words" + "three more words"
    assert_eq!(r.prompt_tokens, Some(5));
    assert_eq!(r.finish_reason.as_deref(), Some("length"));
    let ttft = r.timing.ttft_ns().unwrap();
    assert!((40 * MS..1_000 * MS).contains(&ttft), "ttft {ttft}");
    let itl: Vec<u64> = r.timing.itl_ns().collect();
    assert_eq!(itl.len(), 5);
    // The stub sleeps 10 ms between chunks, so first to last content chunk spans at least
    // 50 ms; single gaps can be shorter on a loaded machine (a late chunk, then a prompt one).
    assert!(itl.iter().sum::<u64>() >= 50 * MS, "{itl:?}");
    // e2e ≥ 40 + 5·10 ms, and the end is after the last content chunk
    assert!(r.timing.end_ns >= 90 * MS);
    assert!(r.timing.end_ns >= *r.timing.content_chunk_ns.last().unwrap());
    let tpot = r.timing.tpot_ns().unwrap();
    assert!(tpot >= 9 * MS, "tpot {tpot}");
    assert!(r.send_lag_ns < 50 * MS);
    assert_eq!(r.requested_max_tokens, 6);
}

#[tokio::test]
async fn completions_stream() {
    let stub = StubServer::start(StubConfig::default()).unwrap();
    let t = target(&stub, Duration::from_secs(10));
    let r = t
        .send(
            &request(Endpoint::Completions, 50),
            Instant::now(),
            &CancellationFlag::new(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Length);
    assert_eq!(r.timing.content_chunk_ns.len(), 50);
    assert_eq!(r.sse_events, 52);
    assert_eq!(r.timing.output_tokens, Some(50));
}

#[tokio::test]
async fn http_errors_carry_the_server_message() {
    let stub = StubServer::start(StubConfig {
        fault: StubFault::Status(503, "overloaded, retry later".into()),
        ..StubConfig::default()
    })
    .unwrap();
    let t = target(&stub, Duration::from_secs(10));
    let r = t
        .send(
            &request(Endpoint::Chat, 5),
            Instant::now(),
            &CancellationFlag::new(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::HttpStatus(503));
    assert_eq!(r.message.as_deref(), Some("overloaded, retry later"));
    assert!(r.timing.content_chunk_ns.is_empty());

    // wrong model: vLLM's 404 with its message
    let mut d = request(Endpoint::Chat, 5);
    d.body =
        serde_json::to_vec(&serde_json::json!({"model": "nope", "prompt": "x", "stream": true}))
            .unwrap()
            .into();
    let ok = StubServer::start(StubConfig::default()).unwrap();
    let r = target(&ok, Duration::from_secs(5))
        .send(&d, Instant::now(), &CancellationFlag::new())
        .await;
    assert_eq!(r.outcome, Outcome::HttpStatus(404));
    assert!(r.message.unwrap().contains("does not exist"));
}

#[tokio::test]
async fn error_object_mid_stream_is_a_server_error() {
    let stub = StubServer::start(StubConfig {
        fault: StubFault::ErrorAfter(3),
        ..StubConfig::default()
    })
    .unwrap();
    let r = target(&stub, Duration::from_secs(10))
        .send(
            &request(Endpoint::Chat, 10),
            Instant::now(),
            &CancellationFlag::new(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Error);
    assert_eq!(r.timing.content_chunk_ns.len(), 3);
    assert_eq!(r.message.as_deref(), Some("injected engine failure"));
}

#[tokio::test]
async fn dropped_connection_is_transport() {
    let stub = StubServer::start(StubConfig {
        fault: StubFault::DropAfter(4),
        ..StubConfig::default()
    })
    .unwrap();
    let r = target(&stub, Duration::from_secs(10))
        .send(
            &request(Endpoint::Completions, 10),
            Instant::now(),
            &CancellationFlag::new(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Transport, "{:?}", r.message);
    assert_eq!(r.timing.content_chunk_ns.len(), 4);
}

#[tokio::test]
async fn timeout_and_cancel() {
    let stub = StubServer::start(StubConfig {
        fault: StubFault::Stall,
        ..StubConfig::default()
    })
    .unwrap();
    let t = target(&stub, Duration::from_millis(300));
    let start = Instant::now();
    let r = t
        .send(
            &request(Endpoint::Chat, 10),
            start,
            &CancellationFlag::new(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Timeout);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(r.timing.end_ns >= 300 * MS);

    let t = target(&stub, Duration::from_secs(30));
    let cancel = CancellationFlag::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let start = Instant::now();
    let r = t.send(&request(Endpoint::Chat, 10), start, &cancel).await;
    assert_eq!(r.outcome, Outcome::ClientCancel);
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn unreachable_target_is_transport() {
    let (_reserved, port) = refusing_port();
    let t = Target::with_config(
        &format!("http://127.0.0.1:{port}"),
        None,
        None,
        ClientConfig {
            request_timeout: Duration::from_secs(5),
            ..ClientConfig::default()
        },
    )
    .unwrap();
    let r = t
        .send(
            &request(Endpoint::Chat, 3),
            Instant::now(),
            &CancellationFlag::new(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Transport);
    assert!(r.message.unwrap().to_lowercase().contains("connect"));
}

#[tokio::test]
async fn many_concurrent_streams_on_one_thread() {
    let stub = StubServer::start(StubConfig {
        itl: Duration::from_millis(2),
        ..StubConfig::default()
    })
    .unwrap();
    let t = target(&stub, Duration::from_secs(20));
    let cancel = CancellationFlag::new();
    let req = request(Endpoint::Completions, 20);
    let futs = (0..300).map(|_| t.send(&req, Instant::now(), &cancel));
    let recs = futures_util::future::join_all(futs).await;
    assert!(recs.iter().all(|r| r.outcome == Outcome::Length));
    assert!(recs.iter().all(|r| r.timing.content_chunk_ns.len() == 20));
    assert_eq!(stub.requests(), 300);
}

/// Reads one whole request (head, then `Content-Length` bytes of body) from `s` into `buf` and
/// removes it; `false` when the connection ended or timed out first.
fn read_request(s: &mut std::net::TcpStream, buf: &mut Vec<u8>) -> bool {
    use std::io::Read;
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= head_end + 4 + len {
                buf.drain(..head_end + 4 + len);
                return true;
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
}

/// The two-event completion stream the raw servers answer with (`Content-Length` framed).
fn raw_response() -> String {
    let body =
        "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A raw HTTP/1.1 server on loopback for connection-handling tests: accepts `conns` connections
/// one after another, answers `per_conn` requests on each with a two-event completion stream
/// (`Content-Length` framed, keep-alive), then closes that connection. Returns the URL and a
/// handle yielding the requests served per connection. Sockets time out after 5 s, so the thread
/// always ends.
fn raw_server(conns: usize, per_conn: usize) -> (String, std::thread::JoinHandle<Vec<usize>>) {
    raw_server_with(conns, per_conn, false)
}

/// As [`raw_server`]; with `close_on_next`, a connection that has served its `per_conn`
/// requests stays open until the next request starts to arrive on it, then closes unanswered:
/// the client's request always meets a connection that took it and died with no answer.
fn raw_server_with(
    conns: usize,
    per_conn: usize,
    close_on_next: bool,
) -> (String, std::thread::JoinHandle<Vec<usize>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let resp = raw_response();
        let mut served = Vec::new();
        for _ in 0..conns {
            let Ok((mut s, _)) = listener.accept() else {
                break;
            };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut n = 0;
            let mut buf = Vec::new();
            while n < per_conn {
                if !read_request(&mut s, &mut buf) {
                    break;
                }
                s.write_all(resp.as_bytes()).unwrap();
                n += 1;
            }
            if close_on_next && buf.is_empty() {
                let _ = s.read(&mut [0u8; 4096]);
            }
            served.push(n);
        }
        served
    });
    (url, h)
}

#[tokio::test]
async fn connections_are_reused() {
    // one connection serving three requests: the pool must hand the same connection back
    let (url, h) = raw_server(1, 3);
    let t = Target::new(&url, None, Some("tiny")).unwrap();
    for _ in 0..3 {
        let r = t
            .send(
                &request(Endpoint::Completions, 1),
                Instant::now(),
                &CancellationFlag::new(),
            )
            .await;
        assert_eq!(r.outcome, Outcome::Length, "{:?}", r.message);
        assert_eq!(r.timing.content_chunk_ns.len(), 1);
    }
    drop(t);
    assert_eq!(h.join().unwrap(), vec![3]);
}

/// The race the previous test avoids with its pause: the next request leaves at once, often
/// before the server's close has been read, so it goes out on a connection that is already
/// closed and dies with no answer. Each must still end `length`, on a new connection, and
/// promptly (a finished connection kept alive once left such a request waiting until its
/// 600 s deadline).
#[tokio::test]
async fn a_request_racing_the_servers_close_goes_to_a_new_connection() {
    let (url, h) = raw_server(20, 1);
    let t = Target::new(&url, None, Some("tiny")).unwrap();
    let t0 = Instant::now();
    for i in 0..20 {
        let r = t
            .send(
                &request(Endpoint::Completions, 1),
                Instant::now(),
                &CancellationFlag::new(),
            )
            .await;
        assert_eq!(r.outcome, Outcome::Length, "request {i}: {:?}", r.message);
    }
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    drop(t);
    assert_eq!(h.join().unwrap(), vec![1; 20]);
}

#[tokio::test]
async fn a_connection_the_server_closed_is_replaced() {
    // every connection serves one request, then the server closes it while it sits idle in the
    // pool: each later request must notice and go to a new connection, never failing
    let (url, h) = raw_server(3, 1);
    let t = Target::new(&url, None, Some("tiny")).unwrap();
    for i in 0..3 {
        let r = t
            .send(
                &request(Endpoint::Completions, 1),
                Instant::now(),
                &CancellationFlag::new(),
            )
            .await;
        assert_eq!(r.outcome, Outcome::Length, "request {i}: {:?}", r.message);
        // let the close reach the client before the next request
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(t);
    assert_eq!(h.join().unwrap(), vec![1, 1, 1]);
}

/// The open-loop pacer's path: `send_now` writes the request onto an idle connection from a
/// plain thread (no runtime there, as on the pacer), `complete` awaits the answer in a task.
/// Returns whether `send_now` sent it, how long after the start `send_now` returned, and the
/// record; without an idle connection the request goes the ordinary way, as the runner does.
async fn send_from_thread(t: &Target, req: &PreparedRequest) -> (bool, Duration, RequestRecord) {
    let start = Instant::now();
    let (t2, r2) = (t.clone(), req.clone());
    let (sent, returned_after) = std::thread::spawn(move || {
        let s = t2.send_now(&r2);
        (s, start.elapsed())
    })
    .join()
    .unwrap();
    let cancel = CancellationFlag::new();
    match sent {
        Some(s) => (
            true,
            returned_after,
            t.complete(req, s, start, &cancel).await,
        ),
        None => (false, returned_after, t.send(req, start, &cancel).await),
    }
}

#[tokio::test]
async fn a_request_sent_from_the_pacer_thread_reuses_an_idle_connection() {
    let (url, h) = raw_server(1, 3);
    let t = Target::new(&url, None, Some("tiny")).unwrap();
    let req = request(Endpoint::Completions, 1);
    // Nothing idle yet: the first request connects the ordinary way.
    let (direct, _, r) = send_from_thread(&t, &req).await;
    assert!(!direct);
    assert_eq!(r.outcome, Outcome::Length, "{:?}", r.message);
    for i in 0..2 {
        let (direct, returned_after, r) = send_from_thread(&t, &req).await;
        assert!(direct, "request {i} was not sent on the idle connection");
        // The send lag ends at the write, before `send_now` returned.
        assert!(
            Duration::from_nanos(r.send_lag_ns) <= returned_after,
            "request {i}: {} ns > {returned_after:?}",
            r.send_lag_ns
        );
        assert_eq!(r.outcome, Outcome::Length, "request {i}: {:?}", r.message);
        assert_eq!(r.timing.content_chunk_ns.len(), 1);
    }
    drop(t);
    assert_eq!(h.join().unwrap(), vec![3]);
}

/// Every way an idle connection can be dead when the pacer takes it: closed and the close
/// already read (`send_now` skips it), or closed with the close not yet read (the request goes
/// out and dies unanswered; `complete` sends it again on a new connection). Each request must
/// still end `length`, promptly, each on its own connection.
#[tokio::test]
async fn a_request_sent_from_the_pacer_thread_survives_a_closed_idle_connection() {
    // (close when the next request arrives, pause between requests)
    for (close_on_next, pause_ms) in [(true, 0u64), (false, 0), (false, 50)] {
        let (url, h) = raw_server_with(8, 1, close_on_next);
        let mut sent_direct = 0;
        let t = Target::new(&url, None, Some("tiny")).unwrap();
        let req = request(Endpoint::Completions, 1);
        let t0 = Instant::now();
        for i in 0..8 {
            let (direct, returned_after, r) = send_from_thread(&t, &req).await;
            if direct {
                // Sent again after the first send died, the request still left on time: the
                // send lag is the first send's.
                assert!(Duration::from_nanos(r.send_lag_ns) <= returned_after);
            }
            sent_direct += u32::from(direct);
            assert_eq!(
                r.outcome,
                Outcome::Length,
                "pause {pause_ms} ms, request {i}: {:?}",
                r.message
            );
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        drop(t);
        assert_eq!(h.join().unwrap(), vec![1; 8], "pause {pause_ms} ms");
        if close_on_next {
            // Every request after the first went out on the idle connection and was sent again.
            assert_eq!(sent_direct, 7);
        }
    }
}

/// A server that answers the first request on each connection, then reads the next one, keeps
/// it for `hold` and closes the connection without answering (a worker that crashed, a proxy
/// that dropped it). Returns the URL and a handle yielding every request it read.
fn dropping_server(hold: Duration, conns: usize) -> (String, std::thread::JoinHandle<usize>) {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let resp = raw_response();
        let mut read = 0;
        for _ in 0..conns {
            let Ok((mut s, _)) = listener.accept() else {
                break;
            };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = Vec::new();
            if !read_request(&mut s, &mut buf) {
                continue;
            }
            read += 1;
            s.write_all(resp.as_bytes()).unwrap();
            if read_request(&mut s, &mut buf) {
                read += 1;
                std::thread::sleep(hold);
            }
        }
        read
    });
    (url, h)
}

/// A request the server read and then dropped (it closed the connection 50 ms later, with no
/// answer) is never sent again, on either path: the server must see each request once, and the
/// client records a transport error. (Sending it again made a server see one request up to 14
/// times: each copy went to the next idle connection, which the server dropped too.) A
/// connection that dies at once may be the race with a server closing an idle keep-alive
/// connection; that request is sent again, once at most.
#[tokio::test]
async fn a_request_the_server_read_and_dropped_is_not_sent_again() {
    for direct in [false, true] {
        let (url, h) = dropping_server(Duration::from_millis(50), 3);
        let t = Target::new(&url, None, Some("tiny")).unwrap();
        let req = request(Endpoint::Completions, 1);
        for i in 0..3 {
            // The first request opens a connection and is answered; the second reuses it.
            let r = t.send(&req, Instant::now(), &CancellationFlag::new()).await;
            assert_eq!(r.outcome, Outcome::Length, "{i}: {:?}", r.message);
            let r = if direct {
                let (sent, _, r) = send_from_thread(&t, &req).await;
                assert!(sent);
                r
            } else {
                t.send(&req, Instant::now(), &CancellationFlag::new()).await
            };
            assert_eq!(r.outcome, Outcome::Transport, "direct {direct}, {i}");
        }
        drop(t);
        // 3 connections × (one answered + one dropped): no copy.
        assert_eq!(h.join().unwrap(), 6, "direct {direct}");
    }
    // Dropped at once: sent again at most once (the second connection's first request is
    // answered, so it then succeeds).
    let (url, h) = dropping_server(Duration::ZERO, 2);
    let t = Target::new(&url, None, Some("tiny")).unwrap();
    let req = request(Endpoint::Completions, 1);
    let r = t.send(&req, Instant::now(), &CancellationFlag::new()).await;
    assert_eq!(r.outcome, Outcome::Length, "{:?}", r.message);
    let r = t.send(&req, Instant::now(), &CancellationFlag::new()).await;
    assert!(
        matches!(r.outcome, Outcome::Length | Outcome::Transport),
        "{:?}",
        r.outcome
    );
    drop(t);
    assert!(h.join().unwrap() <= 3);
}

/// A hostile or broken server cannot grow the client's memory without bound: an endless line,
/// an event of many huge `data:` lines and a stream that ignores `max_tokens` each end their
/// request as `protocol`, soon, naming the bound; the next request on the same target works.
#[tokio::test]
async fn hostile_streams_end_as_protocol_within_the_bounds() {
    use headroom_load::client::sse::{MAX_EVENT_BYTES, MAX_LINE_BYTES, chunk_limit};
    let cases = [
        (StubFault::EndlessLine, "line longer than"),
        (
            StubFault::HugeEvent {
                line_bytes: 512 * 1024,
                lines: 2 * MAX_EVENT_BYTES / (512 * 1024),
            },
            "event larger than",
        ),
        (
            StubFault::HugeEvent {
                line_bytes: 2 * MAX_LINE_BYTES,
                lines: 1,
            },
            "line longer than",
        ),
        (StubFault::IgnoreMaxTokens, "more than 84 content chunks"),
    ];
    assert_eq!(chunk_limit(10), 84);
    for (fault, needle) in cases {
        let stub = StubServer::start(StubConfig {
            fault: fault.clone(),
            ..StubConfig::default()
        })
        .unwrap();
        let t = target(&stub, Duration::from_secs(20));
        let t0 = Instant::now();
        let r = t
            .send(
                &request(Endpoint::Completions, 10),
                Instant::now(),
                &CancellationFlag::new(),
            )
            .await;
        assert_eq!(r.outcome, Outcome::Protocol, "{fault:?}: {:?}", r.message);
        let m = r.message.unwrap_or_default();
        assert!(m.contains(needle), "{fault:?}: {m}");
        assert!(r.timing.content_chunk_ns.len() <= chunk_limit(10));
        assert!(t0.elapsed() < Duration::from_secs(10), "{fault:?}");
        // The connection was dropped, not pooled with a stream still running on it.
        assert_eq!(t.idle_connections(), 0, "{fault:?}");
    }
}

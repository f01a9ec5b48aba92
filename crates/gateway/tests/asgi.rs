//! The gateway's path handling against a real ASGI upstream: uvicorn + starlette, the stack
//! vLLM's API server runs on, which percent-decodes the path before routing and answers a
//! trailing slash with a 307 naming its own address (`scripts/asgi/app.py`).
//!
//! The stack is installed by `scripts/asgi/setup.sh` (a venv under `~/.cache/headroom-asgi`;
//! `HEADROOM_ASGI_PYTHON` names another interpreter). Without it these tests skip, loudly;
//! with `HEADROOM_REQUIRE_ASGI=1` (set by `scripts/test` once the setup succeeded) they fail.

mod common;

use common::{call, gateway, scrape, sum_where, value};
use http::StatusCode;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `scripts/asgi/app.py`, stopped (by its PID) when dropped.
struct Asgi {
    child: Child,
    url: String,
    port: u16,
}

impl Drop for Asgi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the ASGI app, or `None` (test skipped) when the stack is not installed and
/// `HEADROOM_REQUIRE_ASGI` is not `1`.
fn asgi() -> Option<Asgi> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let py = std::env::var_os("HEADROOM_ASGI_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/headroom-asgi/venv/bin/python"))
        });
    let required = std::env::var("HEADROOM_REQUIRE_ASGI").is_ok_and(|v| v == "1");
    let Some(py) = py.filter(|p| p.exists()) else {
        assert!(
            !required,
            "HEADROOM_REQUIRE_ASGI=1 but no uvicorn/starlette venv; run scripts/asgi/setup.sh"
        );
        eprintln!("SKIPPED: uvicorn/starlette not installed (scripts/asgi/setup.sh installs them)");
        return None;
    };
    let mut child = Command::new(&py)
        .arg(root.join("scripts/asgi/app.py"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", py.display()));
    let out = child.stdout.take().expect("stdout piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
    let port: u16 = line
        .trim()
        .strip_prefix("PORT ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            let _ = child.kill();
            panic!("the ASGI app did not report its port: {line:?}")
        });
    Some(Asgi {
        child,
        url: format!("http://127.0.0.1:{port}"),
        port,
    })
}

const KEY: &str = "sk-asgi-test";
/// The client's `Authorization` header for [`KEY`].
const AUTH: [(&str, &str); 1] = [("authorization", "Bearer sk-asgi-test")];

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

async fn gw_in_front_of(up: &Asgi) -> headroom_gateway::GatewayHandle {
    // SAFETY: a variable unique to this test file, set to the same value by every test.
    unsafe { std::env::set_var("HEADROOM_ASGI_TEST_KEY", KEY) };
    gateway(
        "api_key_env: HEADROOM_ASGI_TEST_KEY\n\
         classes:\n\
         \x20 - {name: chat, route: chat, concurrency: {limit: 1, queue: 0}}\n\
         \x20 - {name: completions, route: completions}\n",
        std::slice::from_ref(&up.url),
        None,
    )
    .await
}

/// Encoded spellings of blocked and measured routes are decided on the decoded path, which is
/// what starlette routes on: the LoRA admin endpoints stay unreachable, and `%63ompletions` is
/// classified, admitted (limit 1, queue 0) and measured like `completions`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_paths_are_routed_as_the_upstream_decodes_them() {
    let Some(up) = asgi() else { return };
    let gw = gw_in_front_of(&up).await;
    let h = AUTH;
    for p in [
        "/v1/load_lora_adapter",
        "/v1/load%5Flora%5Fadapter",
        "/v1/load%5flora%5fadapter",
        "/v1/%6Coad_lora_adapter",
        "/v1/load_lora_adapter/",
        "/v1/unload%5Flora%5Fadapter",
        "/v1/unload_lora_adapter/?x=1",
    ] {
        let a = call(
            gw.addr,
            "POST",
            p,
            r#"{"lora_name":"x","lora_path":"/x"}"#,
            &h,
        )
        .await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{p}: {}", a.body);
        assert!(!a.body.contains("lora_reached"), "{p}: {}", a.body);
    }
    // Measured and admitted like the plain spelling, forwarded as the plain spelling.
    for p in [
        "/v1/chat/%63ompletions",
        "/v1/chat/completions/",
        "/v1/%63hat/completions?x=1",
    ] {
        let a = call(gw.addr, "POST", p, r#"{"messages":[]}"#, &h).await;
        assert_eq!(a.status, StatusCode::OK, "{p}: {}", a.body);
        let seen = json(&a.body);
        assert_eq!(seen["path"], "/v1/chat/completions", "{p}");
        assert_eq!(seen["raw_path"], "/v1/chat/completions", "{p}");
    }
    let a = call(
        gw.addr,
        "POST",
        "/v1/%63ompletions",
        r#"{"prompt":"x"}"#,
        &h,
    )
    .await;
    assert_eq!(json(&a.body)["path"], "/v1/completions");
    // Limit 1, queue 0: of four concurrent encoded requests one is served, three refused.
    let body = r#"{"messages":[],"sleep":0.6}"#;
    let calls = (0..4).map(|_| call(gw.addr, "POST", "/v1/chat/%63ompletions", body, &h));
    let answers = futures_util::future::join_all(calls).await;
    let ok = answers
        .iter()
        .filter(|a| a.status == StatusCode::OK)
        .count();
    let refused = answers
        .iter()
        .filter(|a| a.status == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((ok, refused), (1, 3), "{answers:?}");
    let text = scrape(gw.addr).await;
    let family = "headroom_gateway_requests_total";
    let chat = |o: &str| {
        sum_where(
            &text,
            family,
            &["class=\"chat\"", &format!("outcome=\"{o}\"")],
        )
    };
    assert_eq!(chat("stop"), 4.0, "{text}");
    assert_eq!(chat("rejected"), 3.0, "{text}");
    let completions = sum_where(
        &text,
        family,
        &["class=\"completions\"", "outcome=\"stop\""],
    );
    assert_eq!(completions, 1.0);
    gw.shutdown().await;
}

/// Every path whose meaning depends on who decodes it, or how often, is refused with a 400 that
/// says why, counted as `bad_path`, and never reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_canonical_paths_are_refused_before_the_upstream() {
    let Some(up) = asgi() else { return };
    let gw = gw_in_front_of(&up).await;
    let h = AUTH;
    let bad = [
        "/v1/echo/../../metrics",
        "/v1/echo/%2e%2e/x",
        "/v1/echo/%2E%2e/x",
        "/v1/echo/./x",
        "/v1/echo/%2e/x",
        "/v1/chat%2Fcompletions",
        "/v1/chat%2fcompletions",
        "/v1/echo/a%5Cb",
        "/v1/echo/%2563",
        "/v1/echo/%00",
        "/v1/echo/%0d%0aX-Evil:%201",
        "/v1/echo/%FF",
        "/v1/echo/%zz",
        "//v1/models",
        "/v1//models",
    ];
    for p in bad {
        let a = call(gw.addr, "GET", p, "", &h).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{p}: {}", a.body);
        let e = json(&a.body);
        assert!(
            e["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("request path")),
            "{p}: {}",
            a.body
        );
        assert!(!a.body.contains("raw_path"), "{p} reached the upstream");
    }
    let text = scrape(gw.addr).await;
    assert_eq!(
        value(
            &text,
            "headroom_gateway_invalid_requests_total{reason=\"bad_path\"}"
        ),
        Some(bad.len() as f64)
    );
    // Canonical paths with characters that need encoding reach it decoded as sent.
    let a = call(gw.addr, "GET", "/v1/echo/a%20b/%C3%A9?q=%2F", "", &h).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let seen = json(&a.body);
    assert_eq!(seen["path"], "/v1/echo/a b/é");
    assert_eq!(seen["raw_path"], "/v1/echo/a%20b/%C3%A9");
    gw.shutdown().await;
}

/// starlette's `redirect_slashes` answers `/v1/models/` with a 307 whose `Location` names the
/// upstream's own address; the client sees a gateway-relative one, and no header names the
/// upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_redirects_do_not_leak_its_address() {
    let Some(up) = asgi() else { return };
    let gw = gw_in_front_of(&up).await;
    let h = AUTH;
    for (p, want) in [("/v1/models/", "/v1/models"), ("/health/", "/health")] {
        let a = call(gw.addr, "GET", p, "", &h).await;
        assert_eq!(a.status, StatusCode::TEMPORARY_REDIRECT, "{p}: {}", a.body);
        assert_eq!(a.headers["location"], want, "{p}");
        let port = up.port.to_string();
        for (k, v) in &a.headers {
            let v = v.to_str().unwrap_or("");
            assert!(
                !v.contains(&port) && !v.contains("127.0.0.1"),
                "{p}: {k}: {v}"
            );
        }
        // Following it through the gateway works.
        let b = call(gw.addr, "GET", want, "", &h).await;
        assert_eq!(b.status, StatusCode::OK, "{want}: {}", b.body);
    }
    gw.shutdown().await;
}

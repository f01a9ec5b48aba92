//! `slo budget`'s Prometheus client against a stand-in Prometheus API served by the test on
//! 127.0.0.1 (each server is a task of the test's runtime and ends with it):
//! - userinfo in `--prometheus` goes out as HTTP Basic authentication and the URL's query
//!   string with every call, and neither appears in any message;
//! - an impossible value (NaN, +Inf, a negative count, more bad events than events) is
//!   reported as invalid data naming the objective, never as "no data";
//! - a server that is not there is named with the operating system's reason and the question
//!   whether Prometheus runs there.

use bytes::Bytes;
use headroom_core::SloFile;
use headroom_slo::budget::{BudgetOptions, Decision, fetch_budget};
use headroom_slo::prom_api::PromClient;
use headroom_testkit::refusing_port;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the stand-in saw: (Authorization header, request target, form body).
type Seen = Arc<Mutex<Vec<(Option<String>, String, String)>>>;

/// Serves `/api/v1/query`, answering every query with one sample of value `value` (a
/// Prometheus sample string such as `"NaN"`), or an empty vector when `value` is `None`.
async fn serve(value: Option<&'static str>, seen: Seen) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let auth = req
                            .headers()
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_owned());
                        let target = req.uri().to_string();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        seen.lock().unwrap().push((
                            auth,
                            target,
                            String::from_utf8_lossy(&body).into_owned(),
                        ));
                        let result = match value {
                            Some(v) => format!(r#"[{{"metric":{{}},"value":[1,"{v}"]}}]"#),
                            None => "[]".to_owned(),
                        };
                        let json = format!(
                            r#"{{"status":"success","data":{{"resultType":"vector","result":{result}}}}}"#
                        );
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(json)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    port
}

fn slo() -> SloFile {
    SloFile::parse(
        "objectives:\n  chat: {ttft: {p95: 250ms}}\n",
        Path::new("slo.yaml"),
    )
    .unwrap()
}

#[tokio::test]
async fn credentials_go_as_basic_auth_and_are_never_printed() {
    let seen: Seen = Arc::default();
    let port = serve(Some("NaN"), seen.clone()).await;
    let url = format!("http://alice:s3cr3t@127.0.0.1:{port}/prom?token=t0k3n");
    let prom = PromClient::new(&url, Duration::from_secs(5)).unwrap();
    assert_eq!(prom.base(), format!("http://127.0.0.1:{port}/prom"));
    let e = fetch_budget(&prom, &slo(), &BudgetOptions::default())
        .await
        .unwrap_err()
        .to_string();
    for secret in ["alice", "s3cr3t", "t0k3n"] {
        assert!(!e.contains(secret), "{secret} printed: {e}");
    }
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty());
    let (auth, target, body) = &seen[0];
    // base64("alice:s3cr3t") = "YWxpY2U6czNjcjN0" (RFC 4648, by hand: "ali" → YWxp, "ce:" →
    // Y2U6, "s3c" → czNj, "r3t" → cjN0)
    assert_eq!(auth.as_deref(), Some("Basic YWxpY2U6czNjcjN0"));
    assert_eq!(target, "/prom/api/v1/query?token=t0k3n");
    assert!(body.starts_with("query=sum%28increase%28"), "{body}");
}

#[tokio::test]
async fn impossible_values_are_invalid_data_not_no_data() {
    for (value, needle) in [
        ("NaN", "invalid data: the query returned NaN"),
        ("+Inf", "invalid data: the query returned inf"),
        // every query answers −5, and the period's total is checked first
        (
            "-5",
            "all events = -5: a count of events cannot be negative",
        ),
    ] {
        let port = serve(Some(value), Arc::default()).await;
        let prom =
            PromClient::new(&format!("http://127.0.0.1:{port}"), Duration::from_secs(5)).unwrap();
        let e = fetch_budget(&prom, &slo(), &BudgetOptions::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("Prometheus at http://127.0.0.1:{port}: ")),
            "{e}"
        );
        assert!(e.contains(needle), "{value}: {needle} not in {e}");
        assert!(!e.contains("no data"), "{e}");
    }
    // An empty vector, by contrast, is no data.
    let port = serve(None, Arc::default()).await;
    let prom =
        PromClient::new(&format!("http://127.0.0.1:{port}"), Duration::from_secs(5)).unwrap();
    let (s, _) = fetch_budget(&prom, &slo(), &BudgetOptions::default())
        .await
        .unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].decision, Decision::NoData);
}

#[tokio::test]
async fn an_absent_server_gets_the_reason_and_a_question() {
    let (_reserved, port) = refusing_port();
    let prom = PromClient::new(
        &format!("http://bob:pw@127.0.0.1:{port}?k=v"),
        Duration::from_secs(2),
    )
    .unwrap();
    let e = fetch_budget(&prom, &slo(), &BudgetOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "Prometheus at http://127.0.0.1:{port}: unreachable ("
        )),
        "{e}"
    );
    assert!(e.to_lowercase().contains("connection refused"), "{e}");
    assert!(
        e.contains("is Prometheus running and listening there?"),
        "{e}"
    );
    assert!(!e.contains("pw") && !e.contains("k=v"), "{e}");
}

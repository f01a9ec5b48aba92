//! `--prometheus` against a fake Prometheus on 127.0.0.1 that answers known PromQL with canned
//! vectors: checks the exact queries (names with colons, quoted label values, form encoding)
//! and the window built from the answers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headroom_signals::adapter::{GpuField, Selection, Signal};
use headroom_signals::promql::{PromClient, PromError, window_from_prometheus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn vector(items: &[(&[(&str, &str)], f64)]) -> String {
    let r: Vec<String> = items
        .iter()
        .map(|(labels, v)| {
            let m: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("\"{k}\":\"{v}\""))
                .collect();
            format!(
                "{{\"metric\":{{{}}},\"value\":[2000000000,\"{v}\"]}}",
                m.join(",")
            )
        })
        .collect();
    format!(
        "{{\"status\":\"success\",\"data\":{{\"resultType\":\"vector\",\"result\":[{}]}}}}",
        r.join(",")
    )
}

async fn fake(
    answers: BTreeMap<String, String>,
    names: &'static str,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let answers = answers.clone();
            let seen = seen2.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 8192];
                // read headers and body (Content-Length)
                loop {
                    let n = sock.read(&mut tmp).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(h) = text.find("\r\n\r\n") {
                        let len = text[..h]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap())
                            })
                            .unwrap_or(0);
                        if buf.len() >= h + 4 + len {
                            break;
                        }
                    }
                }
                let text = String::from_utf8_lossy(&buf).to_string();
                let (head, body) = text.split_once("\r\n\r\n").unwrap();
                let resp = if head.starts_with("GET /api/v1/label/__name__/values") {
                    names.to_owned()
                } else {
                    let q = body
                        .split('&')
                        .find_map(|kv| kv.strip_prefix("query="))
                        .map(decode)
                        .unwrap_or_default();
                    seen.lock().unwrap().push(q.clone());
                    answers.get(&q).cloned().unwrap_or_else(|| vector(&[]))
                };
                let out = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{resp}",
                    resp.len()
                );
                let _ = sock.write_all(out.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (format!("http://{addr}"), seen)
}

const NAMES: &str = r#"{"status":"success","data":["vllm:request_success_total","vllm:prompt_tokens_total","vllm:time_to_first_token_seconds_bucket","vllm:time_to_first_token_seconds_sum","vllm:time_to_first_token_seconds_count","vllm:num_requests_running","DCGM_FI_DEV_GPU_UTIL","up"]}"#;

#[tokio::test]
async fn window_from_canned_promql() {
    let gpu: &[(&str, &str)] = &[
        ("gpu", "0"),
        ("UUID", "GPU-a"),
        ("Hostname", "n1"),
        ("modelName", "NVIDIA L4"),
    ];
    let mut a = BTreeMap::new();
    a.insert(
        r#"sum by (finished_reason) (increase(vllm:request_success_total{model_name="tiny"}[1800s]))"#.to_owned(),
        vector(&[(&[("finished_reason", "length")], 16.0), (&[("finished_reason", "stop")], 0.0)]),
    );
    a.insert(
        r#"sum (increase(vllm:prompt_tokens_total{model_name="tiny"}[1800s]))"#.to_owned(),
        vector(&[(&[], 1024.0)]),
    );
    a.insert(
        r#"sum by (le) (increase(vllm:time_to_first_token_seconds_bucket{model_name="tiny"}[1800s]))"#.to_owned(),
        vector(&[(&[("le", "0.06")], 1.0), (&[("le", "0.08")], 16.0), (&[("le", "+Inf")], 16.0)]),
    );
    a.insert(
        r#"sum(increase(vllm:time_to_first_token_seconds_sum{model_name="tiny"}[1800s]))"#
            .to_owned(),
        vector(&[(&[], 1.05)]),
    );
    a.insert(
        r#"sum(increase(vllm:time_to_first_token_seconds_count{model_name="tiny"}[1800s]))"#
            .to_owned(),
        vector(&[(&[], 16.0)]),
    );
    for (f, v) in [
        ("min_over_time", 0.0),
        ("avg_over_time", 2.5),
        ("max_over_time", 4.0),
    ] {
        a.insert(
            format!(r#"{f}(sum(vllm:num_requests_running{{model_name="tiny"}})[1800s:])"#),
            vector(&[(&[], v)]),
        );
        a.insert(
            format!("{f}(DCGM_FI_DEV_GPU_UTIL[1800s])"),
            vector(&[(gpu, v * 20.0)]),
        );
    }
    a.insert(
        r#"sum(vllm:num_requests_running{model_name="tiny"})"#.to_owned(),
        vector(&[(&[], 1.0)]),
    );
    a.insert("DCGM_FI_DEV_GPU_UTIL".to_owned(), vector(&[(gpu, 60.0)]));

    let (url, seen) = fake(a, NAMES).await;
    let client = PromClient::new(&url, Duration::from_secs(5)).unwrap();
    let sel = Selection {
        model_name: Some("tiny".into()),
        engine: None,
    };
    let w = tokio::time::timeout(
        Duration::from_secs(20),
        window_from_prometheus(&client, 1800.0, 2_000_000_000.0, &sel, None),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(w.start_unix_s, Some(2_000_000_000.0 - 1800.0));
    assert_eq!(
        w.counter_key(Signal::RequestsFinished, "length"),
        Some(16.0)
    );
    assert_eq!(w.counter(Signal::PromptTokens), Some(1024.0));
    let ttft = w.histogram(Signal::Ttft).unwrap();
    assert_eq!(ttft.count, 16.0);
    // p50: rank 8 in (0.06, 0.08]: 0.06 + 0.02 × 7/15
    assert!((ttft.quantile(0.5).unwrap().value - (0.06 + 0.02 * 7.0 / 15.0)).abs() < 1e-12);
    let run = w.gauge(Signal::Running).unwrap();
    assert_eq!((run.min, run.mean, run.max, run.last), (0.0, 2.5, 4.0, 1.0));
    assert_eq!(w.gpus.len(), 1);
    assert_eq!(w.gpus[0].gauges[&GpuField::GpuUtilPct].mean, 50.0);
    assert!(w.missing.contains_key(&Signal::QueueTime));
    let seen = seen.lock().unwrap();
    assert!(
        seen.iter()
            .all(|q| !q.contains("vllm:request_queue_time_seconds")),
        "absent names are not queried"
    );
}

#[tokio::test]
async fn no_data_is_a_clear_error() {
    let (url, _) = fake(BTreeMap::new(), r#"{"status":"success","data":["up"]}"#).await;
    let client = PromClient::new(&url, Duration::from_secs(5)).unwrap();
    let e = window_from_prometheus(&client, 1800.0, 2e9, &Selection::default(), None)
        .await
        .unwrap_err();
    assert!(matches!(e, PromError::NoData { .. }), "{e}");
    assert!(e.to_string().contains(&url), "{e}");
    assert!(e.to_string().contains("vllm:prompt_tokens_total"), "{e}");
    assert!(PromClient::new("https://x", Duration::from_secs(1)).is_err());
}

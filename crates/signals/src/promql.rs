//! `--prometheus URL --range 30m`: a [`Window`] from a Prometheus-compatible server's HTTP API
//! (Prometheus, Thanos, Mimir, VictoriaMetrics), with a thin client of our own on hyper.
//!
//! What is asked, for a range `R` ending at `end` (instant queries at `end`, POSTed as
//! `application/x-www-form-urlencoded` to `/api/v1/query`):
//!
//! * which metric names exist: `GET /api/v1/label/__name__/values?start=…&end=…`; the first
//!   present name of each [`crate::adapter::Mapping`] row is used (as with scrapes);
//! * counters: `sum by (<key>) (increase(<name>{<sel>}[Rs]))`;
//! * histograms: `sum by (le) (increase(<name>_bucket{<sel>}[Rs]))`, plus `_sum` and `_count`;
//! * gauges: `min_over_time`, `avg_over_time`, `max_over_time` of `sum(<name>{<sel>})` (or
//!   `max(…)` for the KV-usage ratio) as a subquery `[Rs:Ss]` evaluated at the scrape interval
//!   `S` (estimated as `R / (max(count_over_time(<name>[Rs])) − 1)`, so that a peak seen by one
//!   scrape is not stepped over), and the value at `end`;
//! * dcgm-exporter gauges per GPU: `min/avg/max_over_time(<name>[Rs])` and the value at `end`.
//!
//! Metric names containing colons (`vllm:…`) are legal PromQL identifiers and are written bare;
//! label values are escaped as PromQL strings (`\\`, `\"`, `\n`) and the whole query is
//! form-encoded, so nothing is lost in transit. Unlike our own scrapes, PromQL's `increase()`
//! extrapolates to the range boundaries, so counts can be fractional.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::adapter::{
    DCGM_FIELDS, Engine, GpuId, KeyRule, Selection, Signal, SignalKind, mappings_for,
};
use crate::exposition::{Labels, parse_le};
use crate::histogram::Histogram;
use crate::quality::{
    DataWarning, Problem, check_gpu, check_histogram_tol, check_value, merge_warning,
};
use crate::window::{GaugeSummary, GpuWindow, Window};

/// Why a Prometheus range could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PromError {
    /// Bad base URL or range.
    #[error("{0}")]
    Input(String),
    /// Transport or HTTP failure.
    #[error("{url}: {reason}")]
    Http {
        /// The request URL.
        url: String,
        /// What happened.
        reason: String,
    },
    /// Prometheus answered `status: error`.
    #[error("{url}: Prometheus rejected `{query}`: {error}")]
    Query {
        /// The request URL.
        url: String,
        /// The PromQL.
        query: String,
        /// Prometheus' error text.
        error: String,
    },
    /// No engine metrics in the range.
    #[error(
        "{url}: no data for any inference-engine metric in the {range_s} s before {end_unix_s} (looked for e.g. {looked_for})"
    )]
    NoData {
        /// The base URL.
        url: String,
        /// Range, s.
        range_s: f64,
        /// End of the range, Unix seconds.
        end_unix_s: f64,
        /// Names looked for.
        looked_for: String,
    },
}

/// Parses a Prometheus-style duration (`30m`, `1h30m`, `90s`, `2d`, `500ms`) into seconds.
pub fn parse_range(s: &str) -> Result<f64, PromError> {
    let bad = || {
        PromError::Input(format!(
            "range `{s}`: expected a duration such as 30m, 1h, 90s or 1h30m"
        ))
    };
    let mut total = 0.0;
    let mut num = String::new();
    let mut chars = s.trim().chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            0.001
        } else {
            match c {
                's' => 1.0,
                'm' => 60.0,
                'h' => 3600.0,
                'd' => 86400.0,
                'w' => 604_800.0,
                _ => return Err(bad()),
            }
        };
        let v: f64 = num.parse().map_err(|_| bad())?;
        total += v * unit;
        num.clear();
        any = true;
    }
    if !num.is_empty() || !any || total <= 0.0 {
        return Err(bad());
    }
    Ok(total)
}

/// A PromQL string literal for a label value.
pub fn promql_string(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A series selector `name{a="x",…}` (braces omitted when there are no matchers).
pub fn selector(name: &str, matchers: &[(&str, &str)]) -> String {
    if matchers.is_empty() {
        return name.to_owned();
    }
    let inner: Vec<String> = matchers
        .iter()
        .map(|(k, v)| format!("{k}={}", promql_string(v)))
        .collect();
    format!("{name}{{{}}}", inner.join(","))
}

fn form_encode(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        let mut out = String::new();
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// One sample of an instant-vector result.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorSample {
    /// Series labels.
    pub labels: Labels,
    /// Value (NaN when Prometheus says so).
    pub value: f64,
}

/// A thin Prometheus HTTP API client.
#[derive(Clone)]
pub struct PromClient {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl PromClient {
    /// A client for `base` (e.g. `http://127.0.0.1:9090`; a trailing `/` is ignored).
    pub fn new(base: &str, timeout: Duration) -> Result<PromClient, PromError> {
        let base = base.trim_end_matches('/').to_owned();
        if !base.starts_with("http://") {
            return Err(PromError::Input(format!(
                "{base}: expected http://host:port (https is not supported; use a port-forward)"
            )));
        }
        let mut c = HttpConnector::new();
        c.set_connect_timeout(Some(timeout));
        Ok(PromClient {
            base,
            client: Client::builder(TokioExecutor::new()).build(c),
            timeout,
        })
    }

    async fn call(&self, path: &str, form: Option<String>) -> Result<serde_json::Value, PromError> {
        let url = format!("{}{}", self.base, path);
        let http = |reason: String| PromError::Http {
            url: url.clone(),
            reason,
        };
        let uri: hyper::Uri = url.parse().map_err(|e| http(format!("bad URL: {e}")))?;
        let req = match &form {
            Some(body) => hyper::Request::post(uri)
                .header(
                    hyper::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(Full::new(Bytes::from(body.clone()))),
            None => hyper::Request::get(uri).body(Full::new(Bytes::new())),
        }
        .map_err(|e| http(e.to_string()))?;
        let fut = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| http(format!("unreachable: {e}")))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), 64 << 20)
                .collect()
                .await
                .map_err(|e| http(format!("reading the body: {e}")))?
                .to_bytes();
            Ok::<_, PromError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| http(format!("no answer within {:?}", self.timeout)))??;
        let v: serde_json::Value = serde_json::from_slice(&body).map_err(|_| {
            http(format!(
                "HTTP {status}, not a Prometheus API answer: {:?}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))
        })?;
        if v.get("status").and_then(|s| s.as_str()) != Some("success") {
            return Err(PromError::Query {
                url,
                query: form.unwrap_or_default(),
                error: v
                    .get("error")
                    .and_then(|e| e.as_str())
                    .unwrap_or("unknown error")
                    .to_owned(),
            });
        }
        Ok(v)
    }

    /// Metric names with data between `start` and `end` (Unix seconds).
    pub async fn metric_names(&self, start: f64, end: f64) -> Result<BTreeSet<String>, PromError> {
        let v = self
            .call(
                &format!("/api/v1/label/__name__/values?start={start:.3}&end={end:.3}"),
                None,
            )
            .await?;
        Ok(v["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Evaluates an instant query at `time` (Unix seconds); returns the vector.
    pub async fn query(&self, query: &str, time: f64) -> Result<Vec<VectorSample>, PromError> {
        let t = format!("{time:.3}");
        let form = form_encode(&[("query", query), ("time", &t)]);
        let v = self
            .call("/api/v1/query", Some(form))
            .await
            .map_err(|e| match e {
                PromError::Query { url, error, .. } => PromError::Query {
                    url,
                    query: query.to_owned(),
                    error,
                },
                e => e,
            })?;
        let mut out = Vec::new();
        for r in v["data"]["result"].as_array().into_iter().flatten() {
            let labels = Labels::from_pairs(
                r["metric"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| k.as_str() != "__name__")
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned())),
            );
            let value = r["value"][1]
                .as_str()
                .and_then(parse_le)
                .unwrap_or(f64::NAN);
            out.push(VectorSample { labels, value });
        }
        Ok(out)
    }
}

/// Builds a window over `[end − range_s, end]` from a Prometheus server.
///
/// `engine` forces the engine; otherwise the engine whose names have the most matches is used.
/// Errors: unreachable server, rejected query (with the PromQL), or no engine data in the range.
pub async fn window_from_prometheus(
    client: &PromClient,
    range_s: f64,
    end_unix_s: f64,
    sel: &Selection,
    engine: Option<Engine>,
) -> Result<Window, PromError> {
    let start = end_unix_s - range_s;
    let names = client.metric_names(start, end_unix_s).await?;
    let engines = [Engine::Vllm, Engine::Sglang, Engine::Tgi, Engine::LlamaCpp];
    let engine = engine.unwrap_or_else(|| {
        let hits = |e: Engine| {
            mappings_for(e)
                .filter(|m| m.names.iter().any(|n| present(&names, n, m.signal)))
                .count()
        };
        // the first engine with the most names present; vLLM when none has any
        let mut best = (Engine::Vllm, 0);
        for e in engines {
            let h = hits(e);
            if h > best.1 {
                best = (e, h);
            }
        }
        best.0
    });
    let mut matchers: Vec<(&str, &str)> = Vec::new();
    if let Some(m) = &sel.model_name {
        matchers.push(("model_name", m));
    }
    if let Some(e) = &sel.engine {
        matchers.push(("engine", e));
    }
    let r = format!("{}s", range_s.round().max(1.0) as u64);
    let mut w = Window {
        engine,
        version_hint: None,
        start_unix_s: Some(start),
        end_unix_s,
        since_server_start: false,
        scrapes: 0,
        counters: BTreeMap::new(),
        histograms: BTreeMap::new(),
        gauges: BTreeMap::new(),
        kv_pool: Default::default(),
        gpus: Vec::new(),
        sources: BTreeMap::new(),
        missing: BTreeMap::new(),
        counter_resets: Vec::new(),
        notes: vec![format!(
            "from Prometheus {}: PromQL increase() over [{r}] extrapolates to the range edges; counts may be fractional",
            client.base
        )],
        rejected: BTreeMap::new(),
        data_warnings: Vec::new(),
    };
    for m in mappings_for(engine) {
        let Some(name) = m.names.iter().find(|n| present(&names, n, m.signal)) else {
            if !w.sources.contains_key(&m.signal) {
                w.missing
                    .entry(m.signal)
                    .or_default()
                    .extend(m.names.iter().map(|s| s.to_string()));
            }
            continue;
        };
        let mut ms = matchers.clone();
        if let Some(only) = m.only {
            ms.push(only);
        }
        match m.signal.kind() {
            SignalKind::Counter => {
                let (by, key_label) = match m.key {
                    KeyRule::Label(l) | KeyRule::Prefixed(_, l) => (format!(" by ({l})"), Some(l)),
                    _ => (String::new(), None),
                };
                let q = format!("sum{by} (increase({}[{r}]))", selector(name, &ms));
                let res = client.query(&q, end_unix_s).await?;
                if res.is_empty() {
                    continue;
                }
                // increase() is never negative and never NaN for a real counter
                if let Some(bad) = res.iter().find(|s| !s.value.is_finite() || s.value < 0.0) {
                    reject(
                        &mut w,
                        m.signal,
                        name,
                        &bad.labels,
                        if bad.value.is_finite() {
                            Problem::Negative
                        } else {
                            Problem::NotFinite
                        },
                        format!("increase() over the range is {}", bad.value),
                    );
                    continue;
                }
                let entry = w.counters.entry(m.signal).or_default();
                for s in res {
                    let key = match (m.key, key_label) {
                        (KeyRule::Const(c), _) => c.to_owned(),
                        (KeyRule::Prefixed(p, _), Some(l)) => {
                            format!("{p}{}", s.labels.get(l).unwrap_or(""))
                        }
                        (_, Some(l)) => s.labels.get(l).unwrap_or("").to_owned(),
                        _ => String::new(),
                    };
                    if s.value.is_finite() {
                        *entry.entry(key).or_default() += s.value * m.scale;
                    }
                }
            }
            SignalKind::Histogram => {
                let b = format!(
                    "sum by (le) (increase({}[{r}]))",
                    selector(&format!("{name}_bucket"), &ms)
                );
                let buckets = client.query(&b, end_unix_s).await?;
                if buckets.is_empty() {
                    continue;
                }
                let sum = client
                    .query(
                        &format!(
                            "sum(increase({}[{r}]))",
                            selector(&format!("{name}_sum"), &ms)
                        ),
                        end_unix_s,
                    )
                    .await?;
                let count = client
                    .query(
                        &format!(
                            "sum(increase({}[{r}]))",
                            selector(&format!("{name}_count"), &ms)
                        ),
                        end_unix_s,
                    )
                    .await?;
                let pairs: Vec<(f64, f64)> = buckets
                    .iter()
                    .filter_map(|s| {
                        let le = s.labels.get("le").and_then(parse_le)?;
                        Some((le * m.scale, s.value))
                    })
                    .collect();
                let sum = sum.first().map(|s| s.value * m.scale).unwrap_or(f64::NAN);
                let count = count.first().map(|s| s.value).unwrap_or(f64::NAN);
                // `sum by (le)` gives one value per bound, so a bound twice cannot happen; the
                // tolerance absorbs increase()'s extrapolation factor.
                if let Some((problem, detail)) =
                    check_histogram_tol(&pairs, sum, count, count.is_finite(), 1e-6)
                {
                    reject(
                        &mut w,
                        m.signal,
                        name,
                        &Labels::new(),
                        problem,
                        format!("sum by (le) (increase(…_bucket)) over the range: {detail}"),
                    );
                    continue;
                }
                let h = Histogram::from_pairs(pairs, sum, count);
                w.histograms.insert(m.signal, h);
            }
            SignalKind::Gauge => {
                let agg = if m.signal == Signal::KvCacheUsage {
                    "max"
                } else {
                    "sum"
                };
                let inner = format!("{agg}({})", selector(name, &ms));
                // The subquery's resolution defaults to the evaluation interval (1 m), which
                // steps over short peaks between its points: evaluate at the scrape interval,
                // estimated from the busiest series' sample count over the range.
                let samples = client
                    .query(
                        &format!("max(count_over_time({}[{r}]))", selector(name, &ms)),
                        end_unix_s,
                    )
                    .await?
                    .first()
                    .map(|s| s.value)
                    .filter(|n| n.is_finite() && *n >= 2.0);
                let res = match samples {
                    Some(n) => format!("{}s", (range_s / (n - 1.0)).floor().max(1.0) as u64),
                    None => String::new(),
                };
                let mut vals = [f64::NAN; 4];
                let mut answered: Vec<f64> = Vec::new();
                for (i, f) in ["min_over_time", "avg_over_time", "max_over_time", ""]
                    .iter()
                    .enumerate()
                {
                    let q = if f.is_empty() {
                        inner.clone()
                    } else {
                        format!("{f}({inner}[{r}:{res}])")
                    };
                    if let Some(s) = client.query(&q, end_unix_s).await?.first() {
                        vals[i] = s.value * m.scale;
                        answered.push(s.value);
                    }
                }
                // Values Prometheus answered (NaN included: a NaN ratio is corrupt data); an
                // empty answer only means no sample at that instant.
                if let Some((problem, detail)) =
                    answered.iter().find_map(|v| check_value(m.signal, *v))
                {
                    reject(&mut w, m.signal, name, &Labels::new(), problem, detail);
                    continue;
                }
                if vals[..3].iter().all(|v| v.is_finite()) {
                    w.gauges.insert(
                        m.signal,
                        GaugeSummary {
                            min: vals[0],
                            mean: vals[1],
                            max: vals[2],
                            last: if vals[3].is_finite() {
                                vals[3]
                            } else {
                                vals[2]
                            },
                            samples: 0,
                        },
                    );
                }
            }
        }
        w.sources
            .entry(m.signal)
            .or_insert_with(|| name.to_string());
    }
    let present: Vec<Signal> = w.sources.keys().chain(w.rejected.keys()).copied().collect();
    for s in present {
        w.missing.remove(&s);
    }
    if w.sources.is_empty() && w.rejected.is_empty() {
        return Err(PromError::NoData {
            url: client.base.clone(),
            range_s,
            end_unix_s,
            looked_for: engines
                .iter()
                .flat_map(|e| {
                    mappings_for(*e)
                        .flat_map(|m| m.names.iter().copied())
                        .take(2)
                })
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    w.gpus = gpus_from_prometheus(client, &names, &r, end_unix_s, &mut w.data_warnings).await?;
    Ok(w)
}

fn reject(
    w: &mut Window,
    sig: Signal,
    name: &str,
    labels: &Labels,
    problem: Problem,
    detail: String,
) {
    w.rejected.insert(sig, name.to_owned());
    w.sources.remove(&sig);
    w.counters.remove(&sig);
    w.histograms.remove(&sig);
    w.gauges.remove(&sig);
    merge_warning(
        &mut w.data_warnings,
        &DataWarning::rejected(name, labels, sig.name(), problem, detail),
    );
}

fn present(names: &BTreeSet<String>, name: &str, sig: Signal) -> bool {
    if sig.kind() == SignalKind::Histogram {
        names.contains(&format!("{name}_bucket"))
    } else {
        names.contains(name)
    }
}

async fn gpus_from_prometheus(
    client: &PromClient,
    names: &BTreeSet<String>,
    r: &str,
    end: f64,
    warnings: &mut Vec<DataWarning>,
) -> Result<Vec<GpuWindow>, PromError> {
    let mut gpus: BTreeMap<GpuId, GpuWindow> = BTreeMap::new();
    for &(name, field, scale) in DCGM_FIELDS {
        if !names.contains(name) || field.is_counter() {
            continue;
        }
        let mut per: BTreeMap<GpuId, [f64; 4]> = BTreeMap::new();
        for (i, f) in ["min_over_time", "avg_over_time", "max_over_time", ""]
            .iter()
            .enumerate()
        {
            let q = if f.is_empty() {
                name.to_owned()
            } else {
                format!("{f}({name}[{r}])")
            };
            for s in client.query(&q, end).await? {
                let l = &s.labels;
                let Some(gpu) = l.get("gpu") else { continue };
                let id = GpuId {
                    hostname: l
                        .get("Hostname")
                        .or(l.get("hostname"))
                        .or(l.get("instance"))
                        .map(str::to_owned),
                    gpu: gpu.to_owned(),
                    uuid: l.get("UUID").or(l.get("uuid")).map(str::to_owned),
                    mig_instance: l.get("GPU_I_ID").map(str::to_owned),
                };
                gpus.entry(id.clone()).or_insert_with(|| GpuWindow {
                    id: id.clone(),
                    model: l.get("modelName").map(str::to_owned),
                    pods: l
                        .get("pod")
                        .map(|p| vec![format!("pod={p}")])
                        .unwrap_or_default(),
                    gauges: BTreeMap::new(),
                    increases: BTreeMap::new(),
                });
                per.entry(id).or_insert([f64::NAN; 4])[i] = s.value * scale;
            }
        }
        for (id, v) in per {
            if let Some(detail) = v
                .iter()
                .filter(|x| !x.is_nan())
                .find_map(|x| check_gpu(field, *x))
            {
                merge_warning(
                    warnings,
                    &DataWarning {
                        metric: name.to_owned(),
                        series: format!("{{gpu=\"{}\"}}", id.gpu),
                        signal: field.name(),
                        problem: Problem::OutOfRange,
                        detail,
                        occurrences: 1,
                    },
                );
                continue;
            }
            if let Some(g) = gpus.get_mut(&id)
                && v[..3].iter().all(|x| x.is_finite())
            {
                g.gauges.insert(
                    field,
                    GaugeSummary {
                        min: v[0],
                        mean: v[1],
                        max: v[2],
                        last: if v[3].is_finite() { v[3] } else { v[2] },
                        samples: 0,
                    },
                );
            }
        }
    }
    Ok(gpus.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("30m").unwrap(), 1800.0);
        assert_eq!(parse_range("1h30m").unwrap(), 5400.0);
        assert_eq!(parse_range("90s").unwrap(), 90.0);
        assert_eq!(parse_range("500ms").unwrap(), 0.5);
        assert!(parse_range("30").is_err());
        assert!(parse_range("m").is_err());
        assert!(parse_range("").is_err());
        assert!(parse_range("3x").is_err());
    }

    #[test]
    fn selectors_and_quoting() {
        assert_eq!(
            selector("vllm:num_requests_running", &[("model_name", "a\"b\\c")]),
            "vllm:num_requests_running{model_name=\"a\\\"b\\\\c\"}"
        );
        assert_eq!(selector("vllm:x", &[]), "vllm:x");
        assert_eq!(
            form_encode(&[("query", "sum(vllm:a{b=\"c d\"}[5s])")]),
            "query=sum%28vllm%3Aa%7Bb%3D%22c%20d%22%7D%5B5s%5D%29"
        );
    }
}

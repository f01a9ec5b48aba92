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
/// Errors: not a duration, zero, or beyond [`MAX_RANGE_S`] (90 days).
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
    if !total.is_finite() || total > MAX_RANGE_S {
        return Err(PromError::Input(format!(
            "range `{s}`: longer than {} days, the longest range read from Prometheus (a window that long averages away every load pattern, and most servers keep less)",
            MAX_RANGE_S / 86_400.0
        )));
    }
    Ok(total)
}

/// The longest range [`parse_range`] accepts: 90 days, in seconds.
pub const MAX_RANGE_S: f64 = 90.0 * 86_400.0;

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
///
/// The base URL may carry a path prefix (`http://host/prometheus`, behind a reverse proxy),
/// `user:password@` (sent as HTTP Basic authentication) and a query string (`?token=…`, sent
/// with every call as extra URL parameters); the API path is joined to the path, never to the
/// query. Every message names the URL without credentials or query
/// ([`headroom_core::run::redact_url`]).
#[derive(Clone)]
pub struct PromClient {
    /// `http://host:port` + path prefix without trailing `/`.
    base: String,
    /// The base without userinfo or query, for messages.
    shown: String,
    /// The base URL's query string (without `?`), added to every call.
    extra_query: Option<String>,
    /// `Authorization` header value from the base URL's userinfo.
    authorization: Option<String>,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for PromClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the credentials or the query
        f.debug_struct("PromClient")
            .field("base", &self.shown)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl PromClient {
    /// A client for `base` (e.g. `http://127.0.0.1:9090`, `http://u:p@proxy/prometheus?token=t`;
    /// a trailing `/` is ignored).
    ///
    /// # Errors
    /// [`PromError::Input`] (the URL shown without credentials) for anything but `http://`, a
    /// missing host, a `#fragment`, or a base that already names an `/api/v1/…` path.
    pub fn new(base: &str, timeout: Duration) -> Result<PromClient, PromError> {
        use base64::Engine as _;
        let shown = headroom_core::run::redact_url(base.trim_end_matches('/'));
        let input = |why: &str| PromError::Input(format!("--prometheus {shown}: {why}"));
        let Some(rest) = base.trim().strip_prefix("http://") else {
            return Err(input(
                "expected http://host:port (https is not supported; use a port-forward)",
            ));
        };
        if rest.contains('#') {
            return Err(input(
                "a URL fragment (`#…`) has no meaning here; remove it",
            ));
        }
        let (hostpath, query) = match rest.split_once('?') {
            Some((h, q)) => (h, Some(q.trim_end_matches('&')).filter(|q| !q.is_empty())),
            None => (rest, None),
        };
        let (authority, path) = match hostpath.find('/') {
            Some(i) => hostpath.split_at(i),
            None => (hostpath, ""),
        };
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        if host.is_empty() {
            return Err(input("no host; expected http://host:port"));
        }
        let path = path.trim_end_matches('/');
        if path.contains("/api/v1") {
            return Err(input(
                "give the server's base URL (e.g. http://127.0.0.1:9090), not an /api/v1 path",
            ));
        }
        let authorization = userinfo.map(|u| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(u.as_bytes())
            )
        });
        let base = format!("http://{host}{path}");
        let _: hyper::Uri = format!("{base}/api/v1/query")
            .parse()
            .map_err(|e| input(&format!("not a valid URL ({e})")))?;
        let mut c = HttpConnector::new();
        c.set_connect_timeout(Some(timeout));
        Ok(PromClient {
            shown: format!("http://{host}{path}"),
            base,
            extra_query: query.map(str::to_owned),
            authorization,
            client: Client::builder(TokioExecutor::new()).build(c),
            timeout,
        })
    }

    /// The base URL as shown in messages: no credentials, no query.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// `path` is `/api/v1/…` with an optional query of its own (no secrets in it).
    async fn call(&self, path: &str, form: Option<String>) -> Result<serde_json::Value, PromError> {
        let url = match (&self.extra_query, path.contains('?')) {
            (Some(q), true) => format!("{}{path}&{q}", self.base),
            (Some(q), false) => format!("{}{path}?{q}", self.base),
            (None, _) => format!("{}{path}", self.base),
        };
        let shown = format!("{}{path}", self.shown);
        let http = |reason: String| PromError::Http {
            url: shown.clone(),
            reason,
        };
        let uri: hyper::Uri = url.parse().map_err(|e| http(format!("bad URL: {e}")))?;
        let mut req = match &form {
            Some(_) => hyper::Request::post(uri).header(
                hyper::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            ),
            None => hyper::Request::get(uri),
        };
        if let Some(a) = &self.authorization {
            req = req.header(hyper::header::AUTHORIZATION, a);
        }
        let req = req
            .body(Full::new(Bytes::from(form.clone().unwrap_or_default())))
            .map_err(|e| http(e.to_string()))?;
        let fut = async {
            let resp = self.client.request(req).await.map_err(|e| {
                // hyper-util says only "client error (Connect)"; the OS's reason is in the
                // error's sources (`Connection refused`, `No route to host`).
                http(format!(
                    "unreachable: {}; is Prometheus running and listening there?",
                    headroom_core::error_chain(&e)
                ))
            })?;
            let status = resp.status();
            let content_type = resp
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("no content type")
                .to_owned();
            let body = Limited::new(resp.into_body(), 64 << 20)
                .collect()
                .await
                .map_err(|e| http(format!("reading the body: {e}")))?
                .to_bytes();
            Ok::<_, PromError>((status, content_type, body))
        };
        let (status, content_type, body) = tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| http(format!("no answer within {:?}", self.timeout)))??;
        let not_prometheus = |what: &str| {
            http(format!(
                "HTTP {status} ({content_type}) with {what}: this does not look like a Prometheus HTTP API; is --prometheus the server's base URL (e.g. http://127.0.0.1:9090)? The answer began: {:?}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))
        };
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|_| not_prometheus("a body that is not JSON"))?;
        match v.get("status").and_then(|s| s.as_str()) {
            Some("success") => Ok(v),
            Some("error") => Err(PromError::Query {
                url: shown,
                query: form.unwrap_or_else(|| path.to_owned()),
                error: format!(
                    "{} (HTTP {status})",
                    v.get("error")
                        .and_then(|e| e.as_str())
                        .unwrap_or("no error text given")
                ),
            }),
            _ => Err(not_prometheus("JSON that has no Prometheus `status` field")),
        }
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
    if !(start.is_finite() && start >= 0.0 && range_s > 0.0) {
        return Err(PromError::Input(format!(
            "the range of {range_s} s before {end_unix_s} starts before 1970 (Unix time {start}); shorten the range or move its end"
        )));
    }
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
    let mut w = empty_window(client, engine, start, end_unix_s, &r);
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
            url: client.shown.clone(),
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

/// A window of `engine` over `[start, end]` with nothing in it yet but the note that PromQL's
/// `increase()` over `[r]` extrapolates.
fn empty_window(
    client: &PromClient,
    engine: Engine,
    start: f64,
    end_unix_s: f64,
    r: &str,
) -> Window {
    Window {
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
            client.shown
        )],
        rejected: BTreeMap::new(),
        data_warnings: Vec::new(),
    }
}

/// Series of one exporter that are split into one [`Window`] per value of a label, e.g. a
/// Headroom gateway's per-class series (`class`); the names come from the caller, which knows
/// the exporter (this module knows only PromQL).
#[derive(Debug, Clone, Copy)]
pub struct LabelledSeries<'a> {
    /// The label whose values split the series (`class`).
    pub by: &'a str,
    /// Classic histograms: (family base without `_bucket`, signal), in seconds.
    pub histograms: &'a [(&'a str, Signal)],
    /// Counters: (name, signal, label that keys the breakdown, e.g. `outcome`).
    pub counters: &'a [(&'a str, Signal, &'a str)],
}

/// One window per value of `series.by` over `[end − range_s, end]`: for each histogram
/// `sum by (<by>, le) (increase(<name>_bucket[R]))` with `_sum` and `_count` likewise, for each
/// counter `sum by (<by>, <key>) (increase(<name>[R]))`. Every tenant's (or other label's)
/// series are summed. A label value whose histogram is corrupt over the range has that signal
/// rejected ([`Window::rejected`]), as [`window_from_prometheus`] does. The windows' engine is
/// [`Engine::Unknown`]: they are no engine's. Empty when none of the names has data in the range.
///
/// # Errors
/// Unreachable server or a rejected query (with the PromQL).
pub async fn windows_by_label(
    client: &PromClient,
    range_s: f64,
    end_unix_s: f64,
    series: &LabelledSeries<'_>,
) -> Result<BTreeMap<String, Window>, PromError> {
    let start = end_unix_s - range_s;
    let names = client.metric_names(start.max(0.0), end_unix_s).await?;
    let r = format!("{}s", range_s.round().max(1.0) as u64);
    let by = series.by;
    let mut out: BTreeMap<String, Window> = BTreeMap::new();
    let empty = || empty_window(client, Engine::Unknown, start, end_unix_s, &r);
    let per_label = |res: Vec<VectorSample>| -> BTreeMap<String, Vec<VectorSample>> {
        let mut m: BTreeMap<String, Vec<VectorSample>> = BTreeMap::new();
        for s in res {
            let v = s.labels.get(by).unwrap_or("").to_owned();
            m.entry(v).or_default().push(s);
        }
        m
    };
    for &(name, sig) in series.histograms {
        if !names.contains(&format!("{name}_bucket")) {
            continue;
        }
        let inc = |part: &str, extra: &str| {
            format!("sum by ({by}{extra}) (increase({name}_{part}[{r}]))")
        };
        let buckets = per_label(client.query(&inc("bucket", ", le"), end_unix_s).await?);
        let sums = per_label(client.query(&inc("sum", ""), end_unix_s).await?);
        let counts = per_label(client.query(&inc("count", ""), end_unix_s).await?);
        for (v, bs) in buckets {
            let pairs: Vec<(f64, f64)> = bs
                .iter()
                .filter_map(|s| Some((s.labels.get("le").and_then(parse_le)?, s.value)))
                .collect();
            let first = |m: &BTreeMap<String, Vec<VectorSample>>| {
                m.get(&v)
                    .and_then(|x| x.first())
                    .map_or(f64::NAN, |s| s.value)
            };
            let (sum, count) = (first(&sums), first(&counts));
            let w = out.entry(v.clone()).or_insert_with(empty);
            // The tolerance absorbs increase()'s extrapolation, as in window_from_prometheus.
            if let Some((problem, detail)) =
                check_histogram_tol(&pairs, sum, count, count.is_finite(), 1e-6)
            {
                let labels = Labels::from_pairs([(by.to_owned(), v.clone())]);
                reject(
                    w,
                    sig,
                    name,
                    &labels,
                    problem,
                    format!("sum by ({by}, le) (increase(…_bucket)) over the range: {detail}"),
                );
                continue;
            }
            w.histograms
                .insert(sig, Histogram::from_pairs(pairs, sum, count));
            w.sources.insert(sig, name.to_owned());
        }
    }
    for &(name, sig, key) in series.counters {
        if !names.contains(name) {
            continue;
        }
        let q = format!("sum by ({by}, {key}) (increase({name}[{r}]))");
        for (v, samples) in per_label(client.query(&q, end_unix_s).await?) {
            let w = out.entry(v.clone()).or_insert_with(empty);
            if let Some(bad) = samples
                .iter()
                .find(|s| !s.value.is_finite() || s.value < 0.0)
            {
                let problem = if bad.value.is_finite() {
                    Problem::Negative
                } else {
                    Problem::NotFinite
                };
                let detail = format!("increase() over the range is {}", bad.value);
                reject(w, sig, name, &bad.labels, problem, detail);
                continue;
            }
            let entry = w.counters.entry(sig).or_default();
            for s in samples {
                *entry
                    .entry(s.labels.get(key).unwrap_or("").to_owned())
                    .or_default() += s.value;
            }
            w.sources.insert(sig, name.to_owned());
        }
    }
    Ok(out)
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

    /// A one-connection-per-answer loopback server: answers each request with `answer` (status
    /// line, content type, body) and hands back the raw request heads it received.
    async fn fake(
        answer: (&'static str, &'static str, &'static str),
        requests: usize,
    ) -> (String, tokio::task::JoinHandle<Vec<String>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let h = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..requests {
                let Ok(Ok((mut sock, _))) =
                    tokio::time::timeout(Duration::from_secs(5), listener.accept()).await
                else {
                    break;
                };
                let mut buf = vec![0u8; 8192];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                let (status, ct, body) = answer;
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            }
            seen
        });
        (format!("127.0.0.1:{}", addr.port()), h)
    }

    #[tokio::test]
    async fn base_url_path_query_and_credentials() {
        let ok = (
            "200 OK",
            "application/json",
            r#"{"status":"success","data":["vllm:num_requests_running"]}"#,
        );
        let (addr, h) = fake(ok, 2).await;
        let c = PromClient::new(
            &format!("http://u:PWSECRET@{addr}/prom/?token=QSECRET"),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(c.shown(), format!("http://{addr}/prom"));
        assert!(!format!("{c:?}").contains("SECRET"));
        let names = c.metric_names(100.0, 200.0).await.unwrap();
        assert!(names.contains("vllm:num_requests_running"));
        let _ = c.query("up", 200.0).await;
        let seen = h.await.unwrap();
        // the API path joins the base path; the base query rides along as URL parameters
        assert!(
            seen[0].starts_with(
                "GET /prom/api/v1/label/__name__/values?start=100.000&end=200.000&token=QSECRET HTTP/1.1"
            ),
            "{}",
            seen[0]
        );
        assert!(
            seen[1].starts_with("POST /prom/api/v1/query?token=QSECRET HTTP/1.1"),
            "{}",
            seen[1]
        );
        // user:password as HTTP Basic: base64("u:PWSECRET") = dTpQV1NFQ1JFVA==
        for r in &seen {
            assert!(
                r.to_ascii_lowercase().contains(
                    "authorization: basic dTpQV1NFQ1JFVA=="
                        .to_ascii_lowercase()
                        .as_str()
                ),
                "{r}"
            );
        }
    }

    #[tokio::test]
    async fn errors_never_show_credentials_and_say_what_came_back() {
        // not Prometheus: an HTML page, then JSON of another API
        for (answer, needle) in [
            (
                ("200 OK", "text/html", "<html><body>hello</body></html>"),
                "HTTP 200 OK (text/html) with a body that is not JSON: this does not look like a Prometheus HTTP API",
            ),
            (
                (
                    "404 Not Found",
                    "application/json",
                    r#"{"detail":"Not Found"}"#,
                ),
                "HTTP 404 Not Found (application/json) with JSON that has no Prometheus `status` field",
            ),
        ] {
            let (addr, h) = fake(answer, 1).await;
            let c = PromClient::new(
                &format!("http://u:PWSECRET@{addr}/?token=QSECRET"),
                Duration::from_secs(5),
            )
            .unwrap();
            let e = c.metric_names(100.0, 200.0).await.unwrap_err().to_string();
            h.await.unwrap();
            assert!(e.contains(needle), "{e}");
            assert!(
                e.starts_with(&format!("http://{addr}/api/v1/label/")),
                "{e}"
            );
            assert!(!e.contains("SECRET") && !e.contains("u:"), "{e}");
            assert!(!e.contains("rejected ``"), "{e}");
        }
        // Prometheus' own error: named with its text and status
        let (addr, h) = fake(
            (
                "400 Bad Request",
                "application/json",
                r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#,
            ),
            1,
        )
        .await;
        let c = PromClient::new(
            &format!("http://u:PWSECRET@{addr}?token=QSECRET"),
            Duration::from_secs(5),
        )
        .unwrap();
        let e = c.query("up", 1.0).await.unwrap_err().to_string();
        h.await.unwrap();
        assert!(
            e.contains("rejected `up`: parse error (HTTP 400 Bad Request)"),
            "{e}"
        );
        assert!(!e.contains("SECRET"), "{e}");
        // unreachable: still redacted (port 9 is discard, nothing listens on loopback)
        let c = PromClient::new(
            "http://u:PWSECRET@127.0.0.1:9/?token=QSECRET",
            Duration::from_secs(2),
        )
        .unwrap();
        let e = c.metric_names(1.0, 2.0).await.unwrap_err().to_string();
        assert!(!e.contains("SECRET"), "{e}");
        // ... and says why, from the error's sources, not only hyper's "client error (Connect)"
        assert!(e.contains("Connection refused"), "{e}");
        assert!(e.contains("is Prometheus running"), "{e}");
        // bad base URLs are named without their credentials
        for (base, needle) in [
            (
                "https://u:PWSECRET@h:9090?token=QSECRET",
                "https is not supported",
            ),
            ("http://u:PWSECRET@h:9090/#x", "fragment"),
            ("http://u:PWSECRET@/?token=QSECRET", "no host"),
            (
                "http://h:9090/api/v1/query?token=QSECRET",
                "not an /api/v1 path",
            ),
        ] {
            let e = PromClient::new(base, Duration::from_secs(1))
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{base}: {e}");
            assert!(!e.contains("SECRET"), "{e}");
        }
    }

    #[test]
    fn ranges_are_bounded() {
        assert_eq!(parse_range("90d").unwrap(), MAX_RANGE_S);
        for r in ["91d", "99999999999999999999h", "13w"] {
            let e = parse_range(r).unwrap_err().to_string();
            assert!(e.contains("longer than 90 days"), "{r}: {e}");
        }
    }

    #[tokio::test]
    async fn a_range_starting_before_1970_is_refused_before_any_request() {
        let c = PromClient::new("http://127.0.0.1:9", Duration::from_secs(1)).unwrap();
        let e = window_from_prometheus(&c, 3600.0, 100.0, &Selection::default(), None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("starts before 1970"), "{e}");
    }

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

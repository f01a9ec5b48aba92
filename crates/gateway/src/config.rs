//! The gateway's configuration: `gateway.yaml` as users write it ([`GatewayFile`]) and the
//! resolved, validated form the proxy runs on ([`GatewayConfig`]).
//!
//! Every key, commented: [`REFERENCE_YAML`] (`examples/gateway-reference.yaml`, printed by
//! `headroom gateway --print-config`).
//!
//! Durations accept `ns`, `us`, `ms`, `s`, `m`, `h` (as in `slo.yaml`). Class names become the
//! `class` label of every series, so they are validated (`[A-Za-z0-9_.:-]`, at most 64 bytes)
//! and bounded in number; tenants likewise. Nothing a client sends can add a label value.

use headroom_core::slo::{SloFile, parse_duration_s};
use headroom_core::yaml::{YamlError, load_yaml, parse_yaml};
use http::HeaderName;
use http::Uri;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// `gateway.yaml` with every key, commented (`examples/gateway-reference.yaml`).
pub const REFERENCE_YAML: &str = include_str!("../../../examples/gateway-reference.yaml");

/// Most classes a configuration may define (each is a label value on every series).
pub const MAX_CLASSES: usize = 64;
/// Most tenants in the allowlist (each is a label value on every series).
pub const MAX_TENANTS: usize = 256;
/// Name of the pool that `--upstream` and `upstreams:` fill.
pub const DEFAULT_POOL: &str = "default";
/// Tenant label for requests without an allowlisted tenant header.
pub const OTHER_TENANT: &str = "other";

/// The API route a request was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
}

impl Route {
    /// The route of `path`, when it is one the gateway measures.
    pub fn of_path(path: &str) -> Option<Route> {
        match path {
            "/v1/chat/completions" => Some(Route::Chat),
            "/v1/completions" => Some(Route::Completions),
            _ => None,
        }
    }
}

/// A half-open range `[min, max)` of token counts; either end may be absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TokenRange {
    /// Inclusive lower bound.
    #[serde(default)]
    pub min: Option<u64>,
    /// Exclusive upper bound.
    #[serde(default)]
    pub max: Option<u64>,
}

impl TokenRange {
    /// Whether `v` lies in `[min, max)`.
    pub fn contains(&self, v: u64) -> bool {
        self.min.is_none_or(|m| v >= m) && self.max.is_none_or(|m| v < m)
    }
}

/// Per-class admission as written: at most `limit` requests forwarded at once, at most `queue`
/// waiting, each for at most `queue_timeout`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyFile {
    /// Sequences forwarded at once (≥ 1): a request counts one per prompt of a batch × `n`.
    pub limit: u32,
    /// Requests allowed to wait for a slot; 0 = reject at once when full.
    #[serde(default)]
    pub queue: u32,
    /// Longest wait in the queue, e.g. `1s` (default 1 s).
    #[serde(default, deserialize_with = "de_queue_timeout")]
    pub queue_timeout: Option<Duration>,
    /// `Retry-After` sent with a rejection, rounded up to whole seconds (default 1 s).
    #[serde(default, deserialize_with = "de_retry_after")]
    pub retry_after: Option<Duration>,
}

/// One class rule as written in `gateway.yaml`. Every condition given must hold; a rule with no
/// condition matches everything.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ClassFile {
    /// Class name: the `class` label value, and the key into `slo.yaml`'s objectives.
    pub name: String,
    /// Route condition.
    #[serde(default)]
    pub route: Option<Route>,
    /// The request's `model` must be one of these.
    #[serde(default)]
    pub models: Vec<String>,
    /// The (allowlisted) tenant must be one of these.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Estimated prompt tokens (see [`crate::classify`]) in this range.
    #[serde(default)]
    pub prompt_tokens: Option<TokenRange>,
    /// The request's `max_tokens` (or `max_completion_tokens`) in this range; a request without
    /// one does not match a rule that has this condition.
    #[serde(default)]
    pub max_tokens: Option<TokenRange>,
    /// Upstream pool name (default `default`).
    #[serde(default)]
    pub pool: Option<String>,
    /// Admission for this class; none = unlimited.
    #[serde(default)]
    pub concurrency: Option<ConcurrencyFile>,
}

/// Timeouts as written; every field optional.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsFile {
    /// A client must send the whole request head within this (slowloris guard).
    #[serde(default, deserialize_with = "de_header_read")]
    pub header_read: Option<Duration>,
    /// A client must send the whole request body within this.
    #[serde(default, deserialize_with = "de_body_read")]
    pub body_read: Option<Duration>,
    /// TCP connect to an upstream.
    #[serde(default, deserialize_with = "de_connect")]
    pub connect: Option<Duration>,
    /// From forwarding to the upstream's response head, for streaming requests. A
    /// non-streaming answer's head comes only when generation has finished, so only `total`
    /// bounds it.
    #[serde(default, deserialize_with = "de_first_byte")]
    pub first_byte: Option<Duration>,
    /// Longest silence between two body frames of an upstream response.
    #[serde(default, deserialize_with = "de_idle")]
    pub idle: Option<Duration>,
    /// Longest whole request, from acceptance to the end of the response.
    #[serde(default, deserialize_with = "de_total")]
    pub total: Option<Duration>,
    /// On SIGTERM or Ctrl-C: how long open requests may still finish (new connections are
    /// refused at once). Streams still open then end with an SSE error event. Keep it below
    /// the time the supervisor waits before it kills the process (Kubernetes'
    /// `terminationGracePeriodSeconds`, 30 s by default).
    #[serde(default, deserialize_with = "de_drain")]
    pub drain: Option<Duration>,
}

/// `gateway.yaml`.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct GatewayFile {
    /// Upstream base URLs of the default pool.
    #[serde(default)]
    pub upstreams: Vec<String>,
    /// Named pools of upstream base URLs.
    #[serde(default)]
    pub pools: BTreeMap<String, Vec<String>>,
    /// Header naming the tenant (default `x-tenant`).
    #[serde(default)]
    pub tenant_header: Option<String>,
    /// Tenant allowlist.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Class rules, first match wins.
    #[serde(default)]
    pub classes: Vec<ClassFile>,
    /// The class of requests no rule matches (default: name `default`, no condition).
    #[serde(default)]
    pub default_class: Option<ClassFile>,
    /// Timeouts.
    #[serde(default)]
    pub timeouts: TimeoutsFile,
    /// Largest request body accepted, bytes (default 4 MiB).
    #[serde(default)]
    pub max_body_bytes: Option<usize>,
    /// Most client connections open at once (default: half the file descriptors the process
    /// may open, less a reserve; see [`crate::listen`]). Further connections wait in the
    /// kernel's accept queue.
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Environment variable holding the API key clients must present.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Environment variable holding the key sent to upstreams.
    #[serde(default)]
    pub upstream_api_key_env: Option<String>,
    /// Request headers forwarded upstream (default `content-type`, `accept`, `user-agent`).
    #[serde(default)]
    pub forward_headers: Option<Vec<String>>,
}

impl GatewayFile {
    /// Reads `gateway.yaml`.
    ///
    /// # Errors
    /// [`YamlError`] naming the file, line and field for unreadable files, unknown fields,
    /// durations without a unit and wrong types.
    pub fn load(path: &Path) -> Result<GatewayFile, YamlError> {
        load_yaml(path)
    }

    /// Parses `gateway.yaml` text; `origin` names it in errors.
    ///
    /// # Errors
    /// As [`GatewayFile::load`].
    pub fn parse(text: &str, origin: &Path) -> Result<GatewayFile, YamlError> {
        parse_yaml(text, origin)
    }
}

/// Resolved admission settings of one class.
#[derive(Debug, Clone, PartialEq)]
pub struct Concurrency {
    /// Sequences forwarded at once (see [`ConcurrencyFile::limit`]).
    pub limit: usize,
    /// Requests allowed to wait.
    pub queue: usize,
    /// Longest wait.
    pub queue_timeout: Duration,
    /// `Retry-After` in whole seconds.
    pub retry_after_s: u64,
}

/// A resolved class: its conditions, pool and admission.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassSpec {
    /// Label value.
    pub name: String,
    /// Route condition.
    pub route: Option<Route>,
    /// Model condition (empty = any).
    pub models: Vec<String>,
    /// Tenant condition (empty = any), as indices into [`GatewayConfig::tenants`].
    pub tenants: Vec<usize>,
    /// Estimated prompt tokens condition.
    pub prompt_tokens: Option<TokenRange>,
    /// `max_tokens` condition.
    pub max_tokens: Option<TokenRange>,
    /// Pool name (a key of [`GatewayConfig::pools`]).
    pub pool: String,
    /// Admission; `None` = unlimited.
    pub concurrency: Option<Concurrency>,
}

/// Resolved timeouts (see [`TimeoutsFile`] for each one's meaning).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    /// Default 10 s.
    pub header_read: Duration,
    /// Default 30 s.
    pub body_read: Duration,
    /// Default 5 s.
    pub connect: Duration,
    /// Default 60 s.
    pub first_byte: Duration,
    /// Default 60 s.
    pub idle: Duration,
    /// Default 10 min.
    pub total: Duration,
    /// Default 25 s (inside Kubernetes' default 30 s grace period).
    pub drain: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header_read: Duration::from_secs(10),
            body_read: Duration::from_secs(30),
            connect: Duration::from_secs(5),
            first_byte: Duration::from_secs(60),
            idle: Duration::from_secs(60),
            total: Duration::from_secs(600),
            drain: Duration::from_secs(25),
        }
    }
}

/// An upstream server: its base URL with any trailing `/` and `/v1` removed.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    /// Scheme and authority, e.g. `http://127.0.0.1:8000`.
    pub base: String,
    /// Path prefix prepended to forwarded paths (usually empty).
    pub prefix: String,
}

impl Upstream {
    /// Parses an `http://host[:port][/prefix]` base URL.
    ///
    /// # Errors
    /// A message saying what was expected (no scheme, https, query string, credentials).
    pub fn parse(url: &str) -> Result<Upstream, String> {
        let t = url.trim().trim_end_matches('/');
        let t = t.strip_suffix("/v1").unwrap_or(t);
        let uri: Uri = t
            .parse()
            .map_err(|e| format!("`{url}`: {e}; expected e.g. http://127.0.0.1:8000"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!(
                "`{url}`: expected an http:// URL (TLS upstreams are not supported)"
            ));
        }
        let Some(auth) = uri.authority() else {
            return Err(format!(
                "`{url}`: no host; expected e.g. http://127.0.0.1:8000"
            ));
        };
        if auth.as_str().contains('@') {
            return Err(format!(
                "`{url}`: credentials in the URL are not supported; use upstream_api_key_env"
            ));
        }
        if uri.query().is_some() {
            return Err(format!("`{url}`: a query string is not allowed"));
        }
        Ok(Upstream {
            base: format!("http://{auth}"),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }
}

/// Everything the gateway runs on, validated.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Listen address (`/metrics` is served here too).
    pub listen: SocketAddr,
    /// Upstream pools by name; [`DEFAULT_POOL`] always exists and no pool is empty.
    pub pools: BTreeMap<String, Vec<Upstream>>,
    /// Lower-case tenant header.
    pub tenant_header: HeaderName,
    /// Tenant allowlist (label values); [`OTHER_TENANT`] is implicit.
    pub tenants: Vec<String>,
    /// Class rules in match order; the last is the default class (no conditions).
    pub classes: Vec<ClassSpec>,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// `max_connections` as written; `None`: derived from the fd limit at start.
    pub max_connections: Option<usize>,
    /// Key clients must present (`Authorization: Bearer`), compared in constant time.
    pub api_key: Option<String>,
    /// Key sent to upstreams.
    pub upstream_api_key: Option<String>,
    /// Request headers forwarded upstream (besides `x-request-id`, `traceparent`, `tracestate`).
    pub forward_headers: Vec<HeaderName>,
    /// SLO file whose thresholds become histogram bucket bounds.
    pub slo: Option<SloFile>,
}

/// Errors resolving a configuration; each names the field.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{origin}: {field}: {message}")]
pub struct ConfigError {
    /// File (or `command line`).
    pub origin: String,
    /// Field path, e.g. `classes[1].pool`.
    pub field: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl GatewayConfig {
    /// A configuration with one class (`default`, unlimited), the given upstreams as the default
    /// pool and default timeouts.
    ///
    /// # Errors
    /// [`ConfigError`] when `upstreams` is empty or one is not an `http://` base URL.
    pub fn simple(listen: SocketAddr, upstreams: &[&str]) -> Result<GatewayConfig, ConfigError> {
        let urls: Vec<String> = upstreams.iter().map(|s| (*s).to_string()).collect();
        GatewayConfig::resolve(listen, &urls, GatewayFile::default(), "command line", None)
    }

    /// Resolves `file` (from `origin`) with the command line's `upstreams` added to the default
    /// pool and an optional SLO file.
    ///
    /// # Errors
    /// [`ConfigError`] naming the field: no upstream, a bad URL, an unknown pool, a class name
    /// or tenant outside `[A-Za-z0-9_.:-]{1,64}`, a duplicate class, too many classes or tenants,
    /// a concurrency limit of 0, an unknown or invalid header name, an unset key variable.
    pub fn resolve(
        listen: SocketAddr,
        cli_upstreams: &[String],
        file: GatewayFile,
        origin: &str,
        slo: Option<SloFile>,
    ) -> Result<GatewayConfig, ConfigError> {
        let err = |field: &str, message: String| ConfigError {
            origin: origin.to_string(),
            field: field.to_string(),
            message,
        };
        let mut pools: BTreeMap<String, Vec<Upstream>> = BTreeMap::new();
        let mut default_pool = Vec::new();
        for (i, u) in file.upstreams.iter().enumerate() {
            default_pool.push(Upstream::parse(u).map_err(|m| err(&format!("upstreams[{i}]"), m))?);
        }
        for u in cli_upstreams {
            default_pool.push(Upstream::parse(u).map_err(|m| err("--upstream", m))?);
        }
        if default_pool.is_empty() {
            return Err(err(
                "upstreams",
                "no upstream; give --upstream http://HOST:PORT or `upstreams:` in gateway.yaml"
                    .into(),
            ));
        }
        pools.insert(DEFAULT_POOL.to_string(), default_pool);
        for (name, urls) in &file.pools {
            if name == DEFAULT_POOL {
                return Err(err(
                    &format!("pools.{name}"),
                    "the default pool is `upstreams:`; name this pool differently".into(),
                ));
            }
            if urls.is_empty() {
                return Err(err(
                    &format!("pools.{name}"),
                    "empty pool; expected at least one upstream URL".into(),
                ));
            }
            let mut v = Vec::new();
            for (i, u) in urls.iter().enumerate() {
                v.push(Upstream::parse(u).map_err(|m| err(&format!("pools.{name}[{i}]"), m))?);
            }
            pools.insert(name.clone(), v);
        }

        let tenant_header = file.tenant_header.as_deref().unwrap_or("x-tenant");
        let tenant_header = HeaderName::from_bytes(tenant_header.to_ascii_lowercase().as_bytes())
            .map_err(|_| {
            err(
                "tenant_header",
                format!("`{tenant_header}` is not a valid HTTP header name"),
            )
        })?;
        if file.tenants.len() > MAX_TENANTS {
            return Err(err(
                "tenants",
                format!(
                    "{} tenants; at most {MAX_TENANTS} (each is a label value on every series)",
                    file.tenants.len()
                ),
            ));
        }
        let mut tenants: Vec<String> = Vec::new();
        for (i, t) in file.tenants.iter().enumerate() {
            check_label(t).map_err(|m| err(&format!("tenants[{i}]"), m))?;
            if t == OTHER_TENANT {
                return Err(err(
                    &format!("tenants[{i}]"),
                    "`other` is reserved for tenants outside the allowlist".into(),
                ));
            }
            if tenants.contains(t) {
                return Err(err(&format!("tenants[{i}]"), format!("`{t}` listed twice")));
            }
            tenants.push(t.clone());
        }

        let mut class_files = file.classes.clone();
        let default = file.default_class.clone().unwrap_or(ClassFile {
            name: "default".into(),
            ..ClassFile::default()
        });
        let default_field = "default_class";
        if default.route.is_some()
            || !default.models.is_empty()
            || !default.tenants.is_empty()
            || default.prompt_tokens.is_some()
            || default.max_tokens.is_some()
        {
            return Err(err(
                default_field,
                "the default class takes no conditions (it catches what no rule matches)".into(),
            ));
        }
        class_files.push(default);
        if class_files.len() > MAX_CLASSES {
            return Err(err(
                "classes",
                format!(
                    "{} classes; at most {MAX_CLASSES} (each is a label value on every series)",
                    class_files.len()
                ),
            ));
        }
        let n = class_files.len();
        let mut classes: Vec<ClassSpec> = Vec::new();
        for (i, c) in class_files.into_iter().enumerate() {
            let field = if i + 1 == n {
                default_field.to_string()
            } else {
                format!("classes[{i}]")
            };
            check_label(&c.name).map_err(|m| err(&format!("{field}.name"), m))?;
            if classes.iter().any(|k| k.name == c.name) {
                return Err(err(
                    &format!("{field}.name"),
                    format!("class `{}` defined twice", c.name),
                ));
            }
            let pool = c.pool.clone().unwrap_or_else(|| DEFAULT_POOL.to_string());
            if !pools.contains_key(&pool) {
                let known: Vec<&str> = pools.keys().map(String::as_str).collect();
                return Err(err(
                    &format!("{field}.pool"),
                    format!(
                        "unknown pool `{pool}`; expected one of {}",
                        known.join(", ")
                    ),
                ));
            }
            let mut tidx = Vec::new();
            for (j, t) in c.tenants.iter().enumerate() {
                let k = tenants.iter().position(|x| x == t).ok_or_else(|| {
                    err(
                        &format!("{field}.tenants[{j}]"),
                        format!("`{t}` is not in the tenant allowlist `tenants:`"),
                    )
                })?;
                tidx.push(k);
            }
            let concurrency = match &c.concurrency {
                None => None,
                Some(cf) => {
                    if cf.limit == 0 {
                        return Err(err(
                            &format!("{field}.concurrency.limit"),
                            "0 would reject every request; expected at least 1".into(),
                        ));
                    }
                    Some(Concurrency {
                        limit: cf.limit as usize,
                        queue: cf.queue as usize,
                        queue_timeout: cf.queue_timeout.unwrap_or(Duration::from_secs(1)),
                        retry_after_s: cf
                            .retry_after
                            .map_or(1, |d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
                            .max(1),
                    })
                }
            };
            classes.push(ClassSpec {
                name: c.name,
                route: c.route,
                models: c.models,
                tenants: tidx,
                prompt_tokens: c.prompt_tokens,
                max_tokens: c.max_tokens,
                pool,
                concurrency,
            });
        }

        let d = Timeouts::default();
        let t = &file.timeouts;
        let timeouts = Timeouts {
            header_read: t.header_read.unwrap_or(d.header_read),
            body_read: t.body_read.unwrap_or(d.body_read),
            connect: t.connect.unwrap_or(d.connect),
            first_byte: t.first_byte.unwrap_or(d.first_byte),
            idle: t.idle.unwrap_or(d.idle),
            total: t.total.unwrap_or(d.total),
            drain: t.drain.unwrap_or(d.drain),
        };
        if file.max_connections == Some(0) {
            return Err(err(
                "max_connections",
                "0 would refuse every connection; expected at least 1".into(),
            ));
        }
        let env_key = |field: &str, var: &Option<String>| -> Result<Option<String>, ConfigError> {
            match var {
                None => Ok(None),
                Some(v) => match std::env::var(v) {
                    Ok(k) if !k.is_empty() => Ok(Some(k)),
                    _ => Err(err(
                        field,
                        format!("environment variable `{v}` is unset or empty"),
                    )),
                },
            }
        };
        let api_key = env_key("api_key_env", &file.api_key_env)?;
        let upstream_api_key = env_key("upstream_api_key_env", &file.upstream_api_key_env)?;
        let names = file
            .forward_headers
            .clone()
            .unwrap_or_else(|| vec!["content-type".into(), "accept".into(), "user-agent".into()]);
        let mut forward_headers = Vec::new();
        for (i, h) in names.iter().enumerate() {
            let name = HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()).map_err(|_| {
                err(
                    &format!("forward_headers[{i}]"),
                    format!("`{h}` is not a valid HTTP header name"),
                )
            })?;
            if is_hop_by_hop(&name) || name == http::header::HOST {
                return Err(err(
                    &format!("forward_headers[{i}]"),
                    format!("`{h}` is a hop-by-hop header and is never forwarded"),
                ));
            }
            forward_headers.push(name);
        }
        Ok(GatewayConfig {
            listen,
            pools,
            tenant_header,
            tenants,
            classes,
            timeouts,
            max_body_bytes: file.max_body_bytes.unwrap_or(4 << 20),
            max_connections: file.max_connections,
            api_key,
            upstream_api_key,
            forward_headers,
            slo,
        })
    }
}

/// Connection-level headers (RFC 9110 §7.6.1) a proxy must not forward, plus `content-length`,
/// which the proxy recomputes.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
    )
}

/// Checks a label value written in the configuration: 1–64 bytes of `[A-Za-z0-9_.:-]`.
fn check_label(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 64 {
        return Err(format!(
            "`{s}`: expected 1 to 64 characters (it becomes a label value)"
        ));
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
    {
        return Err(format!(
            "`{s}`: expected only letters, digits, `_`, `.`, `:` and `-` (it becomes a label value)"
        ));
    }
    Ok(())
}

/// Longest duration any gateway setting accepts (every timeout, `queue_timeout`, `retry_after`):
/// 24 h. A longer one is a typo, not a policy, and would overflow the deadline arithmetic.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// A duration as written (see [`parse_duration_s`]), at most [`MAX_DURATION`].
fn duration_within_cap(s: &str) -> Result<Duration, String> {
    let secs = parse_duration_s(s)?;
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d <= MAX_DURATION => Ok(d),
        _ => Err(format!(
            "`{}`: expected at most 24h (the longest duration the gateway accepts)",
            s.trim()
        )),
    }
}

/// An optional duration field named `field` in errors (the YAML error adds file, line, column).
fn de_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
    field: &str,
) -> Result<Option<Duration>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    match s {
        None => Ok(None),
        Some(s) => duration_within_cap(&s)
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("{field}: {e}"))),
    }
}

/// One `deserialize_with` function per duration field, so each error names its field.
macro_rules! named_durations {
    ($($f:ident => $field:literal),* $(,)?) => {$(
        fn $f<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            de_opt_duration(d, $field)
        }
    )*};
}

named_durations! {
    de_queue_timeout => "concurrency.queue_timeout",
    de_retry_after => "concurrency.retry_after",
    de_header_read => "timeouts.header_read",
    de_body_read => "timeouts.body_read",
    de_connect => "timeouts.connect",
    de_first_byte => "timeouts.first_byte",
    de_idle => "timeouts.idle",
    de_total => "timeouts.total",
    de_drain => "timeouts.drain",
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    fn resolve(text: &str) -> Result<GatewayConfig, ConfigError> {
        let f = GatewayFile::parse(text, Path::new("gateway.yaml")).map_err(|e| ConfigError {
            origin: "gateway.yaml".into(),
            field: String::new(),
            message: e.to_string(),
        })?;
        GatewayConfig::resolve(listen(), &[], f, "gateway.yaml", None)
    }

    /// The shipped example resolves with the mixed SLO's class names (`long_context` first, the
    /// rest as `claims_assistant`), so every class of examples/slo-mixed.yaml has series.
    #[test]
    fn shipped_example_resolves_with_the_slo_examples_classes() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let f = GatewayFile::load(&root.join("examples/gateway-mixed.yaml")).unwrap();
        let slo = headroom_core::SloFile::load(&root.join("examples/slo-mixed.yaml")).unwrap();
        let c = GatewayConfig::resolve(
            listen(),
            &["http://127.0.0.1:8000".to_string()],
            f,
            "examples/gateway-mixed.yaml",
            Some(slo.clone()),
        )
        .unwrap();
        let names: Vec<&str> = c.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["long_context", "claims_assistant"]);
        for class in slo.objectives.keys().filter(|k| k.as_str() != "*") {
            assert!(
                names.contains(&class.as_str()),
                "{class} has no gateway class"
            );
        }
    }

    /// The reference (`--print-config`) parses and resolves with the values its comments state.
    #[test]
    fn the_reference_yaml_resolves_as_commented() {
        // As printed: it runs with no environment set up (the key lines are commented out).
        let c = resolve(REFERENCE_YAML).unwrap();
        assert_eq!(c.api_key, None);
        let names: Vec<&str> = c.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["long_context", "chat", "default"]);
        let lc = c.classes[0].concurrency.clone().unwrap();
        assert_eq!(
            (lc.limit, lc.queue, lc.queue_timeout),
            (8, 16, Duration::from_secs(15))
        );
        assert_eq!(lc.retry_after_s, 1, "retry_after defaults to 1 s");
        assert_eq!(c.classes[1].concurrency.clone().unwrap().retry_after_s, 2);
        let t = c.timeouts;
        assert_eq!(
            [
                t.header_read,
                t.body_read,
                t.connect,
                t.first_byte,
                t.idle,
                t.total,
                t.drain
            ],
            [10, 30, 5, 60, 60, 600, 25].map(Duration::from_secs)
        );
        assert_eq!(t, Timeouts::default(), "the reference states the defaults");
        assert_eq!(c.max_body_bytes, 4_194_304);
        // Uncommented, the key lines read their variables.
        // SAFETY: variables unique to this test; no other thread reads them.
        unsafe {
            std::env::set_var("HEADROOM_GATEWAY_API_KEY", "sk-ref");
            std::env::set_var("VLLM_API_KEY", "sk-up");
        }
        let keyed = REFERENCE_YAML
            .replace("# api_key_env:", "api_key_env:")
            .replace("# upstream_api_key_env:", "upstream_api_key_env:");
        let c = resolve(&keyed).unwrap();
        assert_eq!(c.api_key.as_deref(), Some("sk-ref"));
    }

    #[test]
    fn full_example_resolves() {
        let c = resolve(
            "upstreams: [http://127.0.0.1:8000/v1/]\n\
             pools: {long_context: [http://127.0.0.1:8001]}\n\
             tenants: [search, support]\n\
             classes:\n\
             \x20 - {name: long_context, prompt_tokens: {min: 4096}, pool: long_context, concurrency: {limit: 8, queue: 16, queue_timeout: 2s}}\n\
             \x20 - {name: chat, route: chat, tenants: [support], max_tokens: {max: 1024}, concurrency: {limit: 64, retry_after: 1500ms}}\n\
             timeouts: {idle: 250ms}\n",
        )
        .unwrap();
        assert_eq!(
            c.pools["default"],
            vec![Upstream {
                base: "http://127.0.0.1:8000".into(),
                prefix: String::new()
            }]
        );
        assert_eq!(c.classes.len(), 3);
        assert_eq!(c.classes[2].name, "default");
        assert_eq!(c.classes[0].pool, "long_context");
        let lc = c.classes[0].concurrency.as_ref().unwrap();
        assert_eq!(
            (lc.limit, lc.queue, lc.queue_timeout, lc.retry_after_s),
            (8, 16, Duration::from_secs(2), 1)
        );
        // 1.5 s rounds up to 2 whole seconds of Retry-After.
        assert_eq!(c.classes[1].concurrency.as_ref().unwrap().retry_after_s, 2);
        assert_eq!(c.classes[1].tenants, vec![1]);
        assert_eq!(c.timeouts.idle, Duration::from_millis(250));
        assert_eq!(c.timeouts.total, Duration::from_secs(600));
        assert_eq!(c.tenant_header.as_str(), "x-tenant");
    }

    #[test]
    fn errors_name_the_field() {
        for (text, needle) in [
            ("upstreams: []\n", "upstreams: no upstream"),
            ("upstreams: [https://x:1]\n", "upstreams[0]"),
            (
                "upstreams: [http://a:1]\nclasses: [{name: x, pool: nope}]\n",
                "classes[0].pool: unknown pool `nope`",
            ),
            (
                "upstreams: [http://a:1]\nclasses: [{name: 'a b'}]\n",
                "classes[0].name",
            ),
            (
                "upstreams: [http://a:1]\nclasses: [{name: x}, {name: x}]\n",
                "defined twice",
            ),
            (
                "upstreams: [http://a:1]\nclasses: [{name: x, concurrency: {limit: 0}}]\n",
                "classes[0].concurrency.limit",
            ),
            (
                "upstreams: [http://a:1]\nclasses: [{name: x, tenants: [t]}]\n",
                "classes[0].tenants[0]",
            ),
            ("upstreams: [http://a:1]\ntenants: [other]\n", "reserved"),
            (
                "upstreams: [http://a:1]\nforward_headers: [connection]\n",
                "hop-by-hop",
            ),
            (
                "upstreams: [http://a:1]\ndefault_class: {name: d, route: chat}\n",
                "default_class",
            ),
            (
                "upstreams: [http://a:1]\napi_key_env: HEADROOM_TEST_SURELY_UNSET_VAR\n",
                "api_key_env",
            ),
        ] {
            let e = resolve(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
        let e = resolve("upstreams: [http://a:1]\ntimeouts: {idle: 5}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no unit"), "{e}");
        let e = resolve("upstreams: [http://a:1]\nbogus: 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn durations_are_capped_at_a_day_with_an_error_naming_the_line_and_field() {
        // 10^23 hours overflows `Duration` itself; 25 h and 86 401 s are just over the cap. Error
        // excerpts mask a long run of digits as `[N chars]` (it could be a key).
        for (yaml, value) in [
            (
                "timeouts: {total: 99999999999999999999999h}",
                "timeouts.total: `[24 chars]`",
            ),
            ("timeouts:\n  idle: 25h", "25h"),
            ("timeouts: {first_byte: 86401s}", "86401s"),
            (
                "classes: [{name: x, concurrency: {limit: 1, retry_after: 48h}}]",
                "48h",
            ),
        ] {
            let text = format!("upstreams: [http://a:1]\n{yaml}\n");
            let e = resolve(&text).unwrap_err().to_string();
            assert!(e.contains("gateway.yaml"), "{yaml}: {e}");
            assert!(
                e.contains(value) && e.contains("at most 24h"),
                "{yaml}: {e}"
            );
        }
        // The field and the line are named.
        let e = resolve("upstreams: [http://a:1]\ntimeouts:\n  idle: 25h\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gateway.yaml:3:") && e.contains("timeouts.idle: `25h`"),
            "{e}"
        );
        // Exactly 24 h is accepted, in any unit.
        for v in ["24h", "1440m", "86400s"] {
            let c = resolve(&format!(
                "upstreams: [http://a:1]\ntimeouts: {{total: {v}}}\n"
            ))
            .unwrap();
            assert_eq!(c.timeouts.total, Duration::from_secs(86_400), "{v}");
        }
    }

    #[test]
    fn token_range_is_half_open() {
        let r = TokenRange {
            min: Some(10),
            max: Some(20),
        };
        assert!(!r.contains(9) && r.contains(10) && r.contains(19) && !r.contains(20));
        assert!(TokenRange::default().contains(0));
    }
}

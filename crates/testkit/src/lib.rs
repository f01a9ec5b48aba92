//! Scaffolding shared by the integration tests of Headroom's crates: loopback ports that cannot
//! be raced by a test running beside this one, and child processes that die with the test.
//!
//! Only a `[dev-dependencies]` entry: nothing here is part of the product.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A loopback port that refuses connections (bound, never listening) and stays reserved while
/// the returned socket lives: `(socket, port)`.
///
/// A port bound and closed again could be taken by a server of a test running beside this one,
/// which then answers the "unreachable" request (it happened in CI).
///
/// # Panics
/// When no IPv4 loopback socket can be bound.
pub fn refusing_port() -> (tokio::net::TcpSocket, u16) {
    let s = tokio::net::TcpSocket::new_v4().expect("socket");
    s.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let port = s.local_addr().expect("local addr").port();
    (s, port)
}

/// A child process killed (SIGKILL) and reaped when this guard drops, so a failing test leaves
/// nothing running.
#[derive(Debug)]
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first `HOST:PORT` after `http://` the child prints on stderr (`headroom sim` and
/// `headroom gateway` print their bound addresses; started on port 0 they cannot race another
/// test for a port). The rest of stderr is drained in the background so the child never blocks
/// on a full pipe.
///
/// # Panics
/// When the child's stderr is not piped, or no address appears within 30 s.
pub fn printed_addr(child: &mut Child) -> String {
    use std::io::BufRead;
    let err = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines() {
            let Ok(line) = line else { return };
            if let Some(i) = line.find("http://") {
                let addr: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                    .collect();
                let _ = tx.send(addr);
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the child printed no address within 30 s")
}

/// The port a Prometheus started with `--web.listen-address=127.0.0.1:0 --log.level=info`
/// bound, read from the line `msg="Listening on" address=127.0.0.1:PORT` of its log file.
///
/// An ephemeral port chosen by Prometheus itself cannot be taken by a concurrent test in between,
/// as a port picked beforehand and released could. Blocks, polling the log every 50 ms.
///
/// # Panics
/// When no such line appears within 30 s (the panic message holds the log).
pub fn prometheus_port(log: &Path) -> u16 {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(port) = listening_port_in(&text) {
            return port;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "Prometheus did not report its listening address within 30 s; log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `prometheus` binary on `PATH`, or `None` after a loud message saying that `what` was not
/// tested against a real Prometheus.
///
/// # Panics
/// When it is absent and `HEADROOM_REQUIRE_PROMTOOL` is set (CI after
/// `scripts/install-prometheus`).
pub fn prometheus_bin(what: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("prometheus"))
            .find(|c| c.is_file())
    });
    if found.is_none() {
        if std::env::var_os("HEADROOM_REQUIRE_PROMTOOL").is_some() {
            panic!(
                "prometheus not found on PATH and HEADROOM_REQUIRE_PROMTOOL is set; run scripts/install-prometheus"
            );
        }
        let bar = "!".repeat(74);
        eprintln!(
            "\n{bar}\n!!! SKIPPED: prometheus is not installed, so {what} was NOT tested\n\
             !!! against a real Prometheus. Run scripts/install-prometheus.\n{bar}\n"
        );
    }
    found
}

/// Starts Prometheus (`bin`) on 127.0.0.1 with an ephemeral port and a TSDB in `dir`, scraping
/// `127.0.0.1:target_port` every second as job `vllm`; returns the guard and the port it bound
/// (read by [`prometheus_port`] from `dir/prometheus.log`).
///
/// # Panics
/// When it cannot be started or reports no port within 30 s.
pub fn start_prometheus(bin: &Path, dir: &Path, target_port: u16) -> (Killed, u16) {
    spawn_prometheus(
        bin,
        dir,
        &format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: vllm\n    scrape_interval: 1s\n    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
        ),
        &[],
    )
}

/// Starts Prometheus (`bin`) as [`start_prometheus`] does, scraping nothing, with its
/// remote-write receiver on (`POST /api/v1/write`); returns the guard and the port it bound.
///
/// # Panics
/// When it cannot be started or reports no port within 30 s.
pub fn start_prometheus_receiver(bin: &Path, dir: &Path) -> (Killed, u16) {
    spawn_prometheus(
        bin,
        dir,
        "global: {scrape_interval: 1s}\n",
        &["web.enable-remote-write-receiver"],
    )
}

/// Prometheus with `config` as its configuration file, its TSDB in `dir/data`, its log in
/// `dir/prometheus.log`, and the valueless flags `switches`.
fn spawn_prometheus(bin: &Path, dir: &Path, config: &str, switches: &[&str]) -> (Killed, u16) {
    let cfg = dir.join("prometheus.yml");
    std::fs::write(&cfg, config).expect("write prometheus.yml");
    let log_path = dir.join("prometheus.log");
    let log = std::fs::File::create(&log_path).expect("create prometheus.log");
    // Prometheus's own flags, `--name=value` (spelled so that the CLI's check of the flags its
    // messages name does not read them as Headroom's).
    let flag = |name: &str, value: &str| format!("--{name}={value}");
    let child = Command::new(bin)
        .arg(flag("config.file", &cfg.display().to_string()))
        .arg(flag(
            "storage.tsdb.path",
            &dir.join("data").display().to_string(),
        ))
        .arg(flag("web.listen-address", "127.0.0.1:0"))
        .arg(flag("log.level", "info"))
        .args(switches.iter().map(|s| format!("--{s}")))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let child = Killed(child);
    let port = prometheus_port(&log_path);
    (child, port)
}

fn listening_port_in(log: &str) -> Option<u16> {
    log.lines()
        .filter(|l| l.contains("msg=\"Listening on\""))
        .find_map(|l| {
            l.split("address=127.0.0.1:")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
}

/// tmux at `/usr/bin/tmux`, or `None` after printing why the caller skips.
pub fn tmux() -> Option<&'static str> {
    let bin = "/usr/bin/tmux";
    if std::path::Path::new(bin).exists() {
        Some(bin)
    } else {
        eprintln!("skipped: tmux is not installed at {bin}");
        None
    }
}

/// A detached tmux session of 120 × 40 running `cmd`, killed when dropped.
pub struct Tmux {
    bin: &'static str,
    name: String,
}

impl Tmux {
    /// Starts `cmd` (a shell command line) in a new detached session of 120 × 40.
    ///
    /// # Panics
    /// When tmux cannot start the session.
    pub fn start(bin: &'static str, cmd: &str) -> Tmux {
        let name = format!("headroom-test-{}-{}", std::process::id(), rand_suffix());
        let ok = Command::new(bin)
            .args([
                "new-session",
                "-d",
                "-x",
                "120",
                "-y",
                "40",
                "-s",
                &name,
                cmd,
            ])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux new-session failed");
        Tmux { bin, name }
    }

    /// The visible screen, as `capture-pane -p` prints it.
    pub fn screen(&self) -> String {
        let o = Command::new(self.bin)
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Types `keys` (tmux key names: `Tab`, `Left`, `C-c`, `q`).
    ///
    /// # Panics
    /// When tmux refuses them.
    pub fn keys(&self, keys: &[&str]) {
        let ok = Command::new(self.bin)
            .args(["send-keys", "-t", &self.name])
            .args(keys)
            .status()
            .unwrap()
            .success();
        assert!(ok, "send-keys {keys:?}");
    }

    /// Waits up to `limit` for the screen to satisfy `want`; returns it, or panics with it.
    pub fn wait(&self, limit: Duration, what: &str, want: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if want(&s) {
                return s;
            }
            assert!(
                t0.elapsed() < limit,
                "no {what} within {limit:?}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new(self.bin)
            .args(["kill-session", "-t", &self.name])
            .status();
    }
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

/// The body of the recorded OpenAI-API answer `fixtures/openai/NAME` (real vLLM 0.32): the file
/// itself, or for a fixture that is a whole HTTP response, what follows its blank line.
///
/// # Panics
/// When the file cannot be read (the panic names it), or an HTTP response has no blank line.
pub fn openai_fixture_body(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/openai")
        .join(name);
    let raw = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    if raw.starts_with(b"HTTP/") {
        let i = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("{}: an HTTP response without a blank line", p.display()));
        raw[i + 4..].to_vec()
    } else {
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_bound_port_not_the_configured_one() {
        // Prometheus 2.x (Debian) logs both lines; only the second holds the bound port.
        let log = "ts=2026-11-30T05:21:58.083Z caller=web.go:503 level=info component=web msg=\"Start listening for connections\" address=127.0.0.1:0\n\
                   ts=2026-11-30T05:21:58.095Z caller=tls_config.go:232 level=info component=web msg=\"Listening on\" address=127.0.0.1:45345\n";
        assert_eq!(listening_port_in(log), Some(45345));
        assert_eq!(
            listening_port_in(&log[..log.find("ts=2026-11-30T05:21:58.095Z").unwrap()]),
            None
        );
    }

    #[test]
    fn a_refusing_port_refuses() {
        let (_held, port) = refusing_port();
        let e = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    }
}

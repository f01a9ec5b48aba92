//! Stopping by signal, end to end: Ctrl-C (SIGINT) and SIGTERM (what `kill`, `timeout` and
//! Kubernetes send) stop `headroom sweep` with its partial results written and valid (exit 130),
//! and stop `headroom sim` and `headroom gateway` cleanly (exit 0). Every child is bounded: it
//! is killed if it outlives its deadline.

use headroom_testkit::printed_addr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

/// Sends `sig` (a `kill` signal name) to the child.
fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{sig} failed");
}

/// Waits up to `limit` for the child to exit; kills it and panics if it does not.
fn wait_exit(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {limit:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `path` exists (the sweep writes manifest.json before its first level).
fn wait_for(path: &Path, limit: Duration) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(t0.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_sweep_stopped_by_either_signal_keeps_valid_partial_results() {
    for sig in ["INT", "TERM"] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let mut child = Command::new(BIN)
            .args(["sweep", "--quick", "--seed", "1", "--out"])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&out.join("manifest.json"), Duration::from_secs(60));
        // Into the first level's warm-up or window.
        std::thread::sleep(Duration::from_secs(2));
        signal(&child, sig);
        let status = wait_exit(&mut child, Duration::from_secs(30), "sweep");
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(130), "SIG{sig}: {err}");
        let name = if sig == "INT" { "Ctrl-C" } else { "SIGTERM" };
        assert!(
            err.contains(&format!("headroom: {name}: stopping")),
            "{err}"
        );
        let results: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap())
                .expect("results.json is valid JSON");
        assert_eq!(
            results["status"]["state"], "stopped",
            "SIG{sig}: status {}",
            results["status"]
        );
        assert_eq!(
            results["status"]["reason"], "interrupted (Ctrl-C or SIGTERM)",
            "SIG{sig}"
        );
        for f in ["levels.csv", "report.md", "report.html"] {
            assert!(out.join(f).exists(), "SIG{sig}: no {f}");
        }
    }
}

/// `headroom ARGS` with stderr piped (it announces its address there).
fn spawn(args: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A signal that arrives right after the process announced its address is a clean stop too:
/// the handlers are installed before the announcement (a supervisor may stop a process the
/// moment it is up; before the fix, a signal in that window killed it with the default action).
#[test]
fn sim_and_gateway_stop_cleanly_on_either_signal() {
    for sig in ["INT", "TERM"] {
        let mut sim = spawn(&["sim", "--port", "0", "--dcgm-port", "0"]);
        let sim_addr = printed_addr(&mut sim);
        let upstream = format!("http://{sim_addr}");
        let mut gw = spawn(&[
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
        ]);
        let gw_addr = printed_addr(&mut gw);
        // At once, as a supervisor might.
        signal(&gw, sig);
        let s = wait_exit(&mut gw, Duration::from_secs(15), "gateway");
        assert!(s.success(), "gateway on SIG{sig} right after start: {s}");
        assert!(
            std::net::TcpStream::connect(gw_addr.as_str()).is_err(),
            "{gw_addr} still open"
        );
        // After serving a while.
        assert!(
            std::net::TcpStream::connect(sim_addr.as_str()).is_ok(),
            "{sim_addr}"
        );
        signal(&sim, sig);
        let s = wait_exit(&mut sim, Duration::from_secs(15), "sim");
        assert!(s.success(), "sim on SIG{sig}: {s}");
        let mut sim = spawn(&["sim", "--port", "0", "--dcgm-port", "0"]);
        let _ = printed_addr(&mut sim);
        signal(&sim, sig);
        let s = wait_exit(&mut sim, Duration::from_secs(15), "sim");
        assert!(s.success(), "sim on SIG{sig} right after start: {s}");
    }
}

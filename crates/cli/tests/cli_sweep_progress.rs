//! `headroom sweep --progress`: the live view of the level in progress under tmux, the plain
//! heartbeat without a terminal, and nothing but the table with `none`. Each run sweeps the
//! embedded twin on loopback and is stopped (or bounded by its levels) within seconds.

use headroom_testkit::{Killed, Tmux};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

/// The view shows the level in progress: phase, load, the window's requests, each objective
/// against its threshold with its samples against what the percentile needs; Ctrl-C stops
/// the sweep (exit 130), the screen is restored and the finished levels' lines remain.
#[test]
fn tui_shows_the_level_in_progress() {
    let Some(bin) = headroom_testkit::tmux() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let cmd = format!(
        "{BIN} sweep --quick --seed 1 --progress tui --out {} > {}/table.txt; echo SWEEP-EXIT=$?; sleep 30",
        out.display(),
        dir.path().display()
    );
    let t = Tmux::start(bin, &cmd);
    let s = t.wait(Duration::from_secs(60), "a level's window", |s| {
        s.contains("measurement window:") && s.contains("samples the percentile needs")
    });
    for want in [
        "headroom sweep",
        "phase claims_assistant",
        "load 64 concurrent",
        "elapsed",
        "remaining",
        "TTFT p95 < 300 ms",
        "ITL p95 < 50 ms",
        "300 ms",
        "samples / need",
        "a certain verdict needs about",
    ] {
        assert!(s.contains(want), "{want:?} missing:\n{s}");
    }
    // the window's TTFT samples grow toward the 20 a p95 needs, or are enough already
    assert!(
        s.lines()
            .any(|l| l.starts_with("│ttft_p95: ") && l.contains("samples")),
        "{s}"
    );
    t.keys(&["C-c"]);
    let s = t.wait(Duration::from_secs(30), "exit", |s| {
        s.contains("SWEEP-EXIT=")
    });
    assert!(s.contains("SWEEP-EXIT=130"), "{s}");
    assert!(
        !s.contains("level in progress"),
        "screen not restored:\n{s}"
    );
    let table = std::fs::read_to_string(dir.path().join("table.txt")).unwrap();
    assert!(table.contains("claims_assistant"), "{table}");
}

/// Without a terminal, `--progress plain` keeps the heartbeat: a level longer than 10 s says
/// it is still running; `none` prints no level line, only the table.
#[test]
fn plain_beats_and_none_is_silent() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args([
            "sweep",
            "--seed",
            "1",
            "--progress",
            "plain",
            "--levels",
            "8",
            "--warmup",
            "1",
            "--measure",
            "11",
            "--out",
        ])
        .arg(dir.path().join("plain"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let child = Killed(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines() {
            let Ok(line) = line else { return };
            let _ = tx.send(line);
        }
    });
    let t0 = Instant::now();
    let beat = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60).saturating_sub(t0.elapsed()))
            .expect("no heartbeat within 60 s");
        if line.contains("running,") {
            break line;
        }
    };
    assert!(
        beat.contains("claims_assistant: 8 concurrent: running, 10 s of ~12 s"),
        "{beat}"
    );
    drop(child);

    let out = Command::new(BIN)
        .args([
            "sweep",
            "--seed",
            "1",
            "--progress",
            "none",
            "--levels",
            "8",
            "--warmup",
            "1",
            "--measure",
            "2",
            "--out",
        ])
        .arg(dir.path().join("none"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("claims_assistant"), "{table}");
    assert!(
        !err.contains("8 concurrent:") && !err.contains("running,"),
        "{err}"
    );
}

//! Every command that writes to stdout survives a reader that went away (`headroom slo
//! dashboard | head`): it ends quietly with status 141 (128 + SIGPIPE, as a shell reports a tool
//! the signal ended) or 0, never with Rust's "failed printing to stdout" panic (status 101).
//!
//! The pipe's read end is closed before the command starts, so its first write fails with EPIPE
//! whatever the size of its output and however fast it runs.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn example(name: &str) -> String {
    format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs `headroom args` with stdout on a pipe nobody reads; returns (status, stderr).
fn with_closed_stdout(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn every_stdout_command_survives_a_closed_pipe() {
    let openslo = fixture("openslo-chat-ttft.yaml");
    let slo_mixed = example("slo-mixed.yaml");
    let cases: Vec<Vec<&str>> = vec![
        vec!["slo", "rules"],
        vec![
            "slo",
            "rules",
            "--slo",
            &slo_mixed,
            "--latency-source",
            "gateway",
        ],
        vec!["slo", "dashboard"],
        vec!["slo", "autoscale"],
        vec!["slo", "import", &openslo],
        vec!["sweep", "--print-defaults"],
        vec!["gateway", "--print-config"],
        vec!["diagnose", "--from", "PLACEHOLDER"],
        vec!["--help"],
    ];
    let prom = fixture("v0.32-cpu-queueing-maxseqs4.prom");
    for mut args in cases {
        if let Some(a) = args.iter_mut().find(|a| **a == "PLACEHOLDER") {
            *a = &prom;
        }
        let (code, stderr) = with_closed_stdout(&args);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("failed printing"),
            "headroom {args:?} panicked on a closed stdout: {stderr}"
        );
        assert!(
            matches!(code, Some(0 | 141)),
            "headroom {args:?}: status {code:?} on a closed stdout (expected 141 or 0): {stderr}"
        );
    }
}

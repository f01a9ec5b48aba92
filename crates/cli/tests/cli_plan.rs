//! `headroom plan` end to end: the default plan finds the capacity the wall-clock sweep of the
//! same twin finds, writes a run directory `compare` and `report` read, is deterministic for a
//! seed, sizes replicas from the capacity level's own request rate, and plans several GPUs
//! into one table. Each child is bounded by `timeout`.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

fn headroom(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("300")
        .arg(BIN)
        .args(args)
        .output()
        .unwrap()
}

fn results(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap()
}

/// Every field but the wall-clock timestamps, for comparing two plans of one seed.
fn without_times(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .filter(|(k, _)| k.as_str() != "started_unix_s")
            .map(|(k, v)| (k.clone(), without_times(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        serde_json::Value::Array(a) => a.iter().map(without_times).collect(),
        // Scrape file names carry the scrape's Unix time.
        serde_json::Value::String(s) if s.starts_with("scrapes/") => "scrape".into(),
        other => other.clone(),
    }
}

#[test]
fn the_default_plan_finds_the_sweeps_capacity_deterministically_and_compare_reads_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for dir in [&a, &b] {
        let out = headroom(&[
            "plan",
            "--warmup",
            "30",
            "--measure",
            "240",
            "--out",
            dir.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("How wrong the twin may be"), "{text}");
    }
    let r = results(&a);
    assert_eq!(r["status"]["state"], "complete", "{}", r["status"]);
    let phase = &r["phases"][0];
    let cap = phase["capacity"].as_f64().unwrap();
    // The wall-clock sweep of the same twin and workload finds 128 with its band [128, 160)
    // (README, scripts/capacity-repeatability); the virtual clock has no host in the way.
    assert!((112.0..=160.0).contains(&cap), "capacity {cap}");
    let band = &phase["capacity_band"];
    let (lo, hi) = (
        band["low"].as_f64().unwrap(),
        band["high"].as_f64().unwrap(),
    );
    assert!(lo <= cap && cap < hi && hi <= 1.5 * lo, "band {band}");
    // Hours of simulated traffic make every verdict certain except near the capacity itself:
    // a point estimate decided only loads inside the band.
    for b in band["borderline"].as_array().unwrap() {
        let b = b.as_f64().unwrap();
        assert!(lo <= b && b < hi, "borderline {b} outside the band {band}");
    }
    // Deterministic for a seed: the second plan is the first.
    assert_eq!(without_times(&r), without_times(&results(&b)));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(a.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["engine_config"]["plan"]["virtual_clock"], true);
    // A normal run directory: compare promotes an identical candidate, report renders it.
    let cmp = headroom(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(
        cmp.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&cmp.stdout),
        String::from_utf8_lossy(&cmp.stderr)
    );
    let rep = headroom(&["report", a.to_str().unwrap()]);
    assert_eq!(rep.status.code(), Some(0));
    assert!(a.join("report.html").is_file());
}

#[test]
fn peak_replicas_follow_the_capacity_levels_request_rate_and_gpus_share_one_table() {
    let tmp = tempfile::tempdir().unwrap();
    let out = headroom(&[
        "plan",
        "--compare-gpus",
        "a10g,l4",
        "--levels",
        "16,64",
        "--warmup",
        "20",
        "--measure",
        "120",
        "--peak",
        "40req/s",
        "--headroom",
        "25%",
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for gpu in ["a10g", "l4"] {
        let r = results(&tmp.path().join(gpu));
        let phase = &r["phases"][0];
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with(gpu))
            .unwrap_or_else(|| panic!("no {gpu} row in\n{text}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        // The replicas, then the replicas at the worst case, close the row.
        let (last, worst) = (cells[cells.len() - 2], cells[cells.len() - 1]);
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(tmp.path().join(gpu).join("plan.json")).unwrap())
                .unwrap();
        let s = &summary["phases"][0];
        assert_eq!(s["capacity"], phase["capacity"], "{summary}");
        match s["worst_case_request_rate_per_s"].as_f64() {
            Some(rate) => {
                let want = (40.0 / (rate * 0.75)).ceil() as u64;
                assert_eq!(worst, want.to_string(), "{row}");
                // The worst case never claims more than the plan: it needs as many replicas or more.
                assert!(
                    s["worst_case_capacity"].as_f64() <= phase["capacity"].as_f64(),
                    "{summary}"
                );
                assert!(want >= last.parse::<u64>().unwrap_or(0), "{row}");
            }
            None => assert_eq!(worst, "–", "{row}"),
        }
        match phase["capacity"].as_f64() {
            Some(cap) => {
                let level = phase["levels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|l| l["load"].as_f64() == Some(cap))
                    .unwrap();
                let rate = level["request_rate_per_s"].as_f64().unwrap();
                let want = (40.0 / (rate * 0.75)).ceil() as u64;
                assert_eq!(last, want.to_string(), "{row}");
            }
            None => assert_eq!(last, "–", "{row}"),
        }
    }
}

#[test]
fn bad_plan_input_names_the_flag() {
    for (args, needle) in [
        (vec!["plan", "--gpu", "nosuch"], "nosuch"),
        (vec!["plan", "--peak", "lots"], "--peak"),
        (vec!["plan", "--headroom", "120%"], "--headroom"),
        (vec!["plan", "--class", "nope"], "--class nope"),
        (
            vec!["plan", "--peak", "1e30req/s"],
            "--peak 1e30req/s: at most",
        ),
        (
            vec!["plan", "--measure", "1ms"],
            "--measure 0.001: at least 1 s",
        ),
        (vec!["plan", "--tp", "3"], "`tensor_parallel` (--tp)"),
        (
            vec!["plan", "--max-num-seqs", "0"],
            "`max_num_seqs` (--max-num-seqs)",
        ),
    ] {
        let out = headroom(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn gpus_are_resolved_before_any_plan_and_a_preset_is_planned_once() {
    for (args, needle) in [
        (
            vec!["plan", "--compare-gpus", "a10g,bogus"],
            "--compare-gpus `bogus`",
        ),
        (
            vec!["plan", "--compare-gpus", "a10g,a10g"],
            "same GPU preset",
        ),
        (
            vec!["plan", "--levels", "1000000"],
            "beyond what a plan simulates",
        ),
        (vec!["plan", "--peak", "1e309"], "finite"),
    ] {
        let t0 = std::time::Instant::now();
        let out = headroom(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
        // Refused before the first level, not after a whole plan.
        assert!(
            t0.elapsed().as_secs() < 5,
            "{args:?} took {:?}",
            t0.elapsed()
        );
    }
}

/// SIGTERM in the middle of a large level stops the plan within seconds with exit 130 and a
/// results.json that says `stopped` (the level loop reads the stop request; it once ran on for
/// minutes and died by SIGKILL with `running` on disk).
#[test]
fn sigterm_mid_level_stops_the_plan_with_valid_partial_results() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("p");
    let mut child = Command::new(BIN)
        .args([
            "plan",
            "--gpu",
            "h100-sxm",
            "--levels",
            "4,60000",
            "--warmup",
            "5",
            "--measure",
            "3600",
            "--out",
        ])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Past the first level, inside the second.
    let t0 = std::time::Instant::now();
    while t0.elapsed().as_secs() < 60 {
        let r = std::fs::read(out.join("results.json")).unwrap_or_default();
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&r)
            && v["phases"][0]["levels"]
                .as_array()
                .is_some_and(|l| !l.is_empty())
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    let sent = std::time::Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if sent.elapsed().as_secs() > 20 {
            let _ = child.kill();
            panic!("the plan did not stop within 20 s of SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    let r = results(&out);
    assert_eq!(r["status"]["state"], "stopped", "{}", r["status"]);
    assert!(r["phases"][0]["levels"][0]["verdict"].is_string());
}

/// A calibration run measured on another GPU than `--gpu` says is named in a warning and in the
/// plan's caveats (its dcgm-exporter's `modelName` against the preset's); one on the same GPU is
/// not.
#[test]
fn calibrating_from_another_gpus_run_says_so() {
    let dir = std::env::temp_dir().join(format!("hr-plan-othergpu-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = dir.join("src");
    let quick = ["--levels", "4", "--warmup", "5", "--measure", "30"];
    let out = headroom(&[&["plan", "--out", src.to_str().unwrap()][..], &quick[..]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `plan --gpu GPU --calibrate-from src` into `dir/NAME` with `extra` flags: its stderr.
    let calibrated = |gpu: &str, name: &str, extra: &[&str]| {
        let dst = dir.join(name);
        let out = headroom(
            &[
                &[
                    "plan",
                    "--gpu",
                    gpu,
                    "--calibrate-from",
                    src.to_str().unwrap(),
                    "--out",
                    dst.to_str().unwrap(),
                ][..],
                &quick[..],
                extra,
            ]
            .concat(),
        );
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{err}");
        err
    };
    let json = |name: &str, file: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join(name).join(file)).unwrap()).unwrap()
    };
    for (gpu, expect) in [("l4", true), ("a10g", false)] {
        let err = calibrated(gpu, gpu, &[]);
        assert_eq!(
            err.contains("its dcgm-exporter names the GPU NVIDIA A10G"),
            expect,
            "{gpu}: {err}"
        );
        let m = json(gpu, "manifest.json");
        let caveats = m["engine_config"]["plan"]["caveats"].to_string();
        assert_eq!(
            caveats.contains("describe the wrong card"),
            expect,
            "{gpu}: {caveats}"
        );
    }
    // On the measured card at other loads the worst case takes the held-out band; a what-if
    // (another --max-num-seqs) the wider band of configurations the fit never saw, and says so.
    let same = json("a10g", "plan.json");
    calibrated(
        "a10g",
        "what-if",
        &["--max-num-seqs", "8", "--measured-max-num-seqs", "256"],
    );
    let what_if = json("what-if", "plan.json");
    assert!(
        same["caveats"]
            .to_string()
            .contains("beyond the calibrated loads"),
        "{same}"
    );
    assert!(
        what_if["caveats"]
            .to_string()
            .contains("in this what-if (--max-num-seqs 8 (measured 256))"),
        "{what_if}"
    );
    let ttft = |v: &serde_json::Value| v["edge"]["ttft_factor"].as_f64().unwrap();
    assert!(ttft(&what_if) > ttft(&same), "{same}\n{what_if}");
    assert!(ttft(&same) >= 1.0 / (1.0 - 0.15) - 1e-9, "{same}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Input files that are not regular files (a FIFO would block the read for ever, a link to
/// /dev/zero would read until memory runs out) are refused at once, naming the file; for each
/// flag that names one.
#[test]
fn an_input_file_that_is_a_fifo_or_a_device_is_refused_at_once() {
    let dir = std::env::temp_dir().join(format!("hr-plan-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("f.yaml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let zero = dir.join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for (file, what) in [(&fifo, "a FIFO"), (&zero, "a character device")] {
        let f = file.to_str().unwrap();
        for flag in [
            vec!["--gpu-file", f, "--gpu", "x"],
            vec!["--model-file", f, "--model", "x"],
            vec!["--workload", f],
            vec!["--slo", f],
        ] {
            let t0 = std::time::Instant::now();
            let out = headroom(&[&["plan"][..], &flag[..]].concat());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{flag:?}: {err}");
            assert!(err.contains(f) && err.contains(what), "{flag:?}: {err}");
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(30),
                "{flag:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_closed_loop_of_identical_requests_carries_the_lock_step_caveat_and_ranged_lengths_do_not() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, prompt, out) in [
        ("fixed", "{fixed: 256}", "{fixed: 64}"),
        (
            "ranged",
            "{uniform: {min: 192, max: 320}}",
            "{uniform: {min: 48, max: 80}}",
        ),
    ] {
        let w = tmp.path().join(format!("{name}.yaml"));
        std::fs::write(
            &w,
            format!(
                "load: {{mode: concurrency}}\nclasses:\n  - name: {name}\n    endpoint: completions\n    \
                 prompt_tokens: {prompt}\n    max_tokens: {out}\n    ignore_eos: true\n"
            ),
        )
        .unwrap();
        let dir = tmp.path().join(name);
        let o = headroom(&[
            "plan",
            "--workload",
            w.to_str().unwrap(),
            "--levels",
            "1,4",
            "--warmup",
            "2",
            "--measure",
            "10",
            "--out",
            dir.to_str().unwrap(),
        ]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("plan.json")).unwrap()).unwrap();
        let caveats = summary["caveats"].to_string();
        // Contexts of at most 320 + 80 tokens: the 32k-context caveat is not this plan's.
        assert!(!caveats.contains("max_model_len"), "{caveats}");
        let said = text.contains("identical requests (fixed prompt");
        assert_eq!(
            said,
            caveats.contains("identical requests (fixed prompt"),
            "{summary}"
        );
        assert_eq!(said, name == "fixed", "{name}: {text}");
    }
}

/// `headroom plan` of one open-loop chat class (`prompt` tokens in, 10 out) at `rate` req/s
/// into `tmp/out<prompt>`: its exit code, its stdout and stderr, and the run directory.
fn plan_rate(tmp: &Path, prompt: u32, rate: &str) -> (Option<i32>, String, std::path::PathBuf) {
    let w = tmp.join(format!("rate{prompt}.yaml"));
    std::fs::write(
        &w,
        format!(
            "load: {{mode: rate}}\nclasses:\n  - name: c\n    endpoint: chat\n    \
             prompt_tokens: {{fixed: {prompt}}}\n    max_tokens: {{fixed: 10}}\n"
        ),
    )
    .unwrap();
    let dir = tmp.join(format!("out{prompt}"));
    let o = headroom(&[
        "plan",
        "--workload",
        w.to_str().unwrap(),
        "--levels",
        rate,
        "--out",
        dir.to_str().unwrap(),
    ]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), text, dir)
}

#[test]
fn an_open_loop_rate_far_beyond_the_engine_stops_at_once_without_a_verdict() {
    // 100,000 req/s (the most a plan accepts) against one A10G: every simulated second adds
    // ~100,000 waiting requests, each holding its prompt. Short and long prompts alike, the
    // level stops within a few seconds of simulated time instead of growing for minutes
    // (it held 9 GB and ignored SIGTERM; now ~25 s and ~170 MB with 10-token prompts).
    let tmp = tempfile::tempdir().unwrap();
    for prompt in [10, 8000] {
        let started = std::time::Instant::now();
        let (code, text, dir) = plan_rate(tmp.path(), prompt, "100000");
        assert_eq!(code, Some(1), "{text}");
        assert!(
            text.contains("requests were in flight or waiting to be sent")
                && text.contains("no verdict"),
            "{text}"
        );
        assert!(
            started.elapsed().as_secs() < 150,
            "{prompt}: {:?}",
            started.elapsed()
        );
        let r = results(&dir);
        assert_eq!(r["phases"][0]["capacity"], serde_json::Value::Null, "{r}");
    }
}

#[test]
fn an_overloaded_open_loop_level_is_judged_and_never_blamed_on_a_client() {
    // Requests due during an engine step reach the twin when the step ends: vLLM would not
    // schedule them sooner, and there is no client process to lag. 1,000 req/s of short chats
    // overloads one A10G; it read INCONCLUSIVE (client lagging, send lag p99 ~120 ms).
    let tmp = tempfile::tempdir().unwrap();
    let (_, text, _) = plan_rate(tmp.path(), 10, "1000");
    assert!(text.contains("1000 req/s: FAIL"), "{text}");
    assert!(
        !text.contains("lagging") && !text.contains("send lag"),
        "{text}"
    );
}

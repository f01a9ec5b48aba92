//! The sweep against the loopback stub (`headroom_load::testkit`): faults that must never become a
//! capacity claim. Every test is bounded to a few seconds and its stub stops when dropped.

use headroom_load::arrivals::{ArrivalProcess, ArrivalSchedule, LevelMode};
use headroom_load::client::{CancellationFlag, Target};
use headroom_load::prompt::ClassPlan;
use headroom_load::runner::{LevelSpec, RunOptions, run_level_with};
use headroom_load::testkit::{StubConfig, StubServer};
use headroom_load::workload::Workload;
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) fn plans(mode: &str) -> Vec<ClassPlan> {
    let text = format!(
        "load: {{mode: {mode}}}\nclasses:\n  - {{name: a, endpoint: completions, prompt_tokens: {{fixed: 8}}, max_tokens: {{fixed: 4}}}}\n"
    );
    let w = Workload::parse(&text, Path::new("w.yaml"), Path::new(".")).unwrap();
    ClassPlan::from_workload(&w, None).unwrap()
}

/// A rate whose gaps overflow `Duration` (below the workload's 0.001 req/s floor, but reachable
/// through the library) ends the schedule instead of panicking the pacer thread.
#[test]
fn a_schedule_past_any_clock_ends() {
    for rate in [1e-300, 5e-324, 1e-20] {
        let mut s = ArrivalSchedule::new(rate, ArrivalProcess::Constant, 1).unwrap();
        assert_eq!(s.next(), None, "{rate}");
    }
}

#[tokio::test]
async fn a_level_at_a_rate_past_any_clock_returns_without_load() {
    let stub = StubServer::start(StubConfig::default()).unwrap();
    let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
    let p = plans("rate");
    for arrival in [ArrivalProcess::Constant, ArrivalProcess::Poisson] {
        let t0 = Instant::now();
        let rec = run_level_with(
            &t,
            &p,
            LevelSpec {
                mode: LevelMode::Rate {
                    rate_per_s: 1e-300,
                    arrival,
                    max_concurrency: None,
                },
                warmup: Duration::ZERO,
                measure: Duration::from_millis(300),
                seed: 1,
            },
            CancellationFlag::new(),
            &RunOptions {
                drain_min: Duration::ZERO,
                ..RunOptions::default()
            },
        )
        .await;
        assert_eq!(rec.aborted, None, "{arrival:?}");
        assert_eq!(rec.started, 0);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}

mod sweep_runs {
    use super::plans;
    use crate::controller::{Quiet, Sweep, SweepSettings};
    use crate::search::LevelPlan;
    use headroom_core::Verdict;
    use headroom_core::run::{LoadMode, RunResult, RunStatus};
    use headroom_core::slo::SloFile;
    use headroom_load::client::{CancellationFlag, Target};
    use headroom_load::testkit::{StubConfig, StubServer};
    use std::path::Path;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    fn settings(dir: &Path, levels: &[f64]) -> SweepSettings {
        SweepSettings {
            mode: LoadMode::Concurrency,
            arrival: Default::default(),
            max_concurrency: None,
            plan: LevelPlan::Fixed(levels.to_vec()),
            warmup: Duration::ZERO,
            measure: Duration::from_millis(800),
            measure_max: Duration::from_millis(800),
            drain_max: Duration::from_millis(500),
            metrics_url: None,
            dcgm_url: None,
            scrape_interval: Duration::from_secs(2),
            run_dir: dir.to_path_buf(),
            seed: 1,
            only_phase: None,
            repeat: 1,
        }
    }

    fn slo() -> SloFile {
        SloFile::parse(
            "objectives:\n  \"*\":\n    ttft: {p50: 5s}\n    error_rate: 50%\n",
            Path::new("slo.yaml"),
        )
        .unwrap()
    }

    async fn sweep(
        target: &Target,
        s: &SweepSettings,
        cancel: CancellationFlag,
        partials: &Mutex<Vec<RunResult>>,
    ) -> RunResult {
        sweep_plans(target, &plans("concurrency"), s, cancel, partials).await
    }

    async fn sweep_plans(
        target: &Target,
        p: &[headroom_load::prompt::ClassPlan],
        s: &SweepSettings,
        cancel: CancellationFlag,
        partials: &Mutex<Vec<RunResult>>,
    ) -> RunResult {
        let on_result = |r: &RunResult| {
            partials.lock().unwrap().push(r.clone());
            Ok(())
        };
        sweep_with(target, p, s, cancel, &on_result).await
    }

    /// The sweep of `p` against [`slo`], each result passed to `on_result`.
    async fn sweep_with(
        target: &Target,
        p: &[headroom_load::prompt::ClassPlan],
        s: &SweepSettings,
        cancel: CancellationFlag,
        on_result: &(dyn Fn(&RunResult) -> Result<(), String> + Send + Sync),
    ) -> RunResult {
        Sweep {
            target,
            plans: p,
            slo: &slo(),
            settings: s,
            cancel,
            progress: &Quiet,
            on_result,
            clock_lag: None,
            measurer: None,
        }
        .run()
        .await
    }

    /// Goodput is measured over the requests that started in the window and finished: when
    /// answers outlast the window and its drain, none finish, and goodput is "not measured"
    /// (`None`, an empty CSV cell), not 0 requests/s at a level whose objectives PASS (a user
    /// read 0.0000 at every passing level). With short answers it is a rate again.
    #[tokio::test]
    async fn goodput_is_not_measured_when_answers_outlast_the_window() {
        for (itl_ms, measured) in [(600u64, false), (1, true)] {
            let stub = StubServer::start(StubConfig {
                itl: Duration::from_millis(itl_ms),
                ..StubConfig::default()
            })
            .unwrap();
            let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
            let dir = tempfile::tempdir().unwrap();
            // 4 tokens at 600 ms: 2.4 s per answer, past the 0.8 s window and 0.5 s drain.
            let s = settings(dir.path(), &[2.0]);
            let partials = Mutex::new(Vec::new());
            let r = sweep(&t, &s, CancellationFlag::new(), &partials).await;
            let l = &r.phases[0].levels[0];
            assert_eq!(
                l.goodput_per_s.is_some(),
                measured,
                "ITL {itl_ms} ms: {l:?}"
            );
            if measured {
                assert!(l.goodput_per_s.unwrap() > 0.0, "{:?}", l.goodput_per_s);
            }
        }
    }

    /// Ctrl-C in the middle of a level: that level gives no verdict (INCONCLUSIVE, reason
    /// interrupted) and the capacity comes only from levels that ran to the end.
    #[tokio::test]
    async fn an_interrupted_level_is_never_a_capacity() {
        let stub = StubServer::start(StubConfig {
            ttft: Duration::from_millis(5),
            itl: Duration::from_millis(2),
            ..StubConfig::default()
        })
        .unwrap();
        let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), &[1.0, 2.0, 4.0]);
        let cancel = CancellationFlag::new();
        let c = cancel.clone();
        // Level 1 takes 0.8 s + a short drain; cut level 2 half-way.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            c.cancel();
        });
        let partials = Mutex::new(Vec::new());
        let r = sweep(&t, &s, cancel, &partials).await;
        let p = &r.phases[0];
        assert_eq!(p.levels.len(), 2, "{:?}", p.levels);
        assert_eq!(p.levels[0].verdict, Verdict::Pass);
        let cut = &p.levels[1];
        assert_eq!(cut.verdict, Verdict::Inconclusive);
        assert!(
            cut.window_note.starts_with("interrupted"),
            "{}",
            cut.window_note
        );
        assert!(
            cut.objectives
                .iter()
                .all(|o| o.verdict == Verdict::Inconclusive)
        );
        assert_eq!(p.capacity, Some(1.0));
        assert!(
            matches!(&r.status, RunStatus::Stopped { reason } if reason.contains("interrupted"))
        );
        // The partial result written after the cut level says the same.
        let last = partials.lock().unwrap().last().cloned().unwrap();
        assert_eq!(last.phases[0].capacity, Some(1.0));
    }

    /// The server dies during a level: the sweep stops with "server lost at …", the level where
    /// it died gives no verdict, no further level is run, and the client backs off instead of
    /// retrying refused connections in a hot loop.
    #[tokio::test]
    async fn a_server_lost_mid_sweep_stops_it_without_a_capacity_claim() {
        let stub = StubServer::start(StubConfig {
            ttft: Duration::from_millis(5),
            itl: Duration::from_millis(2),
            ..StubConfig::default()
        })
        .unwrap();
        let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings(dir.path(), &[1.0, 4.0, 8.0]);
        s.measure = Duration::from_secs(3);
        s.measure_max = Duration::from_secs(3);
        let killer = tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_millis(1200));
            drop(stub);
        });
        let partials = Mutex::new(Vec::new());
        let t0 = Instant::now();
        let r = sweep(&t, &s, CancellationFlag::new(), &partials).await;
        killer.await.unwrap();
        let p = &r.phases[0];
        assert_eq!(p.levels.len(), 1, "no level after the loss: {:?}", p.levels);
        let l = &p.levels[0];
        assert_eq!(l.verdict, Verdict::Inconclusive);
        assert!(
            l.window_note.starts_with("server lost"),
            "{}",
            l.window_note
        );
        assert_eq!(p.capacity, None);
        assert_eq!(p.first_fail, None);
        match &r.status {
            RunStatus::Stopped { reason } => {
                assert!(reason.contains("server lost at 1 concurrent"), "{reason}");
                assert!(reason.contains("server unreachable"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Back-off: 10 ms doubling to 1 s allows at most ~12 attempts in the ~2 s left of the
        // window (a hot loop made thousands); the window also closes after 10 in a row.
        let transport = l.outcomes.get("transport").copied().unwrap_or(0);
        assert!(
            (1..=12).contains(&transport),
            "{transport} transport failures"
        );
        assert!(t0.elapsed() < Duration::from_secs(12));
    }

    /// The first write that fails — the results (disk full) or a level's raw files — stops the
    /// sweep after that level; no further load is offered into a directory that cannot hold it.
    #[tokio::test]
    async fn the_first_failed_write_stops_the_sweep() {
        let stub = StubServer::start(StubConfig::default()).unwrap();
        let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings(dir.path(), &[1.0, 2.0, 4.0]);
        s.measure = Duration::from_millis(300);
        s.measure_max = s.measure;
        // The results cannot be written.
        let p = plans("concurrency");
        let calls = Mutex::new(0);
        let on_result = |_: &RunResult| {
            *calls.lock().unwrap() += 1;
            Err("results.json: No space left on device (os error 28)".to_string())
        };
        let r = sweep_with(&t, &p, &s, CancellationFlag::new(), &on_result).await;
        assert_eq!(r.phases[0].levels.len(), 1);
        assert!(
            matches!(&r.status, RunStatus::Stopped { reason } if reason.starts_with("cannot write the run directory: results.json: No space")),
            "{:?}",
            r.status
        );
        // After the level, and once more with the final status.
        assert_eq!(*calls.lock().unwrap(), 2);
        // The raw files cannot be written: the run directory is a file.
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let s = SweepSettings { run_dir: file, ..s };
        let partials = Mutex::new(Vec::new());
        let r = sweep(&t, &s, CancellationFlag::new(), &partials).await;
        assert_eq!(r.phases[0].levels.len(), 1);
        assert!(
            matches!(&r.status, RunStatus::Stopped { reason } if reason.contains("cannot write the run directory")),
            "{:?}",
            r.status
        );
    }

    /// A `/metrics` endpoint on 127.0.0.1 that answers every scrape with one gauge; its URL.
    async fn metrics_server() -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = sock.read(&mut buf).await;
                    let body = "vllm:num_requests_running{model_name=\"tiny\"} 0\n";
                    let r = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(r.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        format!("http://{addr}/metrics")
    }

    /// Every file a level's record cites (its histograms and scrapes), relative to the run
    /// directory.
    fn cited(r: &RunResult) -> Vec<String> {
        r.phases
            .iter()
            .flat_map(|p| &p.levels)
            .flat_map(|l| {
                let scrapes = l.server.iter().flat_map(|v| v.scrapes.clone());
                std::iter::once(l.histograms.clone())
                    .chain(scrapes)
                    .filter(|f| !f.is_empty())
            })
            .collect()
    }

    /// A write that fails at any stage of a level — its results, its first or a later scrape,
    /// its histograms — stops the sweep, and the run's final record (returned and written) cites
    /// only files the directory holds: the ones not written are dropped from the level, which
    /// names them in a `not written:` warning, and the ones written before the failure stay.
    #[tokio::test]
    async fn a_failed_write_at_any_stage_leaves_no_citation_of_a_missing_file() {
        let stub = StubServer::start(StubConfig::default()).unwrap();
        let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
        let metrics = metrics_server().await;
        let p = plans("concurrency");
        for stage in ["results", "first scrape", "later scrape", "histograms"] {
            let dir = tempfile::tempdir().unwrap();
            let mut s = settings(dir.path(), &[1.0, 2.0]);
            s.measure = Duration::from_millis(300);
            s.measure_max = s.measure;
            s.metrics_url = Some(metrics.clone());
            let calls = Mutex::new(0);
            let planted = Mutex::new(String::new());
            // Writes results.json as the CLI does; on the first call, plants what makes the
            // stage's write fail (a folder where a file goes, a file where a folder goes).
            let on_result = |r: &RunResult| {
                let first = {
                    let mut n = calls.lock().unwrap();
                    *n += 1;
                    *n == 1
                };
                if first {
                    let l = &r.phases[0].levels[0];
                    let scrapes = &l.server.as_ref().expect("scraped").scrapes;
                    assert!(scrapes.len() >= 2, "{scrapes:?}");
                    let (target, as_dir) = match stage {
                        "results" => {
                            *planted.lock().unwrap() = scrapes[0].clone();
                            return Err(
                                "results.json: No space left on device (os error 28)".into()
                            );
                        }
                        "first scrape" => ("scrapes".to_string(), false),
                        "later scrape" => (scrapes[scrapes.len() - 1].clone(), true),
                        _ => (l.histograms.clone(), true),
                    };
                    let path = dir.path().join(&target);
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    if as_dir {
                        std::fs::create_dir(&path).unwrap();
                    } else {
                        std::fs::write(&path, b"x").unwrap();
                    }
                    *planted.lock().unwrap() = match stage {
                        "first scrape" => scrapes[0].clone(),
                        _ => target,
                    };
                }
                let bytes = serde_json::to_vec(r).unwrap();
                headroom_core::atomic::write_atomic(&dir.path().join("results.json"), &bytes)
                    .map_err(|e| e.to_string())
            };
            let r = sweep_with(&t, &p, &s, CancellationFlag::new(), &on_result).await;
            assert_eq!(r.phases[0].levels.len(), 1, "{stage}");
            assert!(
                matches!(&r.status, RunStatus::Stopped { reason } if reason.starts_with("cannot write the run directory")),
                "{stage}: {:?}",
                r.status
            );
            let planted = planted.lock().unwrap().clone();
            let on_disk: RunResult =
                serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).unwrap())
                    .unwrap();
            // The final record is the one written.
            assert_eq!(on_disk.status, r.status, "{stage}");
            assert_eq!(cited(&on_disk), cited(&r), "{stage}");
            assert_eq!(on_disk.warnings, r.warnings, "{stage}");
            for f in cited(&r) {
                assert!(
                    dir.path().join(&f).is_file(),
                    "{stage}: {f} cited, not written"
                );
            }
            assert!(!cited(&r).contains(&planted), "{stage}: {planted}");
            let l = &r.phases[0].levels[0];
            let w = l
                .warnings
                .iter()
                .find(|w| w.starts_with("not written: "))
                .unwrap_or_else(|| panic!("{stage}: {:?}", l.warnings));
            assert!(w.contains(&planted), "{stage}: {w}");
            assert!(r.warnings.iter().any(|x| x.contains(&planted)), "{stage}");
            match stage {
                // Nothing of the level was written after its results failed.
                "results" | "first scrape" => assert_eq!(cited(&r), Vec::<String>::new()),
                // The scrapes before the failure were written and stay cited.
                "later scrape" => assert!(!cited(&r).is_empty() && l.histograms.is_empty()),
                _ => assert!(l.histograms.is_empty() && !cited(&r).is_empty()),
            }
        }
    }

    /// `repeat: 2` runs each level twice: the level keeps one repeat with its own histogram
    /// file, both on disk, and results.json without repeats has no `repeats` key.
    #[tokio::test]
    async fn each_level_runs_repeat_times_with_its_own_files() {
        let stub = StubServer::start(StubConfig::default()).unwrap();
        let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings(dir.path(), &[1.0, 2.0]);
        s.repeat = 2;
        let partials = Mutex::new(Vec::new());
        let r = sweep(&t, &s, CancellationFlag::new(), &partials).await;
        let levels = &r.phases[0].levels;
        assert_eq!(levels.len(), 2);
        for l in levels {
            assert_eq!(l.repeats.len(), 1, "{l:?}");
            let rep = &l.repeats[0];
            assert_eq!(rep.load, l.load);
            assert_ne!(rep.histograms, l.histograms);
            for h in [&l.histograms, &rep.histograms] {
                assert!(dir.path().join(h).is_file(), "{h}");
            }
        }
        // Level files are numbered in run order: L000, L001 (repeat), L002, L003 (repeat).
        assert_eq!(levels[1].repeats[0].histograms, "histograms/L003.json");
        let once = headroom_core::run::LevelResult {
            repeats: Vec::new(),
            ..levels[0].clone()
        };
        assert!(
            serde_json::to_value(&once)
                .unwrap()
                .get("repeats")
                .is_none()
        );
        assert!(serde_json::to_value(&levels[0]).unwrap()["repeats"].is_array());
    }

    /// A live view gets the level in progress about once a second: the window's requests so
    /// far and each objective of the SLO with its samples, as the early-stop check judged them.
    #[tokio::test]
    async fn a_long_window_ticks_its_progress_with_every_objective() {
        use crate::controller::{LevelTick, Progress};
        use headroom_core::run::LevelResult;
        #[derive(Default)]
        struct Ticks(Mutex<Vec<LevelTick>>);
        impl Progress for Ticks {
            fn level_start(&self, _: &str, _: f64, _: LoadMode, _: Duration) {}
            fn level_done(&self, _: &str, _: &LevelResult) {}
            fn note(&self, _: &str) {}
            fn level_tick(&self, t: &LevelTick) {
                self.0.lock().unwrap().push(t.clone());
            }
        }
        let stub = StubServer::start(StubConfig::default()).unwrap();
        let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings(dir.path(), &[2.0]);
        s.measure = Duration::from_millis(2600);
        s.measure_max = s.measure;
        let ticks = Ticks::default();
        let on_result = |_: &RunResult| Ok(());
        Sweep {
            target: &t,
            plans: &plans("concurrency"),
            slo: &slo(),
            settings: &s,
            cancel: CancellationFlag::new(),
            progress: &ticks,
            on_result: &on_result,
            clock_lag: None,
            measurer: None,
        }
        .run()
        .await;
        let got = ticks.0.into_inner().unwrap();
        assert!(got.len() >= 2, "{} ticks in a 2.6 s window", got.len());
        let last = got.last().unwrap();
        let ids: Vec<String> = last.objectives.iter().map(|o| o.id.to_string()).collect();
        assert_eq!(ids, ["ttft_p50", "error_rate"]);
        assert!(
            last.finished > 0 && last.started >= last.finished,
            "{last:?}"
        );
        assert!(last.objectives[0].samples > 0, "{last:?}");
        assert!(
            got.windows(2)
                .all(|w| w[0].window_elapsed <= w[1].window_elapsed)
        );
    }

    /// `only_phase` runs that phase alone (a class, or the mix).
    #[tokio::test]
    async fn only_phase_sweeps_one_phase() {
        let stub = StubServer::start(StubConfig::default()).unwrap();
        let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
        let text = "load: {mode: concurrency}\nclasses:\n  - {name: a, endpoint: completions, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 4}}\n  - {name: b, endpoint: chat, prompt_tokens: {fixed: 8}, max_tokens: {fixed: 4}}\n";
        let w = headroom_load::workload::Workload::parse(text, Path::new("w.yaml"), Path::new("."))
            .unwrap();
        let p = headroom_load::prompt::ClassPlan::from_workload(&w, None).unwrap();
        for only in ["b", "mix"] {
            let dir = tempfile::tempdir().unwrap();
            let mut s = settings(dir.path(), &[1.0]);
            s.only_phase = Some(only.into());
            let partials = Mutex::new(Vec::new());
            let r = sweep_plans(&t, &p, &s, CancellationFlag::new(), &partials).await;
            let names: Vec<&str> = r.phases.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names, [only]);
        }
    }

    /// Prompts the server counts at about twice their request (uncalibrated words against a
    /// tokenizer that splits long words, plus a BOS): the sweep stops after the first level
    /// with the measured ratio instead of running every level to void it, and the level's
    /// PASS stands (longer prompts cannot have helped it) with the direction in its reason.
    #[tokio::test]
    async fn a_drifted_workload_stops_at_the_first_level_and_keeps_what_the_drift_cannot_explain() {
        use headroom_load::testkit::StubTokenizer;
        let stub = StubServer::start(StubConfig {
            tokenizer: StubTokenizer::Subword {
                tokenize: false,
                line_start_split: false,
            },
            ..StubConfig::default()
        })
        .unwrap();
        let t = Target::new(&stub.url(), None, Some("tiny")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let partials = Mutex::new(Vec::new());
        let r = sweep(
            &t,
            &settings(dir.path(), &[1.0, 2.0, 4.0]),
            CancellationFlag::new(),
            &partials,
        )
        .await;
        let levels = &r.phases[0].levels;
        assert_eq!(levels.len(), 1, "{:?} {:?}", r.status, levels[0].tokens);
        let ratio =
            levels[0].tokens.prompt_realised as f64 / levels[0].tokens.prompt_requested as f64;
        assert!(ratio > 1.25, "{ratio}");
        match &r.status {
            RunStatus::Stopped { reason } => {
                assert!(reason.contains("prompts realised"), "{reason}");
                assert!(reason.contains("--tokenizer"), "{reason}");
            }
            s => panic!("{s:?}"),
        }
        let ttft = levels[0]
            .objectives
            .iter()
            .find(|o| o.id.signal() == Some(headroom_core::LatencySignal::Ttft))
            .unwrap();
        assert_eq!(ttft.verdict, Verdict::Pass, "{ttft:?}");
        assert!(ttft.reason.contains("longer than specified"), "{ttft:?}");
        assert!(
            levels[0].warnings.iter().any(|w| w.contains("drifted")),
            "{:?}",
            levels[0].warnings
        );
    }
}

/// The error objective counts every request of the level that ended (warm-up, window and
/// drain: 6 errors of 27, where the window alone has 4 of 20), and levels.csv and the reports
/// count the same population through `LevelResult::level_outcomes`.
#[test]
fn the_error_objective_counts_what_the_reports_show() {
    use crate::controller::{Phase, client_objectives};
    use headroom_core::Outcome;
    use headroom_core::run::LoadMode;
    use headroom_core::slo::SloFile;
    use headroom_load::recorder::LevelRecording;
    let slo = SloFile::parse(
        "objectives:\n  \"*\":\n    error_rate: 0.5%\n",
        Path::new("slo.yaml"),
    )
    .unwrap();
    let phase = Phase {
        name: "a".into(),
        plans: plans("concurrency"),
    };
    let mut rec = LevelRecording::new(2.0, LoadMode::Concurrency, &["a"]);
    let window = [
        (Outcome::Length, 16),
        (Outcome::HttpStatus(500), 4),
        (Outcome::ClientCancel, 3),
    ];
    rec.classes[0].outcomes.extend(window);
    rec.class_totals[0].outcomes.extend([
        (Outcome::Length, 21),
        (Outcome::HttpStatus(500), 6),
        (Outcome::ClientCancel, 3),
    ]);
    let r = client_objectives(&slo, &phase, &rec, true);
    let e = r.iter().find(|o| o.id == "error_rate").unwrap();
    // Every request of the level that ended: 21 + 6 finished, 6 errors (cancels excluded).
    assert_eq!(e.samples, 27);
    assert_eq!(e.observed, Some(6.0 / 27.0));
    assert!(
        e.reason
            .starts_with("6 errors + aborts of 27 finished requests"),
        "{}",
        e.reason
    );
    // What levels.csv and report.md count: the level's outcome labels, the same population.
    let level = headroom_core::run::LevelResult {
        outcomes: rec.total().outcome_labels(),
        level_outcomes: rec.level_totals().outcome_labels(),
        ..crate::controller::tests::level_with(&[])
    };
    assert_eq!(level.error_counts(), (6, 27));
    // Results written before level_outcomes existed fall back to the window's outcomes.
    let old = headroom_core::run::LevelResult {
        outcomes: rec.total().outcome_labels(),
        ..crate::controller::tests::level_with(&[])
    };
    assert_eq!(old.error_counts(), (4, 20));
}

/// Queue time with per-request engine metrics: those arrive with a request's last chunk, so with
/// answers longer than the window only a few exist. Below the percentile's minimum (20 for p95)
/// the client's TTFT bound decides (queue time ≤ TTFT for every window start); with enough
/// per-request values, they decide. (The demo's 32-concurrent level read "too few samples:
/// queue_time_p95 1 of 20" beside 24 TTFT samples all far below the threshold.)
#[test]
fn few_per_request_queue_times_fall_back_to_the_ttft_bound() {
    use crate::controller::{Phase, client_objectives};
    use headroom_core::run::LoadMode;
    use headroom_core::slo::SloFile;
    use headroom_load::recorder::LevelRecording;
    let slo = SloFile::parse(
        "objectives:\n  \"*\":\n    queue_time: {p95: 300ms}\n",
        Path::new("slo.yaml"),
    )
    .unwrap();
    let phase = Phase {
        name: "a".into(),
        plans: plans("concurrency"),
    };
    let judge = |queue_values: u64| {
        let mut rec = LevelRecording::new(32.0, LoadMode::Concurrency, &["a"]);
        let c = &mut rec.classes[0];
        for _ in 0..24 {
            c.ttft.record(50_000_000).unwrap(); // 50 ms
        }
        for _ in 0..queue_values {
            c.queue_time.record(10_000_000).unwrap(); // 10 ms
        }
        let r = client_objectives(&slo, &phase, &rec, true);
        r.into_iter().find(|o| o.id == "queue_time_p95").unwrap()
    };
    let r = judge(1);
    assert_eq!(r.verdict, headroom_core::Verdict::Pass, "{}", r.reason);
    assert_eq!(r.samples, 24);
    assert!(
        r.reason.starts_with("bounded by the client's TTFT"),
        "{}",
        r.reason
    );
    let r = judge(25);
    assert_eq!(r.verdict, headroom_core::Verdict::Pass, "{}", r.reason);
    assert_eq!(r.samples, 25);
    assert!(
        r.reason.contains("per-request engine metrics"),
        "{}",
        r.reason
    );
}

/// A server whose usage says it prefilled nothing has drifted as far as a server can: the drift
/// voids a PASS (it was ignored as "no usage", and a PASS stood).
#[test]
fn usage_of_zero_prompt_tokens_is_a_drift() {
    use crate::controller::drift;
    use headroom_core::run::TokenCounts;
    let t = |req, real| TokenCounts {
        prompt_requested: req,
        prompt_realised: real,
        ..TokenCounts::default()
    };
    let d = drift(&t(2880, 0)).expect("a drift");
    assert_eq!(d.prompt_ratio, 0.0);
    assert!(d.voids(headroom_core::Verdict::Pass));
    assert!(drift(&t(0, 0)).is_none());
    assert!(drift(&t(1000, 1100)).is_none());
}

//! `--from` files and run directories, with the real fixtures.

use headroom_signals::adapter::Signal;
use headroom_signals::source::{
    ScrapeKind, SourceError, load_files, load_run_dir, scrape_file_name, write_scrape,
};
use headroom_signals::{Scrape, Window, WindowOptions};

fn fixture_path(rel: &str) -> String {
    format!("{}/../../fixtures/{rel}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn from_files_with_explicit_times() {
    let args = vec![
        format!("{}@1000", fixture_path("vllm/v0.32-cpu-pre-burst.prom")),
        format!(
            "{}@1030.5",
            fixture_path("vllm/v0.32-cpu-after-burst-c16.prom")
        ),
        format!("{}@1030.6", fixture_path("dcgm/t4-loaded-no-help.prom")),
    ];
    let loaded = load_files(&args).unwrap();
    assert_eq!(loaded.engine.len(), 2);
    assert_eq!(loaded.dcgm.len(), 1);
    assert_eq!(loaded.engine[1].at_unix_s, 1030.5);
    let w = Window::from_scrapes(&loaded.engine, &loaded.dcgm, &WindowOptions::default()).unwrap();
    assert_eq!(w.duration_s(), Some(30.5));
    // 97 → 1121 prompt tokens
    assert_eq!(w.counter(Signal::PromptTokens), Some(1024.0));
    assert_eq!(w.gpus.len(), 1);
}

#[test]
fn from_files_errors_name_the_file() {
    let missing = "/nonexistent/dir/x.prom".to_owned();
    let e = load_files(std::slice::from_ref(&missing)).unwrap_err();
    assert!(e.to_string().contains(&missing), "{e}");
    let only_dcgm = vec![fixture_path("dcgm/l4-idle-default-counters.prom")];
    assert!(matches!(
        load_files(&only_dcgm),
        Err(SourceError::NoEngineScrape(_))
    ));
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("page.prom");
    std::fs::write(&html, "<!DOCTYPE html><html></html>").unwrap();
    let e = load_files(&[html.display().to_string()]).unwrap_err();
    assert!(e.to_string().contains("HTML"), "{e}");
}

#[test]
fn run_dir_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let read = |rel: &str| std::fs::read_to_string(fixture_path(rel)).unwrap();
    let s = |rel: &str, at: f64| Scrape::from_body(rel, read(rel), at, None).unwrap();
    write_scrape(
        dir.path(),
        0,
        0,
        ScrapeKind::Engine,
        &s("vllm/v0.32-cpu-idle.prom", 100.0),
    )
    .unwrap();
    write_scrape(
        dir.path(),
        0,
        1,
        ScrapeKind::Engine,
        &s("vllm/v0.32-cpu-pre-burst.prom", 110.0),
    )
    .unwrap();
    write_scrape(
        dir.path(),
        1,
        0,
        ScrapeKind::Engine,
        &s("vllm/v0.32-cpu-pre-burst.prom", 120.0),
    )
    .unwrap();
    let rel = write_scrape(
        dir.path(),
        1,
        1,
        ScrapeKind::Engine,
        &s("vllm/v0.32-cpu-after-burst-c16.prom", 150.0),
    )
    .unwrap();
    assert_eq!(
        rel,
        format!(
            "scrapes/{}",
            scrape_file_name(1, 1, ScrapeKind::Engine, 150.0)
        )
    );
    write_scrape(
        dir.path(),
        1,
        1,
        ScrapeKind::Dcgm,
        &s("dcgm/t4-loaded-no-help.prom", 150.0),
    )
    .unwrap();
    std::fs::write(dir.path().join("scrapes/README"), "ignored").unwrap();

    let levels = load_run_dir(dir.path()).unwrap();
    assert_eq!(levels.len(), 2);
    let l1 = &levels[&1];
    assert_eq!((l1.engine.len(), l1.dcgm.len()), (2, 1));
    let w = Window::from_scrapes(&l1.engine, &l1.dcgm, &WindowOptions::default()).unwrap();
    assert_eq!(w.duration_s(), Some(30.0));
    assert_eq!(w.counter(Signal::GenerationTokens), Some(2048.0)); // 67 → 2115
    let w0 = Window::from_scrapes(&levels[&0].engine, &[], &WindowOptions::default()).unwrap();
    assert_eq!(w0.counter(Signal::PromptTokens), Some(97.0)); // 0 → 97

    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        load_run_dir(empty.path()),
        Err(SourceError::RunDir { .. })
    ));
}

/// A sweep's scrape files carry their time in their names; `--from` must use it rather than the
/// modification time (which a copy resets), so a 6-second window stays 6 seconds.
#[test]
fn sweep_scrape_names_give_the_time() {
    let dir = tempfile::tempdir().unwrap();
    let body = std::fs::read_to_string(fixture_path("vllm/v0.32-cpu-idle.prom")).unwrap();
    let a = dir.path().join("L000-0000-engine@1795983196.216.prom");
    let b = dir.path().join("L000-0004-engine@1795983202.248.prom");
    std::fs::write(&a, &body).unwrap();
    std::fs::write(&b, &body).unwrap();
    let loaded =
        headroom_signals::source::load_files(&[a.display().to_string(), b.display().to_string()])
            .unwrap();
    assert_eq!(loaded.engine[0].at_unix_s, 1795983196.216);
    assert_eq!(loaded.engine[1].at_unix_s, 1795983202.248);
}

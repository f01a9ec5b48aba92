//! Fuzz target: the exposition parser, the adapters and the window never panic, whatever the
//! bytes. Run: `cd crates/signals/fuzz && cargo +nightly fuzz run parse`.
//! Seed corpus: the fixture bodies in `shared/fixtures/{vllm,dcgm}`.
#![no_main]

use headroom_signals::adapter::{Selection, dcgm_snapshot, engine_snapshot};
use headroom_signals::exposition::{Format, Limits, parse_with};
use headroom_signals::{Scrape, Window, WindowOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // Small limits so that the limit paths are exercised too.
    let small = Limits {
        max_line_bytes: 512,
        max_labels_per_sample: 8,
        max_samples: 64,
        max_families: 32,
        ..Limits::default()
    };
    for format in [Format::Auto, Format::Text004, Format::OpenMetrics] {
        let _ = parse_with(&text, format, &small);
    }
    if let Ok(exp) = parse_with(&text, Format::Auto, &Limits::default()) {
        let snap = engine_snapshot(&exp, None, &Selection::default());
        for hs in snap.histograms.values().flatten() {
            let h = headroom_signals::Histogram::from_pairs(hs.buckets.iter().copied(), hs.sum, hs.count);
            for q in [0.0, 0.5, 0.99, 1.0] {
                let _ = h.quantile(q);
            }
            let _ = h.fraction_le(0.1);
        }
        let _ = dcgm_snapshot(&exp);
    }
    // Two scrapes from the two halves: windows with arbitrary (even decreasing) values.
    let mid = text.len() / 2;
    if let (Some(a), Some(b)) = (text.get(..mid), text.get(mid..)) {
        let sa = Scrape::from_body("a", a.to_owned(), 1.0, None);
        let sb = Scrape::from_body("b", b.to_owned(), 2.0, None);
        if let (Ok(sa), Ok(sb)) = (sa, sb) {
            let w = Window::from_scrapes(&[sa.clone(), sb.clone()], &[sa, sb], &WindowOptions::default());
            if let Ok(w) = w {
                for h in w.histograms.values() {
                    let _ = h.quantile(0.95);
                }
            }
        }
    }
});

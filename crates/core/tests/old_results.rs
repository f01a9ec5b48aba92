//! A `results.json` written before objective results were typed (schema version 1, by the
//! `headroom sweep --quick` of the code before) still reads, and writes back the same
//! bytes: ids, figures and reasons as they were, and no `bound` or `source` that the file did
//! not have.

use headroom_core::LatencySignal;
use headroom_core::objective::{Bound, ObjectiveKind};
use headroom_core::run::{RESULTS_SCHEMA_VERSION, RunResult};

const OLD: &str = include_str!("fixtures/results_v1.json");

#[test]
fn an_old_results_json_reads_and_writes_back_byte_for_byte() {
    let run: RunResult = serde_json::from_str(OLD).unwrap();
    assert_eq!(run.schema_version, RESULTS_SCHEMA_VERSION);
    let again = serde_json::to_string_pretty(&run).unwrap();
    assert_eq!(again, OLD.trim_end());
}

#[test]
fn the_old_ids_read_as_the_objectives_they_name() {
    let run: RunResult = serde_json::from_str(OLD).unwrap();
    let level = &run.phases[0].levels[0];
    let kinds: Vec<ObjectiveKind> = level.objectives.iter().map(|o| o.id.kind).collect();
    let lat = |signal, percentile| ObjectiveKind::Latency {
        signal,
        percentile: headroom_core::slo::PctKey(percentile),
    };
    assert_eq!(
        kinds,
        [
            lat(LatencySignal::Ttft, 95_000),
            lat(LatencySignal::Itl, 95_000),
            lat(LatencySignal::QueueTime, 95_000),
            ObjectiveKind::ErrorRate,
        ]
    );
    for o in run
        .phases
        .iter()
        .flat_map(|p| &p.levels)
        .flat_map(|l| &l.objectives)
    {
        assert_eq!(o.id.class(), None, "{}", o.id);
        assert_eq!(o.bound, Bound::Exact, "{}", o.id);
        assert_eq!(o.source, None, "{}", o.id);
    }
    assert_eq!(
        run.phases[0].first_breach.as_ref().map(|id| id.kind),
        Some(lat(LatencySignal::Itl, 95_000))
    );
}

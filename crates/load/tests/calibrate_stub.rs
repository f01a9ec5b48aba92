//! Prompt calibration against a stub that counts tokens its own way (6+ letter words are two
//! tokens, a BOS per prompt, 4 template tokens per chat message and 3 for the generation
//! prompt): the sizes the sweep then sends must be what the stub reports in `usage`, whichever
//! way calibration learned them.

use headroom_load::calibrate::{Method, Shape, calibrate, check_plans};
use headroom_load::client::Target;
use headroom_load::prompt::ClassPlan;
use headroom_load::testkit::{StubConfig, StubFault, StubServer, StubTokenizer};
use headroom_load::workload::Workload;
use std::path::Path;
use std::sync::Arc;

const CLASSES: &str = "  - {name: plain, endpoint: completions, prompt_tokens: {fixed: 64}, max_tokens: {fixed: 4}}
  - name: prefixed
    endpoint: completions
    shared_prefix_tokens: 40
    prompt_tokens: {uniform: {min: 20, max: 300}}
    max_tokens: {fixed: 4}
  - {name: chat, endpoint: chat, prompt_tokens: {fixed: 100}, max_tokens: {fixed: 4}}
  - {name: rag, endpoint: chat, shared_prefix_tokens: 200, prompt_tokens: {fixed: 50}, max_tokens: {fixed: 4}}
";

fn plans() -> Vec<ClassPlan> {
    let text = format!("load: {{mode: concurrency}}\nclasses:\n{CLASSES}");
    let w = Workload::parse(&text, Path::new("w.yaml"), Path::new(".")).unwrap();
    ClassPlan::from_workload(&w, None).unwrap()
}

fn stub(tokenizer: StubTokenizer) -> StubServer {
    StubServer::start(StubConfig {
        tokenizer,
        ..StubConfig::default()
    })
    .unwrap()
}

/// Calibrates, then checks several seeds' draws of every class: realised == requested.
async fn exact_after_calibration(tok: StubTokenizer, want: Method, overhead: &[(Shape, u32)]) {
    let s = stub(tok);
    let t = Target::new(&s.url(), None, Some("tiny")).unwrap();
    let raw = plans();
    let (cal, mut report) = calibrate(&t, &raw, None, None).await;
    assert_eq!(report.method, want, "{report:?}");
    for (shape, n) in overhead {
        assert_eq!(cal.overhead_of(*shape), *n, "{shape:?}: {report:?}");
    }
    let plans = ClassPlan::calibrated(&raw, Arc::new(cal)).unwrap();
    for seed in 1..=5 {
        report.checks.clear();
        check_plans(&t, &plans, seed, &mut report).await;
        assert_eq!(report.checks.len(), 4, "{report:?}");
        for c in &report.checks {
            assert_eq!(c.realised, c.requested, "seed {seed}: {c:?}");
        }
    }
    assert_eq!(report.worst_residual(), Some(0.0));
    // The shared prefix is one text for every request of a class (a prefix cache sees it).
    let mut rng = headroom_load::arrivals::seeded_rng(9, 9);
    let a = plans[3].draw(3, &mut rng).unwrap();
    let b = plans[3].draw(3, &mut rng).unwrap();
    assert_eq!(a.prefix, b.prefix);
    assert_ne!(a.prompt, b.prompt);
}

#[tokio::test]
async fn tokenize_endpoint_gives_exact_sizes() {
    exact_after_calibration(
        StubTokenizer::Subword {
            tokenize: true,
            line_start_split: false,
        },
        Method::TokenizeEndpoint {
            path: "/tokenize".into(),
        },
        &[
            (Shape::Completions, 1),
            (Shape::ChatUser, 1 + 4 + 3),
            (Shape::ChatSystemUser, 1 + 8 + 3),
        ],
    )
    .await;
}

/// A SentencePiece-like tokenizer splits some words at a line start (a chat message's first
/// word): those must not start a text, or chat prompts come out a token long now and then.
#[tokio::test]
async fn words_that_split_at_a_line_start_do_not_start_a_message() {
    for tokenize in [true, false] {
        exact_after_calibration(
            StubTokenizer::Subword {
                tokenize,
                line_start_split: true,
            },
            if tokenize {
                Method::TokenizeEndpoint {
                    path: "/tokenize".into(),
                }
            } else {
                Method::Usage
            },
            &[
                (Shape::Completions, 1),
                (Shape::ChatUser, 8),
                (Shape::ChatSystemUser, 12),
            ],
        )
        .await;
    }
}

#[tokio::test]
async fn usage_alone_gives_exact_sizes() {
    exact_after_calibration(
        StubTokenizer::Subword {
            tokenize: false,
            line_start_split: false,
        },
        Method::Usage,
        &[
            (Shape::Completions, 1),
            (Shape::ChatUser, 8),
            (Shape::ChatSystemUser, 12),
        ],
    )
    .await;
}

#[tokio::test]
async fn one_token_per_word_needs_no_correction() {
    exact_after_calibration(
        StubTokenizer::Words,
        Method::Usage,
        &[
            (Shape::Completions, 0),
            (Shape::ChatUser, 0),
            (Shape::ChatSystemUser, 0),
        ],
    )
    .await;
}

/// Uncalibrated, the same stub is far off: the test above measures something.
#[tokio::test]
async fn without_calibration_the_stub_counts_more() {
    let s = stub(StubTokenizer::Subword {
        tokenize: true,
        line_start_split: false,
    });
    let t = Target::new(&s.url(), None, Some("tiny")).unwrap();
    let (_, mut report) = calibrate(&t, &[], None, None).await;
    check_plans(&t, &plans(), 1, &mut report).await;
    let worst = report.worst_residual().unwrap();
    assert!(worst > 0.1, "{report:?}");
}

/// A server that fails every request leaves the prompts uncalibrated, with the reason.
#[tokio::test]
async fn a_failing_server_falls_back_to_words_with_a_reason() {
    let s = StubServer::start(StubConfig {
        fault: StubFault::Status(500, "boom".into()),
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&s.url(), None, Some("tiny")).unwrap();
    let (cal, report) = calibrate(&t, &plans(), None, None).await;
    match &report.method {
        Method::Words { reason } => assert!(reason.contains("500"), "{reason}"),
        m => panic!("{m:?}"),
    }
    assert!(cal.overhead.is_empty());
}

/// A server that fails now and then (the first requests here) is still calibrated.
#[tokio::test]
async fn a_server_that_errs_now_and_then_is_still_calibrated() {
    let s = StubServer::start(StubConfig {
        tokenizer: StubTokenizer::Subword {
            tokenize: false,
            line_start_split: false,
        },
        fault: StubFault::FailFirst { n: 5, status: 503 },
        ..StubConfig::default()
    })
    .unwrap();
    let t = Target::new(&s.url(), None, Some("tiny")).unwrap();
    let (cal, report) = calibrate(&t, &plans(), None, None).await;
    assert_eq!(report.method, Method::Usage, "{report:?}");
    assert_eq!(cal.overhead_of(Shape::ChatUser), 8);
}

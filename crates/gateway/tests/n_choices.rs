//! The load client and the gateway read an `n = 2` stream the same way: one content rule
//! (`headroom_core::signal::ChunkContent`: a chunk counts when any choice carries text), one SSE
//! framing, the last `finish_reason`. The stream is shaped as vLLM streams `n > 1` (one chunk per
//! choice and step, each naming its `index`, choices interleaved), with choice 1 starting before
//! choice 0, one chunk listing both choices (as a server that batches choices per step sends
//! them), and an event cut across two frames.

use headroom_core::Outcome;
use headroom_core::signal::RequestTiming;
use headroom_gateway::sse::{EventInfo, Finish, SseScanner};
use headroom_load::client::sse::{SseSplitter, StreamState};

const MS: u64 = 1_000_000;

/// (arrival in ms, frame bytes).
fn stream() -> Vec<(u64, String)> {
    let chunk = |choices: &str| {
        format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{choices}]}}\n\n"
        )
    };
    let one = |i: u32, content: &str, finish: &str| {
        chunk(&format!(
            "{{\"index\":{i},\"delta\":{{\"content\":\"{content}\"}},\"logprobs\":null,\"finish_reason\":{finish}}}"
        ))
    };
    let role = |i: u32| {
        chunk(&format!(
            "{{\"index\":{i},\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}"
        ))
    };
    let b = one(0, "B", "null");
    let (b1, b2) = b.split_at(40);
    vec![
        (0, role(0) + &role(1)),
        // Both choices listed; only the second has text: the first content chunk.
        (
            50,
            chunk(
                "{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":null},{\"index\":1,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}",
            ),
        ),
        (90, one(0, "A", "null")),
        (91, one(1, " there", "null")),
        (130, b1.to_string()),
        (131, b2.to_string()),
        (170, one(1, "!", "\"stop\"")),
        (210, one(0, "C", "\"length\"")),
        (
            211,
            "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":11,\"completion_tokens\":6}}\n\n".to_string(),
        ),
        (212, "data: [DONE]\n\n".to_string()),
    ]
}

/// What each side measured: content chunk arrivals (ns), completion tokens, how it finished.
#[derive(Debug, PartialEq)]
struct Seen {
    content_ns: Vec<u64>,
    tokens: Option<u32>,
    length: bool,
}

/// The client's path: frames timestamped on arrival, then split and read by its stream state.
fn client(frames: &[(u64, String)]) -> Seen {
    let mut sp = SseSplitter::new();
    let mut st = StreamState::default();
    for (t, f) in frames {
        sp.feed(f.as_bytes(), &mut |ev| st.on_event(ev, t * MS));
    }
    sp.finish(&mut |ev| st.on_event(ev, 212 * MS));
    assert!(st.done && st.protocol_error.is_none() && st.server_error.is_none());
    Seen {
        content_ns: st.content_chunk_ns.clone(),
        tokens: st.usage.and_then(|u| u.completion_tokens),
        length: st.outcome(false) == Outcome::Length,
    }
}

/// The gateway's path: the scanner it runs over every forwarded frame.
fn gateway(frames: &[(u64, String)]) -> Seen {
    let mut sc = SseScanner::new();
    let mut seen = Seen {
        content_ns: Vec::new(),
        tokens: None,
        length: false,
    };
    let mut finish = None;
    for (t, f) in frames {
        sc.feed(f.as_bytes(), &mut |ev: EventInfo| {
            if ev.content {
                seen.content_ns.push(t * MS);
            }
            finish = ev.finish.or(finish);
            seen.tokens = ev.completion_tokens.or(seen.tokens);
        });
    }
    sc.finish(&mut |_| {});
    seen.length = finish == Some(Finish::Length);
    seen
}

#[test]
fn an_n2_stream_reads_the_same_on_both_sides() {
    let frames = stream();
    let (c, g) = (client(&frames), gateway(&frames));
    assert_eq!(c, g);
    // By hand: content at 50 (choice 1's "Hi", listed second), 90, 91, 131 (the event cut at
    // 130 completes at 131), 170, 210 ms; choices[0] alone would have put TTFT at 90 ms.
    assert_eq!(
        c.content_ns,
        [50, 90, 91, 131, 170, 210].map(|ms| ms * MS).to_vec()
    );
    let t = RequestTiming {
        content_chunk_ns: c.content_ns.clone(),
        end_ns: 212 * MS,
        output_tokens: c.tokens,
    };
    assert_eq!(t.ttft_ns(), Some(50 * MS));
    // ITL over the merged stream: 40, 1, 40, 39, 40 ms.
    assert_eq!(
        t.itl_ns().collect::<Vec<_>>(),
        [40, 1, 40, 39, 40].map(|ms| ms * MS).to_vec()
    );
    // usage.completion_tokens sums both choices (6); the last finish_reason is choice 0's.
    assert_eq!((c.tokens, c.length), (Some(6), true));
}

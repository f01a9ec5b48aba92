//! Headroom's shared vocabulary: no network I/O, no clock — except the one file write every
//! run-directory writer shares ([`atomic`]), the run directory's layout and its bounded reads
//! ([`run_dir`]), and the open-file limit the client and the gateway both raise ([`fd_limit`]).
//!
//! What lives here: the definitions the field disagrees on (TTFT, ITL, TPOT, E2E, and which
//! stream chunk counts as generated text; see [`signal`]), request outcomes ([`outcome`]), the
//! SLO file ([`slo`]) and the verdict and finding types every judgement is expressed in
//! ([`verdict`]). What does not: HTTP and SSE (crate `wire`), parsing metrics (crate
//! `signals`), measuring (crate `load`), rendering (crate `report`).

pub mod atomic;
pub mod fd_limit;
pub mod input_file;
pub mod objective;
pub mod outcome;
pub mod run;
pub mod run_dir;
pub mod signal;
pub mod slo;
pub mod stats;
pub mod verdict;
pub mod yaml;

pub use outcome::Outcome;
pub use signal::{LatencySignal, RequestTiming};
pub use slo::{Objective, SloFile, SloSpec};
pub use verdict::{Confidence, Finding, Verdict};

/// An error and its sources, joined with `: ` (`client error (Connect): tcp connect error:
/// Connection refused (os error 111)`): HTTP client errors keep the operating system's reason
/// in their sources, and their own `Display` says only what failed.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Characters of an input line an error message may quote ([`excerpt`]).
pub const EXCERPT_CHARS: usize = 60;

/// A short, redacted excerpt of an input line for an error message: at most [`EXCERPT_CHARS`]
/// characters, control characters shown as `?`, and every word that looks like a credential (16
/// or more characters mixing letters and digits, or 12 or more with `$`, `/` or `+`: API keys,
/// password hashes, tokens) shown as `[N chars]`. A file an error quotes may not be what it claims to be (a link to
/// `/etc/shadow` or to a key file planted in a run directory), so no error repeats raw input.
pub fn excerpt(line: &str) -> String {
    let secretish = |w: &str| {
        let n = w.chars().count();
        let digits = w.chars().any(|c| c.is_ascii_digit());
        let letters = w.chars().any(char::is_alphabetic);
        let symbols = w.chars().any(|c| "$/+".contains(c));
        letters && ((n >= 16 && digits) || (n >= 12 && symbols))
    };
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if secretish(word) {
            out.push_str(&format!("[{} chars]", word.chars().count()));
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    // Words end at spaces, quotes, separators of YAML, metrics and passwd lines.
    for c in line.chars() {
        if c.is_whitespace() || "\"'{},:=;".contains(c) {
            flush(&mut word, &mut out);
            out.push(if c.is_control() { '?' } else { c });
        } else {
            word.push(if c.is_control() { '?' } else { c });
        }
    }
    flush(&mut word, &mut out);
    match out.char_indices().nth(EXCERPT_CHARS) {
        Some((i, _)) => format!("{}…", &out[..i]),
        None => out,
    }
}

#[cfg(test)]
mod excerpt_tests {
    use super::excerpt;

    #[test]
    fn secrets_and_long_lines_are_not_repeated() {
        let shadow = "root:$6$rOunDs$Qk3Jf8sLmN0pQrStUvWxYz1234567890abcdefghij:19000:0:99999:7:::";
        let e = excerpt(shadow);
        assert!(e.starts_with("root:[") && !e.contains("Qk3J"), "{e}");
        let e = excerpt("OPENAI_API_KEY=sk-proj-4f9a8b7c6d5e4f3a2b1c");
        assert!(!e.contains("4f9a8b"), "{e}");
        let e = excerpt("  threshold: -5");
        assert_eq!(e, "  threshold: -5");
        assert_eq!(excerpt("{p99.99999: 1s}"), "{p99.99999: 1s}");
        let e = excerpt(r#"vllm:num_requests_running{model_name="tiny"} 3"#);
        assert_eq!(e, r#"vllm:num_requests_running{model_name="tiny"} 3"#);
        assert!(excerpt(&"word ".repeat(100)).chars().count() <= super::EXCERPT_CHARS + 1);
        assert_eq!(excerpt("a\u{1b}[2Jb"), "a?[2Jb");
    }
}

#[cfg(test)]
mod error_chain_tests {
    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn joins_every_source() {
        let e = E("a", Some(Box::new(E("b", Some(Box::new(E("c", None)))))));
        assert_eq!(super::error_chain(&e), "a: b: c");
        assert_eq!(super::error_chain(&E("x", None)), "x");
    }
}

//! `parse_and_validate`: vLLM's validation rules and error shapes, checked against the real
//! vLLM 0.32 answers in `fixtures/openai/`.

use headroom_sim::server::{ApiError, Endpoint, ValidationContext, parse_and_validate};
use serde_json::Value;

fn ctx(len: u32) -> ValidationContext {
    ValidationContext {
        served_model_names: vec!["tiny".to_string()],
        max_model_len: len,
        // Qwen2.5's vocabulary.
        vocab_size: 151_936,
    }
}

/// The real vLLM answers are committed under `fixtures/` at the repository root.
fn fixture_body(name: &str) -> (u16, Value) {
    let path = format!(
        "{}/../../fixtures/openai/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let status: u16 = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .or_else(|| text.split("\n\n").nth(1))
        .unwrap();
    (status, serde_json::from_str(body.trim()).unwrap())
}

fn json(e: &ApiError) -> Value {
    serde_json::from_str(&e.to_json()).unwrap()
}

fn words(n: usize) -> String {
    vec!["w"; n].join(" ")
}

fn completion(body: &str, len: u32) -> Result<headroom_sim::server::ParsedRequest, ApiError> {
    parse_and_validate(Endpoint::Completions, body.as_bytes(), &ctx(len))
}

#[test]
fn max_tokens_above_max_model_len_is_the_fixture_error() {
    // error_max_tokens.txt: max_tokens=4096 with max_model_len=2048.
    let (status, want) = fixture_body("error_max_tokens.txt");
    let e = completion(
        r#"{"model":"tiny","prompt":"hello there","max_tokens":4096}"#,
        2048,
    )
    .unwrap_err();
    assert_eq!(e.status.as_u16(), status);
    assert_eq!(json(&e), want);
}

#[test]
fn prompt_too_long_is_the_fixture_error() {
    // error_prompt_too_long.txt: a 2100-token prompt with max_model_len=2048.
    let (status, want) = fixture_body("error_prompt_too_long.txt");
    let body =
        serde_json::json!({"model": "tiny", "prompt": words(2100), "max_tokens": 5}).to_string();
    let e = completion(&body, 2048).unwrap_err();
    assert_eq!(e.status.as_u16(), status);
    assert_eq!(json(&e), want);
}

#[test]
fn unknown_model_is_the_fixture_error() {
    let (status, want) = fixture_body("error_unknown_model.txt");
    let e = completion(r#"{"model":"nope","prompt":"hi","max_tokens":5}"#, 2048).unwrap_err();
    assert_eq!(e.status.as_u16(), status);
    assert_eq!(json(&e), want);
}

#[test]
fn prompt_plus_max_tokens_over_the_window_names_both() {
    // 2000 + 100 > 2048: vLLM's "'max_tokens' or 'max_completion_tokens' is too large" error.
    let body = serde_json::json!({"prompt": words(2000), "max_tokens": 100}).to_string();
    let e = completion(&body, 2048).unwrap_err();
    let v = json(&e);
    assert_eq!(v["error"]["type"], "BadRequestError");
    assert_eq!(v["error"]["param"], "max_tokens");
    assert_eq!(v["error"]["code"], 400);
    assert_eq!(
        v["error"]["message"],
        "'max_tokens' or 'max_completion_tokens' is too large: 100. This model's maximum context length is 2048 tokens \
         and your request has 2000 input tokens (100 > 2048 - 2000). (parameter=max_tokens, value=100)"
    );
    // 1948 + 100 = 2048 fits exactly.
    let body = serde_json::json!({"prompt": words(1948), "max_tokens": 100}).to_string();
    assert_eq!(completion(&body, 2048).unwrap().max_tokens, 100);
}

#[test]
fn missing_max_tokens_defaults_to_the_rest_of_the_window() {
    // vLLM: max_tokens = max_model_len - prompt_len.
    let r = completion(r#"{"prompt":"one two three"}"#, 2048).unwrap();
    assert_eq!(r.prompt_tokens.len(), 3);
    assert_eq!(r.max_tokens, 2045);
    assert!(!r.max_tokens_given);
    assert_eq!(r.model, "tiny");
    // A prompt that fills the window leaves no room for output.
    let body = serde_json::json!({"prompt": words(2048)}).to_string();
    assert_eq!(
        json(&completion(&body, 2048).unwrap_err())["error"]["param"],
        "input_tokens"
    );
}

#[test]
fn prompt_forms() {
    assert_eq!(
        completion(r#"{"prompt":["a b c"]}"#, 100)
            .unwrap()
            .prompt_tokens
            .len(),
        3
    );
    assert_eq!(
        completion(r#"{"prompt":[5,6,7,8]}"#, 100)
            .unwrap()
            .prompt_tokens,
        vec![5, 6, 7, 8]
    );
    assert_eq!(
        completion(r#"{"prompt":[[5,6]]}"#, 100)
            .unwrap()
            .prompt_tokens,
        vec![5, 6]
    );
    for bad in [r#"{"prompt":["a","b"]}"#, r#"{"prompt":[[1],[2]]}"#] {
        let e = completion(bad, 100).unwrap_err();
        assert_eq!(e.status.as_u16(), 400, "{bad}");
        assert!(
            e.message.contains("batched prompts"),
            "{bad}: {}",
            e.message
        );
    }
    for bad in [
        r#"{"prompt":[-1]}"#,
        r#"{"prompt":[1.5]}"#,
        r#"{"prompt":7}"#,
        r#"{"prompt":[true]}"#,
    ] {
        let e = completion(bad, 100).unwrap_err();
        assert_eq!((e.status.as_u16(), e.kind), (400, "Bad Request"), "{bad}");
    }
    let e = completion(r#"{"prompt":""}"#, 100).unwrap_err();
    assert_eq!(e.message, "The prompt cannot be empty.");
}

#[test]
fn chat_prompt_counts_the_chatml_template() {
    // "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n" splits on whitespace into
    // "<|im_start|>user", "hello", "world<|im_end|>", "<|im_start|>assistant": 4 tokens.
    let r = parse_and_validate(
        Endpoint::ChatCompletions,
        br#"{"model":"tiny","messages":[{"role":"user","content":"hello world"}],"max_completion_tokens":7,"max_tokens":3}"#,
        &ctx(100),
    )
    .unwrap();
    assert_eq!(r.prompt_tokens.len(), 4);
    // max_completion_tokens wins over max_tokens, as in vLLM.
    assert_eq!(r.max_tokens, 7);
    let parts = parse_and_validate(
        Endpoint::ChatCompletions,
        br#"{"messages":[{"role":"user","content":[{"type":"text","text":"hello world"}]}]}"#,
        &ctx(100),
    )
    .unwrap();
    assert_eq!(parts.prompt_tokens.len(), 4);
    let image = parse_and_validate(
        Endpoint::ChatCompletions,
        br#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#,
        &ctx(100),
    )
    .unwrap_err();
    assert_eq!(image.status.as_u16(), 400);
    let missing = parse_and_validate(
        Endpoint::ChatCompletions,
        br#"{"messages":[{"content":"x"}]}"#,
        &ctx(100),
    )
    .unwrap_err();
    assert!(
        missing
            .message
            .contains("'loc': ('body', 'messages', 0, 'role')"),
        "{}",
        missing.message
    );
}

#[test]
fn malformed_bodies_are_fastapi_validation_errors() {
    for (body, kind) in [
        ("", "json_invalid"),
        ("{", "json_invalid"),
        ("\u{0}\u{1}", "json_invalid"),
        ("[1,2]", "model_attributes_type"),
        ("null", "model_attributes_type"),
        (r#"{"prompt":"x","max_tokens":"ten"}"#, "int_parsing"),
        (r#"{"prompt":"x","max_tokens":[5]}"#, "int_type"),
        (r#"{"prompt":"x","max_tokens":2.5}"#, "int_from_float"),
        (r#"{"prompt":"x","stream":"maybe"}"#, "bool_parsing"),
        (r#"{"prompt":"x","stream":[true]}"#, "bool_type"),
        (r#"{"prompt":"x","temperature":"hot"}"#, "float_parsing"),
        (r#"{"prompt":"x","temperature":{}}"#, "float_type"),
        (r#"{"prompt":"x","model":5}"#, "string_type"),
        (r#"{"max_tokens":5}"#, "missing"),
    ] {
        let e = completion(body, 100).unwrap_err();
        let v = json(&e);
        assert_eq!(e.status.as_u16(), 400, "{body:?}");
        assert_eq!(v["error"]["type"], "Bad Request", "{body:?}");
        assert_eq!(v["error"]["param"], Value::Null, "{body:?}");
        assert_eq!(v["error"]["code"], 400, "{body:?}");
        assert!(
            e.message.contains(&format!("'type': '{kind}'")),
            "{body:?}: {}",
            e.message
        );
    }
    // A float with no fractional part is an integer to pydantic.
    assert_eq!(
        completion(r#"{"prompt":"x","max_tokens":5.0}"#, 100)
            .unwrap()
            .max_tokens,
        5
    );
}

#[test]
fn sampling_and_choice_checks() {
    let e = completion(r#"{"prompt":"x","n":2}"#, 100).unwrap_err();
    assert_eq!(
        (e.status.as_u16(), e.kind, e.param.as_deref()),
        (400, "BadRequestError", Some("n"))
    );
    assert!(
        e.message.ends_with("(parameter=n, value=2)"),
        "{}",
        e.message
    );
    assert!(completion(r#"{"prompt":"x","n":1,"temperature":0.7,"top_p":0.9,"stop":["\n"],"logprobs":null,"user":"u"}"#, 100).is_ok());
    assert_eq!(
        completion(r#"{"prompt":"x","max_tokens":0}"#, 100)
            .unwrap_err()
            .param
            .as_deref(),
        Some("max_tokens")
    );
    assert_eq!(
        completion(r#"{"prompt":"x","temperature":-1}"#, 100)
            .unwrap_err()
            .param
            .as_deref(),
        Some("temperature")
    );
    assert_eq!(
        completion(r#"{"prompt":"x","max_tokens":4,"min_tokens":5}"#, 100)
            .unwrap_err()
            .param
            .as_deref(),
        Some("min_tokens")
    );
    let r = completion(
        r#"{"prompt":"x","max_tokens":4,"min_tokens":4,"ignore_eos":true}"#,
        100,
    )
    .unwrap();
    assert_eq!((r.min_tokens, r.ignore_eos), (4, true));
}

#[test]
fn stream_options_follow_vllm() {
    let r = completion(r#"{"prompt":"x","stream":true}"#, 100).unwrap();
    assert!(r.stream && !r.include_usage && !r.continuous_usage);
    // StreamOptions.include_usage defaults to true once stream_options is given.
    let r = completion(r#"{"prompt":"x","stream":true,"stream_options":{}}"#, 100).unwrap();
    assert!(r.include_usage && !r.continuous_usage);
    let r = completion(r#"{"prompt":"x","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#, 100).unwrap();
    assert!(r.include_usage && r.continuous_usage);
    let r = completion(r#"{"prompt":"x","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}"#, 100).unwrap();
    assert!(!r.include_usage && !r.continuous_usage);
    let e = completion(
        r#"{"prompt":"x","stream_options":{"include_usage":true}}"#,
        100,
    )
    .unwrap_err();
    assert_eq!(e.kind, "Bad Request");
    assert!(
        e.message
            .contains("Stream options can only be defined when `stream=True`."),
        "{}",
        e.message
    );
}

#[test]
fn natural_stop_is_uniform_over_the_budget() {
    use headroom_sim::server::protocol::natural_output_len;
    // Uniform over [max(1, min_tokens), max_tokens]: for [1, 100] the mean is 50.5 and every value
    // occurs; the standard error of the mean over 20,000 draws is 0.20, allow 5 sigma.
    let n = 20_000u64;
    let draws: Vec<u32> = (0..n).map(|i| natural_output_len(11, i, 0, 100)).collect();
    assert!(draws.iter().all(|d| (1..=100).contains(d)));
    let mean = draws.iter().map(|d| f64::from(*d)).sum::<f64>() / n as f64;
    assert!((mean - 50.5).abs() < 1.0, "mean {mean}");
    assert!(draws.contains(&1) && draws.contains(&100));
    assert!((0..1000).all(|i| natural_output_len(11, i, 40, 50) >= 40));
    assert_eq!(natural_output_len(11, 5, 0, 1), 1);
    // Deterministic.
    assert_eq!(
        natural_output_len(3, 17, 0, 500),
        natural_output_len(3, 17, 0, 500)
    );
}

#[test]
fn prompt_token_ids_outside_the_vocabulary_are_refused_as_vllm_does() {
    // vLLM `InputProcessor._validate_model_input`: `max(prompt_ids) > vocab_size − 1` →
    // VLLMValidationError("Token id {max} is out of vocabulary"): 400 BadRequestError, no param.
    let c = ctx(4096); // vocab 151 936: ids 0 ..= 151 935
    let cases = [
        (
            r#"{"prompt":[4294967295,999999999],"max_tokens":2}"#,
            4_294_967_295_u64,
        ),
        (r#"{"prompt":[1,2,151936],"max_tokens":2}"#, 151_936),
        (r#"{"prompt":[[5,200000,151937]],"max_tokens":2}"#, 200_000),
        (r#"{"prompt":[151936]}"#, 151_936),
    ];
    for (body, max_id) in cases {
        let e = parse_and_validate(Endpoint::Completions, body.as_bytes(), &c).unwrap_err();
        assert_eq!(
            json(&e),
            serde_json::json!({"error": {
                "message": format!("Token id {max_id} is out of vocabulary"),
                "type": "BadRequestError",
                "param": null,
                "code": 400
            }}),
            "{body}"
        );
    }
    // The last id of the vocabulary is fine, in both list shapes.
    for body in [
        r#"{"prompt":[0,151935],"max_tokens":2}"#,
        r#"{"prompt":[[151935]],"max_tokens":2}"#,
    ] {
        let r = parse_and_validate(Endpoint::Completions, body.as_bytes(), &c).unwrap();
        assert_eq!(r.prompt_tokens.last(), Some(&151_935), "{body}");
    }
    // A small vocabulary: text is tokenised in-vocabulary by the server, never refused; ids are.
    let small = ValidationContext {
        vocab_size: 1000,
        ..ctx(4096)
    };
    let r = parse_and_validate(
        Endpoint::Completions,
        br#"{"prompt":"zebra quantum","max_tokens":2}"#,
        &small,
    );
    assert!(r.is_ok(), "{r:?}");
    let e = parse_and_validate(
        Endpoint::Completions,
        br#"{"prompt":[999,1000],"max_tokens":2}"#,
        &small,
    )
    .unwrap_err();
    assert_eq!(e.message, "Token id 1000 is out of vocabulary");
    // The serving layer's length check comes first, as in vLLM.
    let e = parse_and_validate(
        Endpoint::Completions,
        br#"{"prompt":[5000,5000,5000],"max_tokens":2}"#,
        &ValidationContext {
            vocab_size: 1000,
            ..ctx(4)
        },
    )
    .unwrap_err();
    assert_eq!(e.param.as_deref(), Some("max_tokens"), "{e:?}");
}

/// The one pydantic error `parse_and_validate` reports for `body`, as `(type, msg, input)`.
fn pydantic_issue(body: &str) -> (String, String, String) {
    let e = completion(body, 100).unwrap_err();
    assert_eq!((e.status.as_u16(), e.kind), (400, "Bad Request"), "{body}");
    // "[{'type': 'T', 'loc': (...), 'msg': 'M', 'input': I}]"
    let m = &e.message;
    let field = |key: &str, end: &str| -> String {
        let start = m.find(key).unwrap_or_else(|| panic!("{body}: {m}")) + key.len();
        let rest = &m[start..];
        rest[..rest.find(end).unwrap_or(rest.len())].to_string()
    };
    (
        field("'type': '", "'"),
        field("'msg': '", "'"),
        field("'input': ", "}]"),
    )
}

#[test]
fn numeric_fields_coerce_as_pydantic_lax_mode_does() {
    // pydantic-core `str_as_int` / `clean_int_str` / `float_as_int` (tests/validators/test_int.py):
    // strings of integers are accepted after trimming whitespace, a `+`, leading zeros, a `.0`
    // tail and single underscores; bools are 0/1; integral floats are integers.
    for (value, want) in [
        ("\"5\"", 5),
        ("\" 5 \"", 5),
        ("\"+5\"", 5),
        ("\"005\"", 5),
        ("\"5.00\"", 5),
        ("\"1_0\"", 10),
        ("\"0\"", 0),
        ("true", 1),
        ("5.0", 5),
        ("1e1", 10),
    ] {
        let body = format!(r#"{{"prompt":"x","max_tokens":{value},"ignore_eos":true}}"#);
        match completion(&body, 100) {
            Ok(r) => assert_eq!(i64::from(r.max_tokens), want, "{body}"),
            // 0 passes pydantic and is then vLLM's own check.
            Err(e) => {
                assert_eq!(want, 0, "{body}: {e:?}");
                assert_eq!(e.param.as_deref(), Some("max_tokens"));
            }
        }
    }
    // The same coercion for every int field: min_tokens, n, seed, top_k.
    let r = completion(
        r#"{"prompt":"x","max_tokens":"8","min_tokens":" 2","n":"1","seed":"-7","top_k":"040"}"#,
        100,
    )
    .unwrap();
    assert_eq!((r.max_tokens, r.min_tokens, r.seed), (8, 2, Some(-7)));
    // A numeric string too large for max_model_len is vLLM's semantic error, with the value.
    let e = completion(r#"{"prompt":"x","max_tokens":"500"}"#, 100).unwrap_err();
    assert!(
        e.message.ends_with("(parameter=max_tokens, value=500)"),
        "{e:?}"
    );

    // What pydantic refuses, with its type, message and Python repr of the input.
    let parsing = "Input should be a valid integer, unable to parse string as an integer";
    let size = "Unable to parse input string as an integer, exceeded maximum size";
    let fraction = "Input should be a valid integer, got a number with a fractional part";
    let cases: &[(&str, &str, &str, &str)] = &[
        // 1e30 has no fractional part; it is beyond i64 → int_parsing_size, input repr 1e+30.
        ("1e30", "int_parsing_size", size, "1e+30"),
        ("-1e19", "int_parsing_size", size, "-1e+19"),
        ("2.5", "int_from_float", fraction, "2.5"),
        ("1e-3", "int_from_float", fraction, "0.001"),
        ("\"5.5\"", "int_parsing", parsing, "'5.5'"),
        ("\"5.\"", "int_parsing", parsing, "'5.'"),
        ("\"1e3\"", "int_parsing", parsing, "'1e3'"),
        ("\"--5\"", "int_parsing", parsing, "'--5'"),
        ("\"+-5\"", "int_parsing", parsing, "'+-5'"),
        ("\"1__0\"", "int_parsing", parsing, "'1__0'"),
        ("\"_1\"", "int_parsing", parsing, "'_1'"),
        ("\"\"", "int_parsing", parsing, "''"),
        ("\"five\"", "int_parsing", parsing, "'five'"),
        ("[1]", "int_type", "Input should be a valid integer", "[1]"),
        ("{}", "int_type", "Input should be a valid integer", "{}"),
    ];
    for (value, kind, msg, input) in cases {
        let body = format!(r#"{{"prompt":"x","max_tokens":{value}}}"#);
        let (k, m, i) = pydantic_issue(&body);
        assert_eq!(
            (k.as_str(), m.as_str(), i.as_str()),
            (*kind, *msg, *input),
            "{body}"
        );
    }
    let long = format!(r#"{{"prompt":"x","max_tokens":"{}"}}"#, "1".repeat(4301));
    assert_eq!(pydantic_issue(&long).0, "int_parsing_size");

    // Floats (temperature, top_p) and bools (stream, ignore_eos) coerce the same way.
    let r = completion(
        r#"{"prompt":"x","max_tokens":3,"temperature":" 0.5","top_p":"1","stream":"yes","ignore_eos":1}"#,
        100,
    )
    .unwrap();
    assert!(r.stream && r.ignore_eos);
    let r = completion(r#"{"prompt":"x","stream":"OFF","ignore_eos":0}"#, 100).unwrap();
    assert!(!r.stream && !r.ignore_eos);
    for (body, kind, input) in [
        (r#"{"prompt":"x","stream":2}"#, "bool_parsing", "2"),
        (
            r#"{"prompt":"x","stream":null,"ignore_eos":"maybe"}"#,
            "bool_parsing",
            "'maybe'",
        ),
        (
            r#"{"prompt":"x","temperature":"warm"}"#,
            "float_parsing",
            "'warm'",
        ),
        (r#"{"prompt":"x","temperature":[1]}"#, "float_type", "[1]"),
    ] {
        assert_eq!(
            {
                let (k, _, i) = pydantic_issue(body);
                (k, i)
            },
            (kind.to_string(), input.to_string()),
            "{body}"
        );
    }
}

fn chat(body: &str) -> Result<headroom_sim::server::ParsedRequest, ApiError> {
    parse_and_validate(Endpoint::ChatCompletions, body.as_bytes(), &ctx(2048))
}

const MSG: &str = r#""messages":[{"role":"user","content":"hi"}]"#;

/// An output limit beyond i64 is echoed as sent (a Python int has no limit), never as the
/// saturated 9223372036854775807, and under the name of the field it came from.
#[test]
fn overflowing_output_limits_are_echoed_as_sent() {
    for (body, param, value) in [
        (
            r#"{"prompt":"x","max_tokens":18446744073709551615}"#.to_string(),
            "max_tokens",
            "18446744073709551615",
        ),
        (
            r#"{"prompt":"x","max_tokens":"123456789012345678901234567890"}"#.to_string(),
            "max_tokens",
            "123456789012345678901234567890",
        ),
        (
            r#"{"prompt":"x","max_tokens":" +00099999999999999999999 "}"#.to_string(),
            "max_tokens",
            "99999999999999999999",
        ),
    ] {
        let e = completion(&body, 2048).unwrap_err();
        assert_eq!(e.status.as_u16(), 400, "{body}");
        assert_eq!(e.param.as_deref(), Some(param), "{body}");
        assert!(
            e.message.starts_with(&format!(
                "{param}={value} cannot be greater than max_model_len=2048."
            )),
            "{body}: {}",
            e.message
        );
        assert!(!e.message.contains("9223372036854775807"), "{}", e.message);
    }
    let e = chat(&format!(
        r#"{{{MSG},"max_tokens":5,"max_completion_tokens":18446744073709551615}}"#
    ))
    .unwrap_err();
    assert_eq!(
        e.message,
        "max_completion_tokens=18446744073709551615 cannot be greater than max_model_len=2048. Please request fewer output tokens. (parameter=max_completion_tokens, value=18446744073709551615)"
    );
    let e = completion(
        r#"{"prompt":"x","max_tokens":"-99999999999999999999"}"#,
        2048,
    )
    .unwrap_err();
    assert!(
        e.message.contains("got -99999999999999999999."),
        "{}",
        e.message
    );
    let e = completion(r#"{"prompt":"x","n":18446744073709551615}"#, 2048).unwrap_err();
    assert!(
        e.message.starts_with("n=18446744073709551615 "),
        "{}",
        e.message
    );
}

/// A chat or completions request with extra `fields` (JSON members, comma-separated).
fn with_fields(
    is_chat: bool,
    fields: &str,
) -> Result<headroom_sim::server::ParsedRequest, ApiError> {
    if is_chat {
        chat(&format!("{{{MSG},{fields}}}"))
    } else {
        completion(&format!(r#"{{"prompt":"x",{fields}}}"#), 2048)
    }
}

/// vLLM 0.32's logprobs checks: the `mode="before"` validators (type, sign, `logprobs` needed
/// for `top_logprobs`, no prompt logprobs when streaming) as request-validation errors with
/// `param`, then `SamplingParams._validate_logprobs` against `--max-logprobs` (20).
#[test]
fn logprobs_are_validated_as_vllm_does() {
    // (endpoint is chat, body fields, param, message)
    let cases: &[(bool, &str, &str, &str)] = &[
        (
            false,
            r#""logprobs":"5""#,
            "logprobs",
            "Value error, `logprobs` must be an integer.",
        ),
        (
            false,
            r#""logprobs":-2"#,
            "logprobs",
            "Value error, `logprobs` must be a positive value or -1.",
        ),
        (
            false,
            r#""prompt_logprobs":[1]"#,
            "prompt_logprobs",
            "Value error, `prompt_logprobs` must be an integer.",
        ),
        (
            false,
            r#""prompt_logprobs":1,"stream":true"#,
            "prompt_logprobs",
            "Value error, `prompt_logprobs` are not available when `stream=True`.",
        ),
        (
            false,
            r#""prompt_logprobs":-3"#,
            "prompt_logprobs",
            "Value error, `prompt_logprobs` must be a positive value or -1.",
        ),
        (
            true,
            r#""top_logprobs":3"#,
            "top_logprobs",
            "Value error, when using `top_logprobs`, `logprobs` must be set to true.",
        ),
        (
            true,
            r#""top_logprobs":-1,"logprobs":false"#,
            "top_logprobs",
            "Value error, when using `top_logprobs`, `logprobs` must be set to true.",
        ),
        (
            true,
            r#""top_logprobs":-5,"logprobs":true"#,
            "top_logprobs",
            "Value error, `top_logprobs` must be a positive value or -1.",
        ),
        (
            true,
            r#""top_logprobs":"x","logprobs":true"#,
            "top_logprobs",
            "Value error, `top_logprobs` must be an integer.",
        ),
    ];
    for (is_chat, fields, param, msg) in cases {
        let e = with_fields(*is_chat, fields).unwrap_err();
        assert_eq!(e.status.as_u16(), 400, "{fields}");
        assert_eq!(e.kind, "Bad Request", "{fields}");
        assert_eq!(e.param.as_deref(), Some(*param), "{fields}");
        assert!(e.message.contains(msg), "{fields}: {}", e.message);
    }
    // Above --max-logprobs (20); -1 means the whole vocabulary.
    for (is_chat, fields, param, shown) in [
        (false, r#""logprobs":21"#, "logprobs", "21"),
        (false, r#""logprobs":-1"#, "logprobs", "151936"),
        (
            false,
            r#""logprobs":18446744073709551615"#,
            "logprobs",
            "18446744073709551615",
        ),
        (false, r#""prompt_logprobs":50"#, "prompt_logprobs", "50"),
        (
            true,
            r#""logprobs":true,"top_logprobs":21"#,
            "logprobs",
            "21",
        ),
        (
            true,
            r#""logprobs":true,"top_logprobs":-1"#,
            "logprobs",
            "151936",
        ),
    ] {
        let e = with_fields(is_chat, fields).unwrap_err();
        let what = if param == "prompt_logprobs" {
            "prompt"
        } else {
            "sample"
        };
        assert_eq!(
            json(&e)["error"],
            serde_json::json!({
                "message": format!("Requested {what} logprobs of {shown}, which is greater than max allowed: 20 (parameter={param}, value={shown})"),
                "type": "BadRequestError",
                "param": param,
                "code": 400,
            }),
            "{fields}"
        );
    }
    // Within the limit, and top_logprobs without logprobs at 0, are accepted.
    for fields in [
        r#""logprobs":20"#,
        r#""logprobs":0"#,
        r#""prompt_logprobs":-0.0"#,
    ] {
        completion(&format!(r#"{{"prompt":"x",{fields}}}"#), 2048)
            .unwrap_or_else(|e| panic!("{fields}: {e}"));
    }
    for fields in [
        r#""logprobs":true,"top_logprobs":20"#,
        r#""top_logprobs":0"#,
        r#""logprobs":false"#,
    ] {
        chat(&format!("{{{MSG},{fields}}}")).unwrap_or_else(|e| panic!("{fields}: {e}"));
    }
}

/// vLLM 0.32's completion and chat request models have no `best_of` (only the batch chat
/// endpoint declares one); as an extra field it is ignored, whatever its value or type.
#[test]
fn best_of_is_ignored_as_vllm_0_32_ignores_it() {
    for v in ["1", "4", "-3", "\"x\"", "null", "[1]"] {
        completion(
            &format!(r#"{{"prompt":"x","max_tokens":2,"best_of":{v}}}"#),
            2048,
        )
        .unwrap_or_else(|e| panic!("best_of {v}: {e}"));
        chat(&format!(r#"{{{MSG},"max_tokens":2,"best_of":{v}}}"#))
            .unwrap_or_else(|e| panic!("best_of {v}: {e}"));
    }
}

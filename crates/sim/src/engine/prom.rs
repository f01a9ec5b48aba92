//! Prometheus text-format helpers shared by the vLLM and dcgm renderers.

use std::fmt::Write as _;

/// Formats a float the way Python's `prometheus_client` does (`floatToGoString`):
/// Python `repr` (`0.0`, `1.0`, `0.005`, `1e-07`), `+Inf`/`-Inf`/`NaN`, and for positive values with
/// more than six digits before the point the exponent form Go would print (`1.7959698011131692e+09`).
pub fn py_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v == f64::INFINITY {
        return "+Inf".into();
    }
    if v == f64::NEG_INFINITY {
        return "-Inf".into();
    }
    let s = py_repr(v);
    if v > 0.0
        && let Some(dot) = s.find('.')
        && dot > 6
    {
        // f'{s[0]}.{s[1:dot]}{s[dot + 1:]}'.rstrip('0.') + f'e+0{dot - 1}'
        let m = format!("{}.{}{}", &s[..1], &s[1..dot], &s[dot + 1..]);
        let m = m.trim_end_matches(['0', '.']);
        return format!("{m}e+0{}", dot - 1);
    }
    s
}

/// Python `repr(float)`: shortest round-trip digits; exponent form below 1e-4 or from 1e16.
pub fn py_repr(v: f64) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let a = v.abs();
    if (1e-4..1e16).contains(&a) {
        let s = format!("{v:?}");
        if s.contains('e') {
            // Rust switches to exponent form earlier than Python in some ranges; expand it.
            return expand_exponent(&s);
        }
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        // Rust `{:e}` gives the shortest digits: "1e-7", "1.5e16" → Python "1e-07", "1.5e+16".
        let s = format!("{v:e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = e.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    }
}

fn expand_exponent(s: &str) -> String {
    // Only reached for values in [1e-4, 1e16) that Rust printed with an exponent.
    let v: f64 = s.parse().unwrap_or(0.0);
    let mut out = format!("{v}");
    if !out.contains('.') {
        out.push_str(".0");
    }
    out
}

/// Escapes a label value per the text format (`\\`, `\"`, `\n`).
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// `{a="x",b="y"}` with label names sorted, as `prometheus_client` prints them; empty → "".
pub fn label_set(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let mut p: Vec<&(&str, &str)> = pairs.iter().collect();
    p.sort_by(|a, b| a.0.cmp(b.0));
    let mut s = String::from("{");
    for (i, (k, v)) in p.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{k}=\"{}\"", escape_label(v));
    }
    s.push('}');
    s
}

/// A cumulative-on-render histogram with fixed upper bounds (the `+Inf` bucket is implicit).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// A histogram with the given finite upper bounds (ascending).
    pub fn new(bounds: &[f64]) -> Histogram {
        Histogram {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one observation (`le` semantics: a value equal to a bound falls in that bucket).
    #[inline]
    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// The finite upper bounds.
    pub fn bounds(&self) -> &[f64] {
        &self.bounds
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of observations.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Cumulative counts per bound, `+Inf` last.
    pub fn cumulative(&self) -> Vec<u64> {
        let mut acc = 0;
        self.counts
            .iter()
            .map(|c| {
                acc += c;
                acc
            })
            .collect()
    }

    /// Writes `_bucket`, `_count`, `_sum` samples (prometheus_client order).
    pub fn write_samples(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        let cum = self.cumulative();
        for (i, c) in cum.iter().enumerate() {
            let le = if i < self.bounds.len() {
                py_float(self.bounds[i])
            } else {
                "+Inf".into()
            };
            let mut l: Vec<(&str, &str)> = labels.to_vec();
            l.push(("le", &le));
            let _ = writeln!(
                out,
                "{name}_bucket{} {}",
                label_set(&l),
                py_float(*c as f64)
            );
        }
        let ls = label_set(labels);
        let _ = writeln!(out, "{name}_count{ls} {}", py_float(self.count as f64));
        let _ = writeln!(out, "{name}_sum{ls} {}", py_float(self.sum));
    }
}

/// vLLM's `build_1_2_5_buckets(max_value)`: 1, 2, 5, 10, 20, 50, … while ≤ `max_value`.
pub fn buckets_1_2_5(max_value: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut exp: u32 = 0;
    loop {
        for m in [1u64, 2, 5] {
            let v = m.saturating_mul(10u64.saturating_pow(exp));
            if v > max_value {
                return out;
            }
            out.push(v as f64);
        }
        exp += 1;
        if exp > 18 {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_formatting_matches_prometheus_client() {
        // Expected strings copied from fixtures/vllm/v0.32-*.prom.
        assert_eq!(py_float(0.0), "0.0");
        assert_eq!(py_float(27.0), "27.0");
        assert_eq!(py_float(0.001), "0.001");
        assert_eq!(py_float(2560.0), "2560.0");
        assert_eq!(py_float(1121.0), "1121.0");
        assert_eq!(py_float(2.5636824520002506), "2.5636824520002506");
        assert_eq!(py_float(1.7959698011131692e9), "1.7959698011131692e+09");
        assert_eq!(py_float(1.795969801114099e9), "1.795969801114099e+09");
        assert_eq!(py_float(4.850696192e9), "4.850696192e+09");
        assert_eq!(py_float(f64::INFINITY), "+Inf");
        // Python repr for small/huge magnitudes.
        assert_eq!(py_repr(1e-7), "1e-07");
        assert_eq!(py_repr(1.5e16), "1.5e+16");
    }

    #[test]
    fn one_two_five_buckets_like_vllm() {
        assert_eq!(
            buckets_1_2_5(2048),
            vec![1., 2., 5., 10., 20., 50., 100., 200., 500., 1000., 2000.]
        );
        assert_eq!(buckets_1_2_5(1), vec![1.0]);
    }

    #[test]
    fn histogram_le_semantics() {
        let mut h = Histogram::new(&[1.0, 2.0]);
        h.observe(1.0);
        h.observe(1.5);
        h.observe(3.0);
        assert_eq!(h.cumulative(), vec![1, 2, 3]);
        assert_eq!(h.sum(), 5.5);
    }
}

"""A small reader of the Prometheus text exposition format (version 0.0.4), for the suite's own
checks. Written independently of Headroom's parser (crates/signals) so the suite does not grade
Headroom with Headroom.

parse(text) -> Exposition with
  .types:   {family: "counter" | "gauge" | "histogram" | "summary" | "untyped"}  (from # TYPE)
  .helps:   {family: help text}
  .samples: [(sample_name, {label: value}, float_value)]
  .family_of(sample_name) -> the family the sample belongs to (histogram/summary suffixes resolved)
"""
import math
import re

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count", "_created"),
             "summary": ("_sum", "_count", "_created"),
             "counter": ("_total", "_created")}


class ParseError(ValueError):
    pass


class Exposition:
    def __init__(self):
        self.types, self.helps, self.samples = {}, {}, []

    def family_of(self, name):
        if name in self.types:
            return name
        for fam_type, sufs in _SUFFIXES.items():
            for s in sufs:
                if name.endswith(s):
                    base = name[: -len(s)]
                    if self.types.get(base) == fam_type:
                        return base
        return name

    def value(self, name, **labels):
        """Sum of the samples named `name` whose labels include `labels` (0.0 if none)."""
        return sum(v for n, l, v in self.samples
                   if n == name and all(l.get(k) == x for k, x in labels.items()))


def parse_labels(s, where):
    out, pos = {}, 0
    while pos < len(s):
        m = _LABEL.match(s, pos)
        if not m:
            raise ParseError(f"{where}: bad label set at column {pos}: {s[pos:pos + 40]!r}")
        out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        pos = m.end()
    return out


def parse(text, source="<metrics>"):
    e = Exposition()
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                e.types[parts[2]] = parts[3].strip() if len(parts) > 3 else "untyped"
            elif len(parts) >= 3 and parts[1] == "HELP":
                e.helps[parts[2]] = parts[3] if len(parts) > 3 else ""
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ParseError(f"{source}:{i}: not a sample line: {line[:80]!r}")
        v = m.group(3)
        value = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}.get(v)
        if value is None:
            try:
                value = float(v)
            except ValueError:
                raise ParseError(f"{source}:{i}: value {v!r} is not a number") from None
        e.samples.append((m.group(1), parse_labels(m.group(2) or "", f"{source}:{i}"), value))
    return e


def load(path):
    with open(path, encoding="utf-8") as f:
        return parse(f.read(), path)

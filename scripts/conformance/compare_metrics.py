#!/usr/bin/env python3
"""Twin conformance: compare the engine twin's /metrics with a live vLLM's.

    compare_metrics.py LIVE.prom TWIN.prom [--prefix vllm: --also http_requests_total]

Scope: families whose name starts with --prefix (default `vllm:`) plus the --also families
(default `http_requests_total`, which Headroom reads for errors the engine never saw). Process,
Python-runtime and prometheus-fastapi-instrumentator families (`process_*`, `python_*`,
`http_request_size_bytes`, ...) are the API server's, not the engine's, and are out of scope.

For every family in scope, on either side:
  * it exists on both sides (the twin neither misses one nor invents one);
  * the TYPE is the same;
  * the set of label names is the same (`le` and `quantile` aside);
  * for histograms, every series has the same bucket bounds (`le`) on both sides. vLLM makes the
    latency buckets configurable only through `--custom-histogram-buckets` (left at its default
    here); the token-count buckets (request_prompt_tokens, request_generation_tokens,
    request_params_max_tokens, ...) are derived from --max-model-len, so the suite starts both
    with the same --max-model-len and they must match too;
  * for the enumerated labels (finished_reason, engine, model_name) the set of values is the same.
HELP texts that differ are listed as notes, not failures. Exit status 1 if anything fails.
"""
import argparse
import sys

import promtext

ENUM_LABELS = ("finished_reason", "engine", "model_name")


def summarize(e, in_scope):
    fams = {}
    for name, labels, _ in e.samples:
        fam = e.family_of(name)
        if not in_scope(fam):
            continue
        f = fams.setdefault(fam, {"type": e.types.get(fam, "untyped"), "labels": set(),
                                  "buckets": {}, "values": {}})
        for k, v in labels.items():
            if k in ("le", "quantile"):
                continue
            f["labels"].add(k)
            if k in ENUM_LABELS:
                f["values"].setdefault(k, set()).add(v)
        if name.endswith("_bucket") and "le" in labels:
            series = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            f["buckets"].setdefault(series, []).append(float(labels["le"]))
    # families declared by TYPE but with no sample yet still count as exposed
    for fam, t in e.types.items():
        if in_scope(fam) and fam not in fams and not any(e.family_of(n) == fam for n, _, _ in e.samples):
            fams[fam] = {"type": t, "labels": set(), "buckets": {}, "values": {}}
    for f in fams.values():
        bounds = {tuple(b) for b in f["buckets"].values()}
        f["bounds"] = bounds
    return fams


def compare(live, twin, prefix, also):
    def in_scope(fam):
        return fam.startswith(prefix) or fam in also
    L, T = summarize(live, in_scope), summarize(twin, in_scope)
    fails, notes = [], []
    for fam in sorted(set(L) - set(T)):
        fails.append(f"{fam}: exposed by vLLM, missing in the twin")
    for fam in sorted(set(T) - set(L)):
        fails.append(f"{fam}: exposed by the twin, not by vLLM 0.32")
    for fam in sorted(set(L) & set(T)):
        l, t = L[fam], T[fam]
        if l["type"] != t["type"]:
            fails.append(f"{fam}: type {t['type']} in the twin, {l['type']} in vLLM")
        if l["labels"] != t["labels"]:
            fails.append(f"{fam}: label names {sorted(t['labels'])} in the twin, {sorted(l['labels'])} in vLLM")
        if l["type"] == "histogram":
            if len(l["bounds"]) > 1 or len(t["bounds"]) > 1:
                fails.append(f"{fam}: series of one family carry different bucket bounds")
            if l["bounds"] != t["bounds"]:
                fails.append(f"{fam}: buckets {sorted(t['bounds'])} in the twin, {sorted(l['bounds'])} in vLLM")
        for k in ENUM_LABELS:
            lv, tv = l["values"].get(k, set()), t["values"].get(k, set())
            if lv != tv:
                fails.append(f"{fam}: {k} values {sorted(tv)} in the twin, {sorted(lv)} in vLLM")
        if live.helps.get(fam) != twin.helps.get(fam):
            notes.append(f"{fam}: HELP differs")
    return sorted(set(L) & set(T)), fails, notes


def self_test(live_path):
    """The comparison must catch each kind of difference: mutate a copy of the live exposition
    one way at a time and expect exactly that failure."""
    text = open(live_path, encoding="utf-8").read()
    base = promtext.parse(text)
    scope = ("vllm:", {"http_requests_total"})
    _, fails, _ = compare(base, base, *scope)
    assert not fails, fails
    hist = next(f for f, t in base.types.items() if f.startswith("vllm:") and t == "histogram")
    gauge = next(f for f, t in base.types.items() if f.startswith("vllm:") and t == "gauge"
                 and any(n == f for n, _, _ in base.samples))
    le = next(l["le"] for n, l, _ in base.samples if n == hist + "_bucket" and l["le"] != "+Inf")
    cases = {
        "bucket": ("\n".join(l.replace(f'le="{le}"', f'le="{float(le) * 3}"')
                              if l.startswith(hist + "_bucket") else l for l in text.splitlines()),
                   f"{hist}: buckets"),
        "type": (text.replace(f"# TYPE {gauge} gauge", f"# TYPE {gauge} counter"), "type counter"),
        "label": (text.replace(f"{gauge}{{", f'{gauge}{{extra="1",'), "label names"),
        "missing": ("\n".join(l for l in text.splitlines()
                               if not l.startswith(gauge + "{") and not l.startswith(gauge + " ")
                               and not l.endswith(" " + gauge + " gauge") and f" {gauge} " not in l),
                    "missing in the twin"),
    }
    for what, (mutated, expect) in cases.items():
        _, fails, _ = compare(base, promtext.parse(mutated), *scope)
        assert any(expect in f for f in fails), f"self-test {what}: expected a failure with {expect!r}, got {fails}"
    print(f"compare_metrics self-test: {len(cases)} mutations of {live_path} each detected")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("live")
    ap.add_argument("twin", nargs="?")
    ap.add_argument("--self-test", action="store_true",
                    help="check that mutations of LIVE are detected (no TWIN needed)")
    ap.add_argument("--prefix", default="vllm:")
    ap.add_argument("--also", nargs="*", default=["http_requests_total"])
    a = ap.parse_args()
    if a.self_test:
        return self_test(a.live)
    if not a.twin:
        ap.error("TWIN is required")
    both, fails, notes = compare(promtext.load(a.live), promtext.load(a.twin), a.prefix, set(a.also))
    for n in notes:
        print("note:", n)
    for f in fails:
        print("FAIL:", f)
    print(f"twin conformance: {len(both)} families compared, {len(fails)} failures, {len(notes)} notes")
    if not both:
        print("FAIL: no family in scope on both sides")
        return 1
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

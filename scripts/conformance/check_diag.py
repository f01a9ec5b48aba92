#!/usr/bin/env python3
"""Checks on `headroom diagnose --format json` output taken against a real vLLM.

    check_diag.py DIAG.json counts --requests N --output-tokens M [--prompt-tokens P]
        The window held exactly one known burst (N requests, each P prompt tokens and M generated
        tokens, all ending `length`) that started after the first scrape and ended before the last:
        requests_finished = finished_length = N, generation_tokens = N × M, prompt_tokens = N × P,
        no abort/error/stop, the engine is vLLM, at least 2 scrapes, and the verdict is not refused.
    check_diag.py DIAG.json findings --expect ID ... --forbid ID ...
Exit status 1 with one line per failed check.
"""
import argparse
import json
import sys


def figures(d):
    return {f["name"]: f["value"] for s in d["steps"] for f in s["figures"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("diag")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("counts")
    c.add_argument("--requests", type=int, required=True)
    c.add_argument("--output-tokens", type=int, required=True)
    c.add_argument("--prompt-tokens", type=int)
    f = sub.add_parser("findings")
    f.add_argument("--expect", action="append", default=[])
    f.add_argument("--forbid", action="append", default=[])
    a = ap.parse_args()
    with open(a.diag, encoding="utf-8") as fh:
        d = json.load(fh)
    fig = figures(d)
    ids = [x["id"] for x in d["findings"]]
    fails = []
    if a.cmd == "counts":
        n = a.requests
        want = {"requests_finished": n, "finished_length": n, "finished_stop": 0, "finished_abort": 0,
                "finished_error": 0, "generation_tokens": n * a.output_tokens}
        if a.prompt_tokens is not None:
            want["prompt_tokens"] = n * a.prompt_tokens
        for k, v in want.items():
            if fig.get(k) != v:
                fails.append(f"figure {k} = {fig.get(k)}, expected {v}")
        if d["source"].get("engine") != "vllm":
            fails.append(f"source.engine = {d['source'].get('engine')!r}, expected 'vllm'")
        if d["source"].get("scrapes", 0) < 2:
            fails.append(f"source.scrapes = {d['source'].get('scrapes')}, expected ≥ 2")
        if d.get("refused"):
            fails.append(f"verdict refused: {d['refused']}")
        print(f"  diagnose: {fig.get('requests_finished')} requests, {fig.get('generation_tokens')} generated tokens, "
              f"verdict {d.get('verdict')}, findings {ids}")
    else:
        print(f"  diagnose findings: {ids}")
        for e in a.expect:
            if e not in ids:
                fails.append(f"expected finding {e!r}, got {ids}; figures: "
                             + json.dumps({k: round(v, 4) for k, v in fig.items() if v is not None and any(
                                 s in k for s in ("queue", "kv", "preempt", "running", "waiting", "ttft"))}))
        for x in a.forbid:
            if x in ids:
                fails.append(f"finding {x!r} must not fire here, got {ids}")
    for x in fails:
        print("FAIL:", x)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

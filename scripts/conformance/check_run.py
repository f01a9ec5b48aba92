#!/usr/bin/env python3
"""Checks on a `headroom sweep` run directory made against a real vLLM, for the conformance suite.

    check_run.py RUN_DIR reconcile --output-tokens N [--prompt-tokens P]
        Every level of every phase: the run's own reconciliation rows (requests_total,
        requests_stop/length/abort, output_tokens) all agree; and, independently of Headroom,
        from the level's first and last saved /metrics scrapes (parsed by promtext.py):
          Δ vllm:request_success_total{finished_reason="length"} = the client's requests_length
          Δ stop = Δ abort = Δ error = 0 (ignore_eos: every request ends at max_tokens)
          Δ vllm:generation_tokens_total = Δ vllm:request_params_max_tokens_sum
                                         (ignore_eos: every request produced exactly its max_tokens)
          client output_tokens row       = Δ vllm:generation_tokens_total
          Δ vllm:prompt_tokens_total     = P × Δlength   (with --prompt-tokens: exact-length prompts)
        and inside the measurement window every outcome is `length` and the realised output is
        exactly N × requests. (Outside the window the sweep's steady start gives the first
        `concurrency` warm-up requests a random share of max_tokens, so only the server's own
        max_tokens sum is the truth there.)
    check_run.py RUN_DIR findings --expect ID [--expect ID] [--forbid ID]... [--rows-agree]
        The engine's findings of the last level include every --expect id and no --forbid id;
        with --rows-agree, every client/server reconciliation row of that level agrees too (the
        sweep's drain may have cancelled streams: vLLM 0.32 counts a client-cancelled request in
        no finished_reason, so requests_total must allow for it).
    check_run.py RUN_DIR sizes --within 0.02 [--verdict PASS|FAIL] [--server-mean CLASS=TOKENS]...
        A sweep run WITHOUT --tokenizer: every level's realised prompt tokens (the server's usage)
        are within --within of the workload's request, every level's verdict is --verdict (a
        decided verdict, not INCONCLUSIVE), manifest.json records the calibration; and,
        independently of Headroom's counting, for each --server-mean the class's own phase has
        Δ vllm:prompt_tokens_total / Δ requests finished = TOKENS exactly (fixed-size prompts).
      [--llamacpp-prompt CLASS=TOKENS[~REL]]...
        The same independent check for llama.cpp's llama-server, which has neither a request
        counter nor a prompt-token counter that includes its prompt cache: for the class's phase,
        Δ(llamacpp:prompt_tokens_total + llamacpp:prompt_tokens_cached_total) between the level's
        first and last saved scrapes = TOKENS × every request of the level that ended
        (level_outcomes: warm-up, window and drain), all of which must be `length` (ignore_eos);
        exactly, or with ~REL within that relative tolerance (e.g. chatty=96~0.02).
Exit status 1 with one line per failed check.
"""
import argparse
import json
import os
import sys

import promtext


def levels(run):
    with open(os.path.join(run, "results.json"), encoding="utf-8") as f:
        r = json.load(f)
    state = (r.get("status") or {}).get("state")
    if state != "complete":
        yield None, None, f"results.json: status.state is {state!r}, expected 'complete'"
    for ph in r["phases"]:
        for i, lv in enumerate(ph["levels"]):
            yield f"{ph['name']}@{lv['load']:g}", lv, None


def reconcile(run, out_tokens, prompt_tokens):
    fails, checked = [], 0
    for name, lv, err in levels(run):
        if err:
            fails.append(err)
            continue
        rows = {r["what"]: r for r in lv["server"]["reconciliation"]}
        for need in ("requests_length", "requests_stop", "requests_abort", "output_tokens"):
            if need not in rows:
                fails.append(f"{name}: no reconciliation row {need!r} (rows: {sorted(rows)})")
        for what, r in rows.items():
            if not r["agrees"]:
                fails.append(f"{name}: {what} client {r['client']} vs server {r['server']} does not agree ({r['note']})")
        bad = {k: v for k, v in lv["outcomes"].items() if k != "length"}
        if bad or not lv["outcomes"].get("length"):
            fails.append(f"{name}: window outcomes {lv['outcomes']}, expected only `length`")
        scrapes = lv["server"]["scrapes"]
        if len(scrapes) < 2:
            fails.append(f"{name}: {len(scrapes)} scrapes saved, need at least 2")
            continue
        a = promtext.load(os.path.join(run, scrapes[0]))
        b = promtext.load(os.path.join(run, scrapes[-1]))
        d = lambda n, **l: b.value(n, **l) - a.value(n, **l)
        length = d("vllm:request_success_total", finished_reason="length")
        for reason in ("stop", "abort", "error"):
            if d("vllm:request_success_total", finished_reason=reason) != 0:
                fails.append(f"{name}: Δ request_success_total{{finished_reason={reason}}} = "
                             f"{d('vllm:request_success_total', finished_reason=reason)}, expected 0")
        if "requests_length" in rows and rows["requests_length"]["client"] != length:
            fails.append(f"{name}: client requests_length {rows['requests_length']['client']} != Δ server length {length} (own parse of {scrapes[0]} → {scrapes[-1]})")
        gen = d("vllm:generation_tokens_total")
        cap = d("vllm:request_params_max_tokens_sum")
        if gen != cap:
            fails.append(f"{name}: Δ generation_tokens_total {gen} != Δ request_params_max_tokens_sum {cap}")
        if "output_tokens" in rows and rows["output_tokens"]["client"] != gen:
            fails.append(f"{name}: client output_tokens {rows['output_tokens']['client']} != Δ generation_tokens_total {gen}")
        n_win = lv["outcomes"].get("length", 0)
        tok = lv["tokens"]
        if tok["output_realised"] != out_tokens * n_win or tok["output_cap_requested"] != out_tokens * n_win:
            fails.append(f"{name}: window output {tok['output_realised']} (cap {tok['output_cap_requested']}) != {out_tokens} × {n_win} requests")
        if prompt_tokens is not None:
            pt = d("vllm:prompt_tokens_total")
            if pt != prompt_tokens * length:
                fails.append(f"{name}: Δ prompt_tokens_total {pt} != {prompt_tokens} × {length}")
        checked += 1
        print(f"  {name}: {int(length)} requests ended `length` ({n_win} in the window), Δgeneration_tokens {int(gen)}, "
              f"client/server rows agree ({', '.join(sorted(rows))})")
    if checked == 0:
        fails.append("no level checked")
    return fails


def findings(run, expect, forbid, rows_agree=False):
    fails = []
    last = None
    for name, lv, err in levels(run):
        if err:
            fails.append(err)
        elif lv is not None:
            last = (name, lv)
    if last is None:
        return fails + ["no level in results.json"]
    name, lv = last
    ids = [f["id"] for f in lv["server"]["findings"]]
    print(f"  {name}: findings {ids}")
    for e in expect:
        if e not in ids:
            fails.append(f"{name}: expected finding {e!r}, got {ids}; figures: "
                         + json.dumps({k: round(v, 4) for k, v in lv["server"]["figures"].items()
                                       if any(s in k for s in ("queue", "kv", "preempt", "running", "waiting", "ttft"))}))
    for f in forbid:
        if f in ids:
            fails.append(f"{name}: finding {f!r} must not fire here, got {ids}")
    if rows_agree:
        for r in lv["server"]["reconciliation"]:
            if not r["agrees"]:
                fails.append(f"{name}: {r['what']} client {r['client']:g} vs server {r['server']:g} does not agree "
                             f"(outcomes {lv['outcomes']}; {r['note']})")
    return fails


def llamacpp_prompt(run, name, lv, tokens):
    """--llamacpp-prompt: the server's own prompt-token counters against TOKENS × requests."""
    sc = lv["server"]["scrapes"] if lv.get("server") else []
    if len(sc) < 2:
        return [f"{name}: {len(sc)} saved scrapes, need the level's first and last"]
    a = promtext.load(os.path.join(run, sc[0]))
    b = promtext.load(os.path.join(run, sc[-1]))
    d = lambda n: b.value(n) - a.value(n)
    processed, cached = d("llamacpp:prompt_tokens_total"), d("llamacpp:prompt_tokens_cached_total")
    ended = lv.get("level_outcomes") or {}
    n = sum(ended.values())
    if set(ended) != {"length"}:
        return [f"{name}: level outcomes {ended}, expected every request `length` (ignore_eos)"]
    tokens, _, rel = tokens.partition("~")
    want, rel = int(tokens) * n, float(rel or 0)
    got = processed + cached
    each = f"{int(processed)} processed + {int(cached)} cached = {int(got)} over {n} requests ({got / max(n, 1):.3f} each)"
    if n <= 0 or abs(got - want) > rel * want:
        return [f"{name}: Δ llamacpp prompt tokens {each}, expected {tokens} each"
                + (f" within {rel:g}" if rel else " exactly")]
    print(f"  {name}: server Δprompt_tokens {each}: " + (f"within {rel:g} of {tokens}" if rel else f"= {tokens} × {n}"))
    return []


def sizes(run, within, verdict, server_means, llamacpp_prompts=()):
    fails, checked = [], 0
    want_llama = dict(m.split("=", 1) for m in llamacpp_prompts)
    with open(os.path.join(run, "manifest.json"), encoding="utf-8") as f:
        cal = json.load(f).get("prompt_calibration")
    if not cal or cal.get("method", {}).get("kind") in (None, "words"):
        fails.append(f"manifest.json: prompt_calibration is {cal!r}, expected a calibration method")
    else:
        print(f"  calibration: {cal['method']}, overhead {cal.get('overhead_tokens')}, checks {cal.get('checks')}")
    want = dict(m.split("=", 1) for m in server_means)
    for name, lv, err in levels(run):
        if err:
            fails.append(err)
            continue
        t = lv["tokens"]
        ratio = t["prompt_realised"] / t["prompt_requested"] if t["prompt_requested"] else float("nan")
        if not abs(ratio - 1) <= within:
            fails.append(f"{name}: prompts realised {t['prompt_realised']} against {t['prompt_requested']} requested ({ratio:.4f})")
        if verdict and lv["verdict"] != verdict:
            fails.append(f"{name}: verdict {lv['verdict']}, expected {verdict}; objectives "
                         + "; ".join(f"{o['id']} {o['verdict']}: {o['reason'][:160]}" for o in lv["objectives"]))
        phase = name.split("@")[0]
        if phase in want:
            sc = lv["server"]["scrapes"]
            a = promtext.load(os.path.join(run, sc[0]))
            b = promtext.load(os.path.join(run, sc[-1]))
            d = lambda n, **l: b.value(n, **l) - a.value(n, **l)
            n = sum(d("vllm:request_success_total", finished_reason=r) for r in ("stop", "length", "abort", "error"))
            pt = d("vllm:prompt_tokens_total")
            if n <= 0 or pt != int(want[phase]) * n:
                fails.append(f"{name}: Δ vllm:prompt_tokens_total {pt} over {n} finished requests, expected {want[phase]} each")
            else:
                print(f"  {name}: server Δprompt_tokens_total {int(pt)} = {want[phase]} × {int(n)} requests")
        if phase in want_llama:
            fails += llamacpp_prompt(run, name, lv, want_llama[phase])
        checked += 1
        print(f"  {name}: {lv['verdict']}, prompts {t['prompt_realised']}/{t['prompt_requested']} = {ratio:.4f}")
    if checked == 0:
        fails.append("no level checked")
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reconcile")
    r.add_argument("--output-tokens", type=int, required=True)
    r.add_argument("--prompt-tokens", type=int)
    f = sub.add_parser("findings")
    f.add_argument("--expect", action="append", default=[])
    f.add_argument("--forbid", action="append", default=[])
    f.add_argument("--rows-agree", action="store_true")
    z = sub.add_parser("sizes")
    z.add_argument("--within", type=float, required=True)
    z.add_argument("--verdict", choices=["PASS", "FAIL"])
    z.add_argument("--server-mean", action="append", default=[])
    z.add_argument("--llamacpp-prompt", action="append", default=[])
    a = ap.parse_args()
    if a.cmd == "reconcile":
        fails = reconcile(a.run, a.output_tokens, a.prompt_tokens)
    elif a.cmd == "sizes":
        fails = sizes(a.run, a.within, a.verdict, a.server_mean, a.llamacpp_prompt)
    else:
        fails = findings(a.run, a.expect, a.forbid, a.rows_agree)
    for x in fails:
        print("FAIL:", x)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

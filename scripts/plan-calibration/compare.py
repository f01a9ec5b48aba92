#!/usr/bin/env python3
"""Planned against measured, level by level: the error of a calibrated plan on a held-out run.

usage: compare.py LABEL PLAN_RUN_DIR MEASURED_RUN_DIR [--within 0.20] [--loads 1,8]

Reads both results.json files (the run-directory format, schema in crates/core/src/run.rs),
pairs levels of the same phase and load, and prints for each the measured figure, the planned one
and the error (planned / measured - 1). Exits 1 when any compared figure is off by more than
--within; figures with fewer than 20 samples on either side are shown but not judged. --loads
keeps only levels at those loads, and only levels both runs have.
"""
import json
import sys

FIGURES = [  # (name, how to read it from a level, unit)
    ("TTFT mean", lambda l: lat(l, "ttft", "mean_s"), "ms"),
    ("TTFT p50", lambda l: lat(l, "ttft", "p50_s"), "ms"),
    ("ITL p50", lambda l: lat(l, "itl", "p50_s"), "ms"),
    ("E2E p50", lambda l: lat(l, "e2e", "p50_s"), "ms"),
    ("output tok/s", lambda l: (l.get("output_tokens_per_s"), 1e9), "tok/s"),
]


def lat(level, signal, field):
    s = level.get("latency", {}).get(signal)
    if not s or s.get("count", 0) == 0:
        return None, 0
    return s[field] * 1e3, s["count"]


def levels(run_dir):
    with open(f"{run_dir}/results.json") as f:
        r = json.load(f)
    return {(p["name"], l["load"]): l for p in r["phases"] for l in p["levels"]}


def main():
    args = sys.argv[1:]
    within = 0.20
    if "--within" in args:
        i = args.index("--within")
        within = float(args[i + 1])
        del args[i : i + 2]
    loads = None
    if "--loads" in args:
        i = args.index("--loads")
        loads = {float(v) for v in args[i + 1].split(",")}
        del args[i : i + 2]
    label, plan_dir, real_dir = args
    plan, real = levels(plan_dir), levels(real_dir)
    if loads is not None:
        real = {k: v for k, v in real.items() if k[1] in loads and k in plan}
    worst, bad = 0.0, []
    print(f"{label}: planned ({plan_dir}) against measured ({real_dir})")
    print(f"  {'phase':<8}{'load':>6}  {'figure':<14}{'measured':>10}{'planned':>10}{'error':>9}")
    for key in sorted(real):
        if key not in plan:
            print(f"  {key[0]:<8}{key[1]:>6g}  not planned")
            bad.append(f"{key}: not planned")
            continue
        for name, read, unit in FIGURES:
            (m, mn), (p, pn) = read(real[key]), read(plan[key])
            if m is None or p is None or m == 0:
                continue
            err = p / m - 1
            judged = min(mn, pn) >= 20
            mark = "" if judged else "  (too few samples to judge)"
            if judged:
                worst = max(worst, abs(err))
                if abs(err) > within:
                    bad.append(f"{key[0]} at {key[1]:g}: {name} {err:+.1%}")
                    mark = f"  > {within:.0%}"
            print(f"  {key[0]:<8}{key[1]:>6g}  {name:<14}{m:>10.2f}{p:>10.2f}{err:>+9.1%}{mark}")
    print(f"  worst judged error {worst:.1%} (limit {within:.0%})")
    if bad:
        print("  outside the limit: " + "; ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()

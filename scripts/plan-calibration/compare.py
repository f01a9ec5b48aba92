#!/usr/bin/env python3
"""Planned against measured, level by level: the error of a calibrated plan on a held-out run.

usage: compare.py LABEL PLAN_RUN_DIR MEASURED_RUN_DIR [--within 0.20] [--loads 1,8]
                  [--drift RUN_A:RUN_B[:LOADS]]...

Reads both results.json files (the run-directory format, schema in crates/core/src/run.rs),
pairs levels of the same phase and load, and prints for each the measured figure, the planned one
and the error (planned / measured - 1). Figures with fewer than 20 samples on either side are
shown but not judged. --loads keeps only levels at those loads, and only levels both runs have.

--drift names two measured runs of the same configuration (a replicate: the same class at the
same load on a restarted server, or later on the same server). Their difference per figure is
the reference's own drift, the largest over the pairs given. A figure is then judged three ways:
  within --within                          pass
  beyond it, but not beyond it + the drift inconclusive: the reference moves that much by itself
  beyond --within + the drift              fail
Exit status: 0 when every judged figure passes, 2 when the worst is inconclusive, 1 on a fail.
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
MIN_SAMPLES = 20


def lat(level, signal, field):
    s = level.get("latency", {}).get(signal)
    if not s or s.get("count", 0) == 0:
        return None, 0
    return s[field] * 1e3, s["count"]


class Usage(Exception):
    """A bad argument or an unreadable run directory: printed as one line, exit 64."""


def levels(run_dir):
    path = f"{run_dir}/results.json"
    try:
        with open(path, "rb") as f:
            r = json.loads(f.read().decode("utf-8"))
        return {(p["name"], float(l["load"])): l for p in r["phases"] for l in p["levels"]}
    except OSError as e:
        raise Usage(f"{path}: {e.strerror or e}")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise Usage(f"{path}: not a results.json ({e})")
    except (KeyError, TypeError, ValueError) as e:
        raise Usage(f"{path}: not a results.json (no phases[].levels[] with name and load: {e!r})")


def pairs(a, b, loads=None):
    """(figure, a's value, b's value) for every judged figure of the levels both runs have."""
    for key in sorted(set(a) & set(b)):
        if loads is not None and key[1] not in loads:
            continue
        for name, read, _ in FIGURES:
            (x, xn), (y, yn) = read(a[key]), read(b[key])
            if x is None or y is None or x == 0 or min(xn, yn) < MIN_SAMPLES:
                continue
            yield key, name, x, y


def drift(specs):
    """The largest relative difference per figure over the replicate pairs in `specs`."""
    out = {}
    for spec in specs:
        parts = spec.split(":")
        loads = {number("--drift", v) for v in parts[2].split(",")} if len(parts) > 2 else None
        if len(parts) < 2:
            raise Usage(f"--drift {spec}: expected RUN_A:RUN_B[:LOADS]")
        try:
            a, b = levels(parts[0]), levels(parts[1])
        except Usage as e:
            print(f"  drift replicate {spec} not read ({e}); judged without it")
            continue
        for _, name, x, y in pairs(a, b, loads):
            out[name] = max(out.get(name, 0.0), abs(y / x - 1))
    return out


def take(args, flag, many=False):
    vals = []
    while flag in args:
        i = args.index(flag)
        if i + 1 >= len(args):
            raise Usage(f"{flag}: expected a value")
        vals.append(args[i + 1])
        del args[i : i + 2]
        if not many:
            break
    return vals if many else (vals[0] if vals else None)


def number(flag, text):
    try:
        v = float(text)
    except ValueError:
        raise Usage(f"{flag} {text}: expected a number")
    if not v >= 0:
        raise Usage(f"{flag} {text}: expected a number of at least 0")
    return v


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if args else 64)
    within = number("--within", take(args, "--within") or "0.20")
    loads = take(args, "--loads")
    loads = None if loads is None else {number("--loads", v) for v in loads.split(",")}
    noise = drift(take(args, "--drift", many=True))
    if len(args) != 3:
        raise Usage(f"expected LABEL PLAN_RUN_DIR MEASURED_RUN_DIR, got {len(args)} argument(s): {args}")
    label, plan_dir, real_dir = args
    plan, real = levels(plan_dir), levels(real_dir)
    if loads is not None:
        real = {k: v for k, v in real.items() if k[1] in loads and k in plan}
    if not real:
        raise Usage(f"no level of {real_dir} to compare" + (f" at --loads {sorted(loads)}" if loads else ""))
    worst, bad, unsure = 0.0, [], []
    print(f"{label}: planned ({plan_dir}) against measured ({real_dir})")
    if noise:
        print("  the reference's own drift (replicates): "
              + ", ".join(f"{n} {v:.1%}" for n, v in noise.items()))
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
            mark = ""
            if min(mn, pn) < MIN_SAMPLES:
                mark = "  (too few samples to judge)"
            else:
                worst = max(worst, abs(err))
                what = f"{key[0]} at {key[1]:g}: {name} {err:+.1%}"
                if abs(err) > within + noise.get(name, 0.0):
                    bad.append(what)
                    mark = f"  > {within:.0%}" + (f" + drift {noise[name]:.0%}" if name in noise else "")
                elif abs(err) > within:
                    unsure.append(what)
                    mark = f"  > {within:.0%}, within the reference's drift ({noise[name]:.0%})"
            print(f"  {key[0]:<8}{key[1]:>6g}  {name:<14}{m:>10.2f}{p:>10.2f}{err:>+9.1%}{mark}")
    verdict = "FAIL" if bad else "INCONCLUSIVE" if unsure else "PASS"
    print(f"  worst judged error {worst:.1%} (limit {within:.0%}): {verdict}")
    if bad:
        print("  outside the limit and the drift: " + "; ".join(bad))
    if unsure:
        print("  outside the limit, within the drift: " + "; ".join(unsure))
    sys.exit(1 if bad else 2 if unsure else 0)


if __name__ == "__main__":
    try:
        main()
    except Usage as e:
        print(f"compare.py: {e}", file=sys.stderr)
        sys.exit(64)

#!/usr/bin/env python3
"""Share of engine steps that prefilled one prompt, or several, per level of a run directory.

Reads each level's first measured and last engine scrape (`scrapes/L###-####-engine@*.prom`) and
differences `vllm:iteration_tokens_total` (prompt + generated tokens per step). With fixed prompt
lengths, the bucket a step falls in tells how many prompts it prefilled: with 128-token prompts
and 8 users, one prompt lands in (128, 256], two or three in (256, 512], four or more above.
Works the same on a real vLLM's sweep and on a plan of the twin, so the two can be held side by
side (crates/sim/CALIBRATION.md, "closed-loop lock-step").

Usage: prefill_shares.py [--per-scrape] RUN_DIR [RUN_DIR ...]

--per-scrape prints each interval between consecutive saved scrapes of the measured window
instead (with `sweep --scrape-interval 30s`, one line per 30 s): how the grouping of prefills
drifts after a level starts.
"""
import glob
import re
import sys


def buckets(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("vllm:iteration_tokens_total_bucket"):
                le = re.search(r'le="([^"]+)"', line).group(1)
                out[le] = float(line.rsplit(" ", 1)[1])
    return out


def shares(a, z):
    """(steps, "<= le: share" parts) of the steps between scrapes a and z."""
    total = z["+Inf"] - a["+Inf"]
    prev, parts = 0.0, []
    for le in a:
        c = z[le] - a[le]
        if total > 0 and c - prev > 0:
            parts.append(f"<= {le}: {(c - prev) / total * 100:.1f} %")
        prev = c
    return total, parts


def main():
    args = sys.argv[1:]
    per_scrape = "--per-scrape" in args
    for d in [a for a in args if a != "--per-scrape"]:
        levels = sorted({p.split("/")[-1][:4] for p in glob.glob(f"{d}/scrapes/L*-engine@*.prom")})
        for lv in levels:
            files = sorted(glob.glob(f"{d}/scrapes/{lv}-*-engine@*.prom"))
            # The first scrape is taken before the warm-up; the second when the window opens.
            window = files[1:] if len(files) > 2 else files
            pairs = zip(window, window[1:]) if per_scrape else [(window[0], window[-1])]
            for fa, fz in pairs:
                total, parts = shares(buckets(fa), buckets(fz))
                if total <= 0:
                    continue
                at = f" to {fz.split('@')[-1][:-5]}" if per_scrape else ""
                print(f"{d} {lv}{at}: {int(total)} steps; " + ", ".join(parts))


if __name__ == "__main__":
    main()

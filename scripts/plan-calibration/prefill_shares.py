#!/usr/bin/env python3
"""Share of engine steps that prefilled one prompt, or several, per level of a run directory.

Reads each level's first measured and last engine scrape (`scrapes/L###-####-engine@*.prom`) and
differences `vllm:iteration_tokens_total` (prompt + generated tokens per step). With fixed prompt
lengths, the bucket a step falls in tells how many prompts it prefilled: with 128-token prompts
and 8 users, one prompt lands in (128, 256], two or three in (256, 512], four or more above.
Works the same on a real vLLM's sweep and on a plan of the twin, so the two can be held side by
side (crates/sim/CALIBRATION.md, "closed-loop lock-step").

Usage: prefill_shares.py RUN_DIR [RUN_DIR ...]
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


def main():
    for d in sys.argv[1:]:
        levels = sorted({p.split("/")[-1][:4] for p in glob.glob(f"{d}/scrapes/L*-engine@*.prom")})
        for lv in levels:
            files = sorted(glob.glob(f"{d}/scrapes/{lv}-*-engine@*.prom"))
            # The first scrape is taken before the warm-up; the second when the window opens.
            a = buckets(files[1] if len(files) > 2 else files[0])
            z = buckets(files[-1])
            total = z["+Inf"] - a["+Inf"]
            if total <= 0:
                continue
            prev, parts = 0.0, []
            for le in a:
                c = z[le] - a[le]
                if c - prev > 0:
                    parts.append(f"<= {le}: {(c - prev) / total * 100:.1f} %")
                prev = c
            print(f"{d} {lv}: {int(total)} steps; " + ", ".join(parts))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Did client cancellations reach the engine? Compares two vLLM /metrics scrapes taken before and
after a burst of N streams that the client closed after a few chunks.

    check_cancel.py BEFORE.prom AFTER.prom --cancelled N --chunks C --max-tokens M

vLLM 0.32 does not count a request aborted by a client disconnect in
vllm:request_success_total (not even as finished_reason="abort") nor in the E2E histogram; it
does observe its TTFT. So the evidence that each cancellation reached the engine is:
  * Δ vllm:time_to_first_token_seconds_count = N   (every request reached the engine and started);
  * Δ vllm:request_success_total (all reasons other than abort) = 0 (none ran to max_tokens);
  * vllm:num_requests_running = 0 and vllm:num_requests_waiting = 0 after (nothing left running);
  * Δ vllm:generation_tokens_total ≤ C + 8·N, far below N·M: the engine stopped generating within a
    few steps of each disconnect instead of running to max_tokens.
A rise of request_success_total{finished_reason="abort"} by N is accepted as well (later vLLMs).

    check_cancel.py BEFORE.prom AFTER.prom ... --like LIVE_BEFORE.prom LIVE_AFTER.prom
additionally requires the engine twin (BEFORE/AFTER) to account for the burst exactly as the live
vLLM did for the same burst (LIVE_*): the same deltas of request_success_total per
finished_reason, of the E2E, TTFT and request_generation_tokens histogram counts.
"""
import argparse
import sys

import promtext


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--cancelled", type=int, required=True)
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--like", nargs=2, metavar=("LIVE_BEFORE", "LIVE_AFTER"))
    a = ap.parse_args()
    b, e = promtext.load(a.before), promtext.load(a.after)
    d = lambda n, **l: e.value(n, **l) - b.value(n, **l)
    n, fails = a.cancelled, []
    if n <= 0:
        fails.append("no stream was cancelled by the client")
    ttft = d("vllm:time_to_first_token_seconds_count")
    if ttft != n:
        fails.append(f"Δ time_to_first_token_seconds_count = {ttft}, expected {n} (each cancelled request started in the engine)")
    finished = d("vllm:request_success_total") - d("vllm:request_success_total", finished_reason="abort")
    if finished != 0:
        fails.append(f"Δ request_success_total (not abort) = {finished}, expected 0: some request ran to its end")
    for g in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        if e.value(g) != 0:
            fails.append(f"{g} = {e.value(g)} after the burst, expected 0")
    gen = d("vllm:generation_tokens_total")
    bound = a.chunks + 8 * n
    if gen > bound:
        fails.append(f"Δ generation_tokens_total = {gen} > {bound} (chunks received {a.chunks} + 8 per stream): "
                     f"the engine kept generating after the disconnect (max_tokens {a.max_tokens} each)")
    aborts = d("vllm:request_success_total", finished_reason="abort")
    print(f"  cancel: {n} streams cancelled after {a.chunks} chunks in all; engine: Δttft_count {ttft:g}, "
          f"Δfinished {finished:g}, Δabort {aborts:g}, Δgeneration_tokens {gen:g} (of {n * a.max_tokens} requested)")
    if a.like:
        lb, la = promtext.load(a.like[0]), promtext.load(a.like[1])
        dl = lambda n, **l: la.value(n, **l) - lb.value(n, **l)
        series = [("vllm:request_success_total", {"finished_reason": r})
                  for r in ("stop", "length", "abort", "error", "repetition")]
        series += [(f"vllm:{h}_count", {}) for h in
                   ("e2e_request_latency_seconds", "time_to_first_token_seconds", "request_generation_tokens")]
        for name, labels in series:
            if d(name, **labels) != dl(name, **labels):
                lbl = ",".join(f'{k}="{v}"' for k, v in labels.items())
                fails.append(f"Δ {name}{{{lbl}}} = {d(name, **labels):g} here, {dl(name, **labels):g} in the live vLLM for the same burst")
    for x in fails:
        print("FAIL:", x)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

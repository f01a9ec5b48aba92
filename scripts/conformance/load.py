#!/usr/bin/env python3
"""Bounded streaming load against an OpenAI-compatible server on loopback, for the conformance suite.

An independent client (httpx, not Headroom's) so the suite can put load on a server while Headroom
reads it (`headroom diagnose`), and cancel streams on purpose (the gateway check).

    load.py --url http://127.0.0.1:8011 [--model tiny] [--concurrency 8] [--requests 16]
            [--duration S] [--prompt-tokens 64] [--output-tokens 32] [--endpoint completions|chat]
            [--cancel-after-chunks N] [--json-out FILE]

Every request streams with `ignore_eos: true` and `max_tokens = --output-tokens`, so a request that
is not cancelled produces exactly that many tokens; completions prompts are token-id lists of
exactly `--prompt-tokens`. With `--duration`, requests keep starting until S seconds have passed
(at most `--requests` in total). With `--cancel-after-chunks N`, the client closes each stream after
N content chunks (a client cancellation). Prints a JSON summary: requests, finish reasons, content
chunks, usage totals, cancelled streams, errors.
"""
import argparse
import asyncio
import json
import random
import sys
import time
from urllib.parse import urlparse

import httpx


async def one(client, a, i, out):
    rng = random.Random(i)
    if a.endpoint == "completions":
        path = "/v1/completions"
        body = {"prompt": [rng.randrange(3, 8000) for _ in range(a.prompt_tokens)]}
    else:
        path = "/v1/chat/completions"
        words = " ".join(f"w{rng.randrange(1000)}" for _ in range(max(1, a.prompt_tokens // 2)))
        body = {"messages": [{"role": "user", "content": words}]}
    body.update({"model": a.model, "max_tokens": a.output_tokens, "ignore_eos": True,
                 "temperature": 1.0, "stream": True, "stream_options": {"include_usage": True}})
    chunks, finish, usage, cancelled = 0, None, None, False
    try:
        async with client.stream("POST", a.url + path, json=body) as r:
            if r.status_code != 200:
                out["errors"].append(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
                return
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                ev = json.loads(data)
                if ev.get("usage") and not ev.get("choices"):
                    usage = ev["usage"]
                    continue
                for ch in ev.get("choices", []):
                    txt = ch.get("text") if a.endpoint == "completions" else (ch.get("delta") or {}).get("content")
                    if ch.get("finish_reason"):
                        finish = ch["finish_reason"]
                    if txt:
                        chunks += 1
                if a.cancel_after_chunks and chunks >= a.cancel_after_chunks:
                    cancelled = True
                    break  # leaving the context manager closes the connection mid-stream
    except httpx.HTTPError as e:
        out["errors"].append(f"{type(e).__name__}: {e}")
        return
    out["requests"] += 1
    out["content_chunks"] += chunks
    if cancelled:
        out["cancelled"] += 1
        return
    out["finish_reasons"][finish or "none"] = out["finish_reasons"].get(finish or "none", 0) + 1
    if usage:
        out["prompt_tokens"] += usage["prompt_tokens"]
        out["completion_tokens"] += usage["completion_tokens"]
    else:
        out["usage_missing"] += 1


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8011")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--duration", type=float)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--endpoint", default="completions", choices=["completions", "chat"])
    ap.add_argument("--cancel-after-chunks", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300.0, help="bound on the whole run, seconds")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    if urlparse(a.url).hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("load.py: loopback only (got %s)" % a.url)

    out = {"requests": 0, "cancelled": 0, "finish_reasons": {}, "content_chunks": 0,
           "prompt_tokens": 0, "completion_tokens": 0, "usage_missing": 0, "errors": []}
    t0 = time.monotonic()
    next_i = 0

    async def worker(client):
        nonlocal next_i
        while next_i < a.requests and (a.duration is None or time.monotonic() - t0 < a.duration):
            i = next_i
            next_i += 1
            await one(client, a, i, out)

    limits = httpx.Limits(max_connections=a.concurrency, max_keepalive_connections=a.concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=limits) as client:
        await asyncio.wait_for(asyncio.gather(*(worker(client) for _ in range(a.concurrency))), a.timeout)
    out["wall_s"] = round(time.monotonic() - t0, 3)
    text = json.dumps(out, indent=1)
    print(text)
    if a.json_out:
        with open(a.json_out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    asyncio.run(main())

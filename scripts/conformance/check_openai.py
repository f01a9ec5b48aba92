#!/usr/bin/env python3
"""The official OpenAI Python client against an OpenAI-compatible server: does it work as a user expects?

    check_openai.py --url http://127.0.0.1:8011 [--model tiny] [--max-model-len 2048]

Runs what a user of the `openai` package (the version vLLM itself depends on) does, and checks the
answers against what the request asked for, not against another server:

  models      `client.models.list()` names the served model, with vLLM's `max_model_len`
  chat-stream streamed chat with `stream_options.include_usage`: the content chunks carry text,
              the last chunk has empty `choices` and `usage`, and with `ignore_eos` the server
              generated exactly `max_tokens` (usage.completion_tokens == max_tokens, and
              finish_reason == "length")
  chat        non-streamed chat: one choice with an assistant message and usage
  completion  non-streamed completion from token ids: usage.prompt_tokens == len(ids)
  comp-stream streamed completion: the concatenated text equals what the chunks carried, and
              the chunk count is at most max_tokens (a server may merge tokens into one chunk)
  unknown     an unknown model raises `openai.NotFoundError` (HTTP 404) with a message
  too-long    a prompt longer than max_model_len raises `openai.BadRequestError` (HTTP 400)

Prints one line per check and exits 1 if any failed. Loopback only; every call has a timeout.
"""
import argparse
import sys

import openai

MAX_TOKENS = 12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--max-model-len", type=int, default=2048)
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.url.rstrip("/") + "/v1", api_key="unused", timeout=60,
                           max_retries=0)
    failed = []

    def check(name, ok, detail):
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
        if not ok:
            failed.append(name)

    def run(name, fn):
        try:
            fn()
        except Exception as e:  # a client exception is a failure of that check, not of the script
            check(name, False, f"{type(e).__name__}: {e}")

    def models():
        ms = client.models.list().data
        ids = [m.id for m in ms]
        mml = [getattr(m, "max_model_len", None) for m in ms if m.id == a.model]
        check("models", a.model in ids and mml == [a.max_model_len],
              f"ids {ids}, max_model_len {mml}")

    def chat_stream():
        stream = client.chat.completions.create(
            model=a.model, messages=[{"role": "user", "content": "Say something."}],
            max_tokens=MAX_TOKENS, stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True})
        text, content_chunks, finish, usage, last_choices = "", 0, None, None, None
        for ch in stream:
            last_choices = ch.choices
            for c in ch.choices:
                if c.delta and c.delta.content:
                    text += c.delta.content
                    content_chunks += 1
                if c.finish_reason:
                    finish = c.finish_reason
            if ch.usage is not None:
                usage = ch.usage
        ok = (usage is not None and usage.completion_tokens == MAX_TOKENS and finish == "length"
              and content_chunks >= 1 and len(text) > 0 and last_choices == [])
        check("chat-stream", ok,
              f"{content_chunks} content chunks, {len(text)} chars, finish {finish}, "
              f"usage {usage and (usage.prompt_tokens, usage.completion_tokens)}, "
              f"last chunk choices {last_choices}")

    def chat():
        r = client.chat.completions.create(
            model=a.model, messages=[{"role": "user", "content": "Say something."}],
            max_tokens=MAX_TOKENS, extra_body={"ignore_eos": True})
        m = r.choices[0].message
        ok = (len(r.choices) == 1 and m.role == "assistant" and bool(m.content)
              and r.usage.completion_tokens == MAX_TOKENS and r.choices[0].finish_reason == "length")
        check("chat", ok, f"role {m.role}, {len(m.content or '')} chars, usage "
              f"{(r.usage.prompt_tokens, r.usage.completion_tokens)}, finish {r.choices[0].finish_reason}")

    def completion():
        ids = list(range(100, 140))
        r = client.completions.create(model=a.model, prompt=ids, max_tokens=MAX_TOKENS,
                                      extra_body={"ignore_eos": True})
        ok = (r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == MAX_TOKENS
              and bool(r.choices[0].text))
        check("completion", ok, f"usage {(r.usage.prompt_tokens, r.usage.completion_tokens)} "
              f"for {len(ids)} prompt ids, {len(r.choices[0].text)} chars")

    def comp_stream():
        stream = client.completions.create(model=a.model, prompt="def f(x):", max_tokens=MAX_TOKENS,
                                           stream=True, stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True})
        pieces, usage = [], None
        for ch in stream:
            for c in ch.choices:
                if c.text:
                    pieces.append(c.text)
            if ch.usage is not None:
                usage = ch.usage
        ok = (usage is not None and usage.completion_tokens == MAX_TOKENS
              and 1 <= len(pieces) <= MAX_TOKENS)
        check("comp-stream", ok, f"{len(pieces)} text chunks, usage "
              f"{usage and (usage.prompt_tokens, usage.completion_tokens)}")

    def unknown():
        try:
            client.completions.create(model="no-such-model", prompt="x", max_tokens=2)
        except openai.NotFoundError as e:
            check("unknown", e.status_code == 404 and bool(str(e)), f"NotFoundError {e.status_code}")
            return
        check("unknown", False, "no error for an unknown model")

    def too_long():
        ids = [100] * (a.max_model_len + 10)
        try:
            client.completions.create(model=a.model, prompt=ids, max_tokens=2)
        except openai.BadRequestError as e:
            check("too-long", e.status_code == 400, f"BadRequestError {e.status_code}")
            return
        check("too-long", False, f"no error for a {len(ids)}-token prompt")

    for name, fn in [("models", models), ("chat-stream", chat_stream), ("chat", chat),
                     ("completion", completion), ("comp-stream", comp_stream),
                     ("unknown", unknown), ("too-long", too_long)]:
        run(name, fn)
    print(f"openai {openai.__version__} against {a.url}: {7 - len(failed)}/7 passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

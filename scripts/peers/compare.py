#!/usr/bin/env python3
"""Side-by-side of load generators against the same engine twin: Headroom (`headroom sweep`),
vLLM's `bench serve`, GuideLLM, AIPerf and inference-perf. Driven by scripts/peers/compare.sh.

For every tool and every fixed concurrency level, a FRESH engine twin (`headroom sim` with the
flat 20 ms-step GPU of flat-gpu.yaml, so its counters start at zero) serves the same workload:
completions, 64-token prompts, 64 generated tokens, ignore_eos, streaming. The tool runs as a
child process; then:

  truth      the twin's own /metrics after the run: TTFT and ITL means are exact
             (vllm:time_to_first_token_seconds and vllm:inter_token_latency_seconds _sum/_count),
             p99s are interpolated inside the histogram buckets (bucket-limited precision, so p99
             errors smaller than the bucket width are reported as such)
  measured   the tool's own reported TTFT/ITL mean and p99 (parsed from its result file)
  bias       measured mean − true mean;  p99 err  measured p99 − true p99
  CPU        user + system CPU seconds of the tool's process tree (RUSAGE_CHILDREN, so start-up
             imports are included), per 1,000 tokens the twin streamed (Δ generation_tokens_total);
             the marginal figure (Δcpu / Δtokens between the lowest and highest level) removes
             start-up cost
  distorted  |TTFT bias| > max(5 ms, 10 % of truth) or |ITL bias| > 10 % of truth: the tool no
             longer measures the server faithfully at that level

Writes RESULTS.md (the table) and results.json into --out. Loopback only; every child is bounded by
a timeout and every twin is stopped by PID.
"""
import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conformance"))
import promtext  # noqa: E402

PROMPT, OUTPUT = 64, 64


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Twin:
    def __init__(self, headroom, config, out):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(out, f"twin-{self.port}.log"), "w")
        self.p = subprocess.Popen([headroom, "sim", "--config", config, "--port", str(self.port),
                                   "--dcgm-port", str(free_port())], stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                get(self.url + "/health", 1)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("engine twin did not start")

    def metrics(self):
        return promtext.parse(get(self.url + "/metrics"))

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.log.close()


def hist_quantile(e, fam, q):
    """PromQL-style histogram_quantile over the (single) series of `fam` in exposition e."""
    b = sorted((float(l["le"]), v) for n, l, v in e.samples if n == fam + "_bucket")
    if not b or b[-1][1] == 0:
        return None, None
    rank = q * b[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in b:
        if c >= rank:
            if le == float("inf"):
                return prev_le, (prev_le, le)
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-12), (prev_le, le)
        prev_le, prev_c = le, c
    return None, None


def truth(e):
    t = {"tokens": e.value("vllm:generation_tokens_total")}
    for k, fam in (("ttft", "vllm:time_to_first_token_seconds"), ("itl", "vllm:inter_token_latency_seconds")):
        n = e.value(fam + "_count")
        t[k + "_mean_ms"] = 1e3 * e.value(fam + "_sum") / n if n else None
        p99, br = hist_quantile(e, fam, 0.99)
        t[k + "_p99_ms"] = p99 * 1e3 if p99 is not None else None
        t[k + "_p99_bucket_ms"] = [x * 1e3 for x in br] if br else None
    return t


def run_child(cmd, timeout, log, env=None, cwd=None):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout"
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rc, cpu, time.monotonic() - t0


# ---- tools: each returns (command, parse(result_dir) -> {ttft_mean_ms, ttft_p99_ms, itl_mean_ms, itl_p99_ms})

def tool_headroom(a, url, c, n, d):
    wl = os.path.join(d, "workload.yaml")
    with open(wl, "w") as f:
        f.write(f"model: tiny\nseed: 1\nload: {{mode: concurrency, levels: [{c}]}}\nclasses:\n"
                f"  - name: fixed\n    endpoint: completions\n    prompt_tokens: {{fixed: {PROMPT}}}\n"
                f"    max_tokens: {{fixed: {OUTPUT}}}\n    ignore_eos: true\n")
    cmd = [a.headroom, "sweep", "--target", url, "--workload", wl, "--levels", str(c), "--warmup", "2",
           "--measure", str(a.duration), "--out", os.path.join(d, "run")]

    def parse():
        r = json.load(open(os.path.join(d, "run", "results.json")))
        lat = r["phases"][0]["levels"][0]["latency"]
        return {"ttft_mean_ms": lat["ttft"]["mean_s"] * 1e3, "ttft_p99_ms": lat["ttft"]["p99_s"] * 1e3,
                "itl_mean_ms": lat["itl"]["mean_s"] * 1e3, "itl_p99_ms": lat["itl"]["p99_s"] * 1e3}
    return cmd, parse, None


def tool_vllm(a, url, c, n, d):
    code = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
            "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
            "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
    cmd = [a.vllm_python, "-c", code, "--backend", "vllm", "--base-url", url, "--model", "tiny",
           "--tokenizer", a.tokenizer, "--dataset-name", "random", "--random-input-len", str(PROMPT),
           "--random-output-len", str(OUTPUT), "--ignore-eos", "--num-prompts", str(n),
           "--max-concurrency", str(c), "--request-rate", "inf", "--percentile-metrics", "ttft,itl",
           "--metric-percentiles", "50,99", "--save-result", "--result-dir", d, "--result-filename",
           "vllm.json", "--disable-tqdm"]

    def parse():
        r = json.load(open(os.path.join(d, "vllm.json")))
        return {"ttft_mean_ms": r["mean_ttft_ms"], "ttft_p99_ms": r["p99_ttft_ms"],
                "itl_mean_ms": r["mean_itl_ms"], "itl_p99_ms": r["p99_itl_ms"]}
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return cmd, parse, env


def tool_aiperf(a, url, c, n, d):
    cmd = [os.path.join(a.peers_home, "aiperf", "bin", "aiperf"), "profile", "--model", "tiny", "--url", url,
           "--endpoint-type", "completions", "--streaming", "--concurrency", str(c), "--request-count", str(n),
           "--isl", str(PROMPT), "--isl-stddev", "0", "--osl", str(OUTPUT), "--osl-stddev", "0",
           "--tokenizer", "headroom/tiny", "--extra-inputs", "ignore_eos:true", "--artifact-dir", d,
           "--no-server-metrics", "--no-gpu-telemetry"]

    def parse():
        path = None
        for root, _, files in os.walk(d):
            for f in files:
                if f == "profile_export_aiperf.json":
                    path = os.path.join(root, f)
        r = json.load(open(path))
        m = r.get("records", r)

        def pick(key, stat):
            x = m[key]
            return x[stat] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[x.get("unit", "ms")]
        return {"ttft_mean_ms": pick("time_to_first_token", "avg"), "ttft_p99_ms": pick("time_to_first_token", "p99"),
                "itl_mean_ms": pick("inter_token_latency", "avg"), "itl_p99_ms": pick("inter_token_latency", "p99")}
    # AIPerf 0.13 in offline mode resolves a tokenizer through the Hugging Face cache only (a plain
    # folder path fails with HFValidationError), so the local tokenizer is laid out as a cached repo.
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_CACHE=hf_cache(a))
    return cmd, parse, env


def hf_cache(a):
    """A Hugging Face hub cache holding the local tokenizer as repo `headroom/tiny` (offline)."""
    hub = os.path.join(a.out, "hf-hub")
    repo = os.path.join(hub, "models--headroom--tiny")
    rev = "0" * 40
    snap = os.path.join(repo, "snapshots", rev)
    if not os.path.isdir(snap):
        os.makedirs(snap)
        os.makedirs(os.path.join(repo, "refs"))
        with open(os.path.join(repo, "refs", "main"), "w") as f:
            f.write(rev)
        for name in os.listdir(a.tokenizer):
            if name.endswith((".json", ".txt", ".model")) or name == "tokenizer.json":
                os.symlink(os.path.join(a.tokenizer, name), os.path.join(snap, name))
    return hub


def tool_guidellm(a, url, c, n, d):
    out = os.path.join(d, "guidellm.json")
    cmd = [os.path.join(a.peers_home, "guidellm", "bin", "guidellm"), "run",
           "--backend", f"kind=openai_http,target={url},model=tiny",
           "--profile", f"kind=concurrent,streams={c}",
           "--constraint", f"kind=max_requests,count={n}",
           "--data", f"kind=synthetic_text,prompt_tokens={PROMPT},output_tokens={OUTPUT}",
           "--tokenizer", f"kind=huggingface_auto,model={a.tokenizer}",
           "--output", f"kind=json,path={out}", "--disable-console-interactive"]

    def parse():
        r = json.load(open(out))
        m = r["benchmarks"][0]["metrics"]

        def pick(key, stat):
            x = m[key]["successful"]
            return x["mean"] if stat == "mean" else x["percentiles"]["p99"]
        return {"ttft_mean_ms": pick("time_to_first_token_ms", "mean"), "ttft_p99_ms": pick("time_to_first_token_ms", "p99"),
                "itl_mean_ms": pick("inter_token_latency_ms", "mean"), "itl_p99_ms": pick("inter_token_latency_ms", "p99")}
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return cmd, parse, env


def tool_inference_perf(a, url, c, n, d):
    cfg = os.path.join(d, "config.yml")
    with open(cfg, "w") as f:
        f.write(f"""load:
  type: concurrent
  stages: [{{num_requests: {n}, concurrency_level: {c}}}]
api: {{type: completion, streaming: true}}
server: {{type: vllm, model_name: tiny, base_url: "{url}", ignore_eos: true}}
tokenizer: {{pretrained_model_name_or_path: "{a.tokenizer}"}}
data:
  type: random
  input_distribution: {{min: {PROMPT}, max: {PROMPT}, mean: {PROMPT}, std_dev: 0, total_count: {n}}}
  output_distribution: {{min: {OUTPUT}, max: {OUTPUT}, mean: {OUTPUT}, std_dev: 0, total_count: {n}}}
report: {{request_lifecycle: {{summary: true, per_stage: true, per_request: false}}}}
storage: {{local_storage: {{path: "{d}/reports"}}}}
""")
    cmd = [os.path.join(a.peers_home, "inference-perf", "bin", "inference-perf"), "--config_file", cfg]

    def parse():
        path = None
        for root, _, files in os.walk(os.path.join(d, "reports")):
            for f in files:
                if f.startswith("summary_lifecycle_metrics") and f.endswith(".json"):
                    path = os.path.join(root, f)
        r = json.load(open(path))
        m = r["successes"]["latency"]
        ttft, itl = m["time_to_first_token"], m.get("inter_token_latency") or m["time_per_output_token"]
        return {"ttft_mean_ms": ttft["mean"] * 1e3, "ttft_p99_ms": ttft["p99"] * 1e3,
                "itl_mean_ms": itl["mean"] * 1e3, "itl_p99_ms": itl["p99"] * 1e3}
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return cmd, parse, env


TOOLS = {"headroom": tool_headroom, "inference-perf": tool_inference_perf, "vllm-bench": tool_vllm, "guidellm": tool_guidellm, "aiperf": tool_aiperf}


def fmt(x, nd=1):
    return "—" if x is None else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--headroom", required=True)
    ap.add_argument("--vllm-python", required=True)
    ap.add_argument("--peers-home", required=True)
    ap.add_argument("--tokenizer", required=True, help="a local HF tokenizer folder")
    ap.add_argument("--twin-config", required=True)
    ap.add_argument("--levels", default="1,16,64")
    ap.add_argument("--duration", type=int, default=15, help="seconds of load per level (approximate for count-based tools)")
    ap.add_argument("--tools", default=",".join(TOOLS))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    levels = [int(x) for x in a.levels.split(",")]
    e2e_s = OUTPUT * 0.020 + 0.04
    rows = []
    for tool in a.tools.split(","):
        for c in levels:
            n = max(c, int(c * a.duration / e2e_s))
            d = os.path.join(a.out, f"{tool}-c{c}")
            os.makedirs(d, exist_ok=True)
            twin = Twin(a.headroom, a.twin_config, d)
            try:
                cmd, parse, env = TOOLS[tool](a, twin.url, c, n, d)
                rc, cpu, wall = run_child(cmd, a.duration * 6 + 120, os.path.join(d, "tool.log"), env=env)
                t = truth(twin.metrics())
            finally:
                twin.stop()
            row = {"tool": tool, "concurrency": c, "requests": n, "rc": rc, "cpu_s": cpu, "wall_s": wall, "truth": t}
            try:
                row["measured"] = parse() if rc == 0 else None
            except (OSError, KeyError, ValueError, TypeError, IndexError) as ex:
                row["measured"] = None
                row["parse_error"] = f"{type(ex).__name__}: {ex}"
            m = row["measured"]
            if m and t["ttft_mean_ms"]:
                row["ttft_bias_ms"] = m["ttft_mean_ms"] - t["ttft_mean_ms"]
                row["ttft_p99_err_ms"] = m["ttft_p99_ms"] - t["ttft_p99_ms"] if t["ttft_p99_ms"] else None
                row["itl_bias_ms"] = m["itl_mean_ms"] - t["itl_mean_ms"]
                row["itl_p99_err_ms"] = m["itl_p99_ms"] - t["itl_p99_ms"] if t["itl_p99_ms"] else None
                row["distorted"] = (abs(row["ttft_bias_ms"]) > max(5.0, 0.1 * t["ttft_mean_ms"])
                                    or abs(row["itl_bias_ms"]) > 0.1 * t["itl_mean_ms"])
            row["cpu_s_per_1k_tok"] = 1e3 * cpu / t["tokens"] if t["tokens"] else None
            rows.append(row)
            print(f"{tool} c={c}: rc={rc} cpu={cpu:.2f}s wall={wall:.1f}s tokens={t['tokens']:g} "
                  f"measured={m} truth ttft={fmt(t['ttft_mean_ms'])} itl={fmt(t['itl_mean_ms'])} {row.get('parse_error', '')}",
                  flush=True)
            with open(os.path.join(a.out, "results.json"), "w") as f:
                json.dump(rows, f, indent=1)
    write_table(a, rows, levels)


def write_table(a, rows, levels):
    lines = [
        "| tool | conc. | tokens | TTFT mean true / measured (ms) | TTFT bias (ms) | TTFT p99 true / measured (ms) | "
        "ITL mean true / measured (ms) | ITL bias (ms) | ITL p99 true / measured (ms) | client CPU s / 1k tok | distorted |",
        "|---|---:|---:|---|---:|---|---|---:|---|---:|---|"]
    for r in rows:
        t, m = r["truth"], r.get("measured")
        if not m:
            lines.append(f"| {r['tool']} | {r['concurrency']} | {t['tokens']:g} | failed (rc {r['rc']}{'; ' + r['parse_error'] if r.get('parse_error') else ''}) | | | | | | "
                         f"{fmt(r['cpu_s_per_1k_tok'], 3)} | |")
            continue
        lines.append(
            f"| {r['tool']} | {r['concurrency']} | {t['tokens']:g} | {fmt(t['ttft_mean_ms'])} / {fmt(m['ttft_mean_ms'])} | "
            f"{fmt(r['ttft_bias_ms'], 2)} | {fmt(t['ttft_p99_ms'])} [{'–'.join(fmt(x, 0) for x in t['ttft_p99_bucket_ms'] or [])}] / {fmt(m['ttft_p99_ms'])} | "
            f"{fmt(t['itl_mean_ms'], 2)} / {fmt(m['itl_mean_ms'], 2)} | {fmt(r['itl_bias_ms'], 2)} | "
            f"{fmt(t['itl_p99_ms'])} [{'–'.join(fmt(x, 0) for x in t['itl_p99_bucket_ms'] or [])}] / {fmt(m['itl_p99_ms'])} | "
            f"{fmt(r['cpu_s_per_1k_tok'], 3)} | {'yes' if r.get('distorted') else 'no'} |")
    lines.append("")
    lines.append("| tool | highest concurrency not distorted | marginal client CPU s / 1k tok (lowest → highest level) |")
    lines.append("|---|---:|---:|")
    for tool in dict.fromkeys(r["tool"] for r in rows):
        rs = [r for r in rows if r["tool"] == tool and r.get("measured")]
        ok = [r["concurrency"] for r in rs if not r.get("distorted")]
        marg = None
        if len(rs) >= 2 and rs[-1]["truth"]["tokens"] > rs[0]["truth"]["tokens"]:
            marg = 1e3 * (rs[-1]["cpu_s"] - rs[0]["cpu_s"]) / (rs[-1]["truth"]["tokens"] - rs[0]["truth"]["tokens"])
        lines.append(f"| {tool} | {max(ok) if ok else '—'} | {fmt(marg, 3)} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "RESULTS.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()

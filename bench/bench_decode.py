#!/usr/bin/env python3
"""Decode throughput with a KV cache (issue 13): ckv beside llama.cpp and HF transformers.

For each prompt length, each engine runs in its own child process on the same GGUF, the
same token ids and the same thread count: it prefills the prompt once (timed: prefill
tok/s, as bench/bench_prefill.py measures it), then decodes greedily one token at a time
with its KV cache: one untimed warm-up step, then N timed steps (decode tok/s). Model load
is not timed. Each repeat starts from
an empty cache; the best repeat is reported. Ratios are against llama.cpp in the same run.

    # peers, outside the repo: llama-cpp-python (built from source), torch + transformers + gguf
    python3 bench/bench_decode.py --lengths 1024 4096 --threads 2 --new-tokens 64 --repeats 3 \\
        --python-llama /path/to/venv-llama/bin/python --python-hf /path/to/venv-ref/bin/python

  llama.cpp   Llama.eval(prompt), then N x Llama.eval([argmax of the last logits])
  transformers  model(prompt, use_cache=True), then N x model(next, past_key_values=...),
              float32, torch.set_num_threads(threads)
  ckv         ckv forward --tokens FILE --generate N --repeats R --timing-json -q; reads
              prefill_seconds and, when present, decode_seconds, decode_tokens (the
              one-token forward steps those seconds cover) and decode_cpu_seconds; each a
              number or a list with one entry per repeat

Engines that are not installed (or a ckv without decode timing) are reported, not fatal.
The CPU model (lscpu) and the load average before and after go into the output.
"""
import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def token_ids(n, vocab=49152, seed=0):
    # Ids of ordinary tokens (skip the first 17 special ids of SmolLM2), fixed by seed; the
    # same ids as bench/bench_prefill.py.
    import random
    rng = random.Random(seed)
    return [rng.randrange(17, vocab) for _ in range(n)]


def cpu_now():
    return time.process_time()


def child_llamacpp(model, ids, threads, repeats, new_tokens):
    import llama_cpp
    import numpy as np
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=len(ids) + new_tokens + 8, n_threads=threads,
                n_threads_batch=threads, n_batch=512, n_ubatch=512, verbose=False)
    n_vocab = llm.n_vocab()

    def last_argmax():  # logits of the batch's last token (llama-cpp-python keeps no copy)
        return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))))

    runs = []
    for _ in range(repeats):
        llm.reset()
        t0, c0 = time.perf_counter(), cpu_now()
        llm.eval(ids)
        prefill, prefill_cpu = time.perf_counter() - t0, cpu_now() - c0
        out = [last_argmax()]
        llm.eval([out[-1]])  # warm-up: the first one-token batch, not timed
        t0, c0 = time.perf_counter(), cpu_now()
        for _ in range(new_tokens):
            nxt = last_argmax()
            out.append(nxt)
            llm.eval([nxt])
        runs.append({"prefill_s": prefill, "prefill_cpu_s": prefill_cpu,
                     "decode_s": time.perf_counter() - t0, "decode_cpu_s": cpu_now() - c0,
                     "decode_tokens": new_tokens, "tokens_out": out[:8]})
    return runs, {"llama_cpp_python": llama_cpp.__version__}


def child_transformers(model, ids, threads, repeats, new_tokens):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    m = AutoModelForCausalLM.from_pretrained(os.path.dirname(model), gguf_file=os.path.basename(model),
                                             torch_dtype=torch.float32)
    m.eval()
    x = torch.tensor([ids])
    runs = []
    with torch.no_grad():
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), cpu_now()
            o = m(x, use_cache=True, logits_to_keep=1)
            prefill, prefill_cpu = time.perf_counter() - t0, cpu_now() - c0
            past, out = o.past_key_values, []
            nxt = int(o.logits[0, -1].argmax())
            out.append(nxt)  # warm-up: the first one-token step, not timed
            o = m(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past, nxt = o.past_key_values, int(o.logits[0, -1].argmax())
            t0, c0 = time.perf_counter(), cpu_now()
            for _ in range(new_tokens):
                out.append(nxt)
                o = m(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past = o.past_key_values
                nxt = int(o.logits[0, -1].argmax())
            runs.append({"prefill_s": prefill, "prefill_cpu_s": prefill_cpu,
                         "decode_s": time.perf_counter() - t0, "decode_cpu_s": cpu_now() - c0,
                         "decode_tokens": new_tokens, "tokens_out": out[:8]})
    return runs, {"torch": torch.__version__, "transformers": transformers.__version__}


def as_list(v):
    return v if isinstance(v, list) else [v]


def child_ckv(model, ids, threads, repeats, new_tokens, binary):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(" ".join(map(str, ids)))
        path = f.name
    cmd = [binary, "forward", "--model", model, "--tokens", path, "--threads", str(threads),
           "--generate", str(new_tokens), "--repeats", str(repeats), "--timing-json", "-q"]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    t = json.loads(out.strip().splitlines()[-1])
    prefill, prefill_cpu = as_list(t["prefill_seconds"]), as_list(t["prefill_cpu_seconds"])
    runs = []
    if "decode_seconds" in t and "decode_tokens" in t:
        dec = as_list(t["decode_seconds"])
        dec_cpu = as_list(t.get("decode_cpu_seconds", [None] * len(dec)))
        toks = as_list(t["decode_tokens"])
        for i in range(len(dec)):
            runs.append({"prefill_s": prefill[min(i, len(prefill) - 1)],
                         "prefill_cpu_s": prefill_cpu[min(i, len(prefill_cpu) - 1)],
                         "decode_s": dec[i], "decode_cpu_s": dec_cpu[min(i, len(dec_cpu) - 1)],
                         "decode_tokens": toks[min(i, len(toks) - 1)]})
    else:  # a ckv without a KV cache: prefill only
        for p, c in zip(prefill, prefill_cpu):
            runs.append({"prefill_s": p, "prefill_cpu_s": c, "decode_s": None, "decode_cpu_s": None,
                         "decode_tokens": None})
    return runs, {"ckv_timing_keys": sorted(t.keys())}


def run_child(args):
    engine, model, n, threads, repeats, new_tokens, binary = args.child
    n, threads, repeats, new_tokens = int(n), int(threads), int(repeats), int(new_tokens)
    ids = token_ids(n)
    if engine == "llama.cpp":
        runs, info = child_llamacpp(model, ids, threads, repeats, new_tokens)
    elif engine == "transformers":
        runs, info = child_transformers(model, ids, threads, repeats, new_tokens)
    elif engine == "ckv":
        runs, info = child_ckv(model, ids, threads, repeats, new_tokens, binary)
    else:
        raise SystemExit(f"unknown engine {engine}")
    rss_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(json.dumps({"engine": engine, "n": n, "runs": runs, "info": info, "peak_rss_mib": rss_kib / 1024}))


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return platform.processor() or "unknown", ""
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    name = fields.get("Model name", "unknown").strip()
    flags = set(fields.get("Flags", "").split())
    isa = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                       "avx_vnni", "amx_bf16", "amx_int8") if f in flags]
    extra = ", ".join(f"{k.strip()} {fields[k].strip()}" for k in ("CPU family", "Model", "CPU(s)",
                                                                   "L3 cache") if k in fields)
    return name, f"{extra}; {' '.join(isa)}"


def best(runs, key):
    vals = [r[key] for r in runs if r.get(key)]
    return min(vals) if vals else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--ckv", default=os.path.join(ROOT, "build", "ckv"))
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--new-tokens", type=int, default=64, help="tokens decoded after the prompt")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--engines", nargs="+", default=["ckv", "llama.cpp", "transformers"])
    p.add_argument("--python-llama", default=sys.executable, help="python with llama_cpp")
    p.add_argument("--python-hf", default=sys.executable, help="python with torch/transformers/gguf")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return run_child(args)

    name, detail = cpu_model()
    load_before = os.getloadavg()
    python_for = {"llama.cpp": args.python_llama, "transformers": args.python_hf, "ckv": sys.executable}
    rows, notes = [], []
    for n in args.lengths:
        for engine in args.engines:
            cmd = [python_for[engine], os.path.abspath(__file__), "--child", engine, args.model, str(n),
                   str(args.threads), str(args.repeats), str(args.new_tokens), args.ckv]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["failed"])[-1]
                notes.append(f"{engine} n={n}: {last}")
                continue
            res = json.loads(r.stdout.strip().splitlines()[-1])
            runs = res["runs"]
            pre, pre_cpu = best(runs, "prefill_s"), best(runs, "prefill_cpu_s")
            res["prefill_tok_s"] = n / pre if pre else None
            res["prefill_tok_cpu_s"] = n / pre_cpu if pre_cpu else None
            dec_runs = [x for x in runs if x.get("decode_s")]
            if dec_runs:
                b = min(dec_runs, key=lambda x: x["decode_s"] / x["decode_tokens"])
                res["decode_tok_s"] = b["decode_tokens"] / b["decode_s"]
                cpu = [x["decode_tokens"] / x["decode_cpu_s"] for x in dec_runs if x.get("decode_cpu_s")]
                res["decode_tok_cpu_s"] = max(cpu) if cpu else None
            else:
                res["decode_tok_s"] = res["decode_tok_cpu_s"] = None
                notes.append(f"{engine} n={n}: not yet supported (no decode_seconds/decode_tokens "
                             f"in --timing-json)")
            rows.append(res)
    load_after = os.getloadavg()

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "n/a"

    def fmt(v):
        return f"{v:.1f}" if v else "not yet supported"

    print(f"CPU: {name} ({detail}); threads {args.threads}; load average before "
          f"{load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(f"| prompt | engine | decode tok/s (best of {args.repeats}, {args.new_tokens} tokens) "
          f"| vs llama.cpp | decode tok per CPU-s | vs llama.cpp | prefill tok/s | vs llama.cpp "
          f"| peak RSS MiB |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    by_n = {}
    for r in rows:
        by_n.setdefault(r["n"], {})[r["engine"]] = r
    for n, engines in sorted(by_n.items()):
        ref = engines.get("llama.cpp", {})
        for eng, r in engines.items():
            print(f"| {n} | {eng} | {fmt(r['decode_tok_s'])} | {ratio(r['decode_tok_s'], ref.get('decode_tok_s'))} "
                  f"| {fmt(r['decode_tok_cpu_s'])} | {ratio(r['decode_tok_cpu_s'], ref.get('decode_tok_cpu_s'))} "
                  f"| {fmt(r['prefill_tok_s'])} | {ratio(r['prefill_tok_s'], ref.get('prefill_tok_s'))} "
                  f"| {r['peak_rss_mib']:.0f} |")
    for note in notes:
        print(f"# {note}")
    summary = {"cpu": name, "cpu_detail": detail, "threads": args.threads, "new_tokens": args.new_tokens,
               "model": os.path.basename(args.model), "load_before": load_before, "load_after": load_after,
               "results": rows, "notes": notes}
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(summary, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

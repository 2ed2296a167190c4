#!/usr/bin/env python3
"""Prefill throughput and peak memory: ckv beside llama.cpp and HF transformers.

Each engine runs in its own child process (so its peak RSS is its own) on the same GGUF,
the same token ids and the same thread count; only the prefill of the prompt is timed, not
the model load. Results are printed as a Markdown table (for docs/PERF.md) and as JSON.

    # peers, outside the repo: llama-cpp-python (built from source), torch + transformers + gguf
    python3 bench/bench_prefill.py --lengths 512 2048 --threads 2 --repeats 3 \\
        --engines transformers transformers-bf16 llama.cpp ckv ckv-bf16 \\
        --python-llama /path/to/venv-llama/bin/python --python-hf /path/to/venv-ref/bin/python

  llama.cpp          Llama.eval(ids) (llama-cpp-python, n_batch 512)
  llama.cpp-norepack the same without llama.cpp's extra buffer types (use_extra_bufts off: no
                     repacking of the weights into its interleaved layouts, no AMX), which is
                     faster than the default on some files (docs/PERF.md, Qwen3-30B-A3B)
  transformers       model(ids, use_cache=False, logits_to_keep=1), torch.float32
  transformers-bf16  the same with the model in torch.bfloat16
  ckv                ckv forward --tokens FILE --repeats R --timing-json -q
  ckv+record         the same, recording Q/K/V, the last attention row and the residual
  ckv-bf16           the same with --compute-dtype bf16
  ckv-eigen          the ckv binary given by --ckv-eigen (a build with -DCKV_ONEDNN=OFF): the
                     engine comparison of docs/PERF.md in one run

Engines that are not installed are reported as missing and skipped. The "vs llama.cpp"
columns divide by the faster of llama.cpp and llama.cpp-norepack where both ran. The CPU model and its
vector flags (lscpu) and the load average before and after go into the output.
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
    # Ids of ordinary tokens (skip the first 17 special ids of SmolLM2), fixed by seed.
    import random
    rng = random.Random(seed)
    return [rng.randrange(17, vocab) for _ in range(n)]


def child_llamacpp(model, ids, threads, repeats, repack=True):
    import llama_cpp.llama_cpp as lib
    from llama_cpp import Llama
    if not repack:  # Llama() takes its model parameters from this function of llama_cpp.llama_cpp
        default_params = lib.llama_model_default_params

        def no_extra_bufts():
            params = default_params()
            params.use_extra_bufts = False
            return params
        lib.llama_model_default_params = no_extra_bufts
    llm = Llama(model_path=model, n_ctx=len(ids) + 8, n_threads=threads, n_threads_batch=threads,
                n_batch=512, n_ubatch=512, verbose=False)
    times, cpu = [], []
    for _ in range(repeats):
        llm.reset()
        t0, c0 = time.perf_counter(), time.process_time()
        llm.eval(ids)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return times, cpu


def child_transformers(model, ids, threads, repeats, bf16):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    m = AutoModelForCausalLM.from_pretrained(os.path.dirname(model), gguf_file=os.path.basename(model),
                                             torch_dtype=torch.bfloat16 if bf16 else torch.float32)
    m.eval()
    x = torch.tensor([ids])
    times, cpu = [], []
    with torch.no_grad():
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            m(x, use_cache=False, logits_to_keep=1)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return times, cpu


def child_ckv(model, ids, threads, repeats, binary, record, bf16):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(" ".join(map(str, ids)))
        path = f.name
    cmd = [binary, "forward", "--model", model, "--tokens", path, "--threads", str(threads),
           "--generate", "0", "--repeats", str(repeats), "--timing-json", "-q"]
    if record:
        cmd.append("--record-all")
    if bf16:
        cmd += ["--compute-dtype", "bf16"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    os.unlink(path)
    timing = json.loads(out.strip().splitlines()[-1])
    return timing["prefill_seconds"], timing["prefill_cpu_seconds"]


def run_child(args):
    engine, model, n, threads, repeats, binary = args.child
    n, threads, repeats = int(n), int(threads), int(repeats)
    ids = token_ids(n)
    if engine in ("llama.cpp", "llama.cpp-norepack"):
        times, cpu = child_llamacpp(model, ids, threads, repeats, repack=engine == "llama.cpp")
    elif engine in ("transformers", "transformers-bf16"):
        times, cpu = child_transformers(model, ids, threads, repeats, engine == "transformers-bf16")
    elif engine in ("ckv", "ckv+record", "ckv-bf16", "ckv-eigen"):
        times, cpu = child_ckv(model, ids, threads, repeats, binary, engine == "ckv+record",
                               engine == "ckv-bf16")
    else:
        raise SystemExit(f"unknown engine {engine}")
    rss_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(json.dumps({"engine": engine, "n": n, "times": times, "cpu_times": cpu,
                      "peak_rss_mib": rss_kib / 1024}))


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return platform.processor() or "unknown", ""
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    name = fields.get("Model name", "unknown").strip()
    flags = set(fields.get("Flags", "").split())
    isa = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                       "avx_vnni", "amx_bf16", "amx_int8", "amx_tile") if f in flags]
    extra = ", ".join(f"{k.strip()} {fields[k].strip()}" for k in ("CPU family", "Model", "CPU(s)",
                                                                   "L3 cache") if k in fields)
    return name, f"{extra}; {' '.join(isa)}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--ckv", default=os.path.join(ROOT, "build", "ckv"))
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ckv-eigen", help="a ckv built with -DCKV_ONEDNN=OFF, for the engine ckv-eigen")
    p.add_argument("--engines", nargs="+", default=["ckv", "ckv+record", "llama.cpp", "transformers"],
                   choices=["ckv", "ckv+record", "ckv-bf16", "ckv-eigen", "llama.cpp", "llama.cpp-norepack",
                            "transformers",
                            "transformers-bf16"])
    p.add_argument("--python-llama", default=sys.executable, help="python with llama_cpp")
    p.add_argument("--python-hf", default=sys.executable, help="python with torch/transformers/gguf")
    p.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return run_child(args)
    if "ckv-eigen" in args.engines and not args.ckv_eigen:
        p.error("the engine ckv-eigen needs --ckv-eigen BINARY")

    cpu_name, detail = cpu_model()
    load_before = os.getloadavg()
    rows = []
    for n in args.lengths:
        for engine in args.engines:
            python = {"llama.cpp": args.python_llama, "llama.cpp-norepack": args.python_llama,
                      "transformers": args.python_hf,
                      "transformers-bf16": args.python_hf}.get(engine, sys.executable)
            binary = args.ckv_eigen if engine == "ckv-eigen" else args.ckv
            cmd = [python, os.path.abspath(__file__), "--child", engine, args.model, str(n), str(args.threads),
                   str(args.repeats), binary]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["failed"])[-1]
                print(f"# {engine} n={n}: {last}", file=sys.stderr)
                continue
            res = json.loads(r.stdout.strip().splitlines()[-1])
            res["tok_per_s"] = n / min(res["times"])
            res["tok_per_cpu_s"] = n / min(res["cpu_times"])
            rows.append(res)
    load_after = os.getloadavg()
    by_n = {}
    for r in rows:
        by_n.setdefault(r["n"], {})[r["engine"]] = r
    print(f"CPU: {cpu_name} ({detail}); threads {args.threads}; load average before "
          f"{load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(f"| tokens | engine | prefill tok/s (best of {args.repeats}) | vs llama.cpp "
          f"| tok per CPU-second | vs llama.cpp | peak RSS MiB |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n, engines in sorted(by_n.items()):
        # The reference is llama.cpp's faster configuration where both ran (per column).
        peers = [engines[e] for e in ("llama.cpp", "llama.cpp-norepack") if e in engines]
        ref = max((r["tok_per_s"] for r in peers), default=None)
        cref = max((r["tok_per_cpu_s"] for r in peers), default=None)
        for name, r in engines.items():
            ratio = f"{r['tok_per_s'] / ref:.2f}x" if ref else "n/a"
            cratio = f"{r['tok_per_cpu_s'] / cref:.2f}x" if cref else "n/a"
            print(f"| {n} | {name} | {r['tok_per_s']:.1f} | {ratio} | {r['tok_per_cpu_s']:.1f} "
                  f"| {cratio} | {r['peak_rss_mib']:.0f} |")
    print(json.dumps({"threads": args.threads, "model": os.path.basename(args.model), "cpu": cpu_name,
                      "cpu_detail": detail, "load_before": load_before, "load_after": load_after,
                      "results": rows}))


if __name__ == "__main__":
    main()

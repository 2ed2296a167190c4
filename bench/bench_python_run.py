"""model.run against `ckv dump`'s forward pass (docs/PERF.md "Python"): one NIAH prompt of
--length tokens, every layer, q/k/v + window attention (+ nu), the same thread count.

    .venv/bin/python bench/bench_python_run.py build/ckv [--length 4096] [--threads 2] [--repeats 2]

The dump's forward time without its HDF5 write is timing-json's forward_seconds less
forward_stalled_seconds (the pass waiting for the writer); nu runs on the dump's writer
thread but inside model.run, so both are reported with and without nu.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ckv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    model = ckv.load()
    rec = model.niah(length=a.length, seed=0, depth=0.5)
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = Path(tmp) / "in.jsonl"
        jsonl.write_text(json.dumps({"id": "0", "context": rec["context"], "question": rec["question"]}) + "\n")
        for what, items in (("q,k,v,attn", "q,k,v,attn"), ("q,k,v,attn,nu", "q,k,v,attn,nu")):
            dump_s, run_s = [], []
            for _ in range(a.repeats):
                timing = Path(tmp) / "t.json"
                subprocess.run([a.binary, "-q", "dump", "-t", str(a.threads), "--input", str(jsonl), "--what", what,
                                "-o", str(Path(tmp) / "d.h5"), "--force", "--timing-json", str(timing)], check=True)
                t = json.loads(timing.read_text())
                dump_s.append(t["forward_seconds"] - t["forward_stalled_seconds"])
                start = time.perf_counter()
                r = model.run(rec["context"], question=rec["question"], record=items, threads=a.threads)
                run_s.append(time.perf_counter() - start)
                del r
            print(f"{what:>14} {len(model.tokens_of(rec['context'], rec['question'])[0])} tokens: "
                  f"dump forward {min(dump_s):.2f} s, model.run {min(run_s):.2f} s, "
                  f"ratio {min(run_s) / min(dump_s):.3f}", flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import ckv"], check=True)
    print(f"python -c 'import ckv': {time.perf_counter() - start:.3f} s (interpreter start included)")


if __name__ == "__main__":
    main()

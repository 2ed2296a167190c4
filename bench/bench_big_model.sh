#!/usr/bin/env bash
# Research-scale memory (issue 12): `ckv dump` of a LENGTH-token prompt (random ids, seed 0)
# through MODEL, every layer, q,k,v + window attention rows + nu in f16: wall time and
# peak RSS beside the model's size on disk (a GGUF file or an HF directory) and the load
# average. MODEL is typically a random-weight model from bench/make_random_model.py:
#
#   python3 bench/make_random_model.py --config bench/configs/llama-3.1-8b.json \
#       --format q4_k -o out/models/llama-3.1-8b.q4_k.gguf
#   bench/bench_big_model.sh out/models/llama-3.1-8b.q4_k.gguf [BUILD_DIR] [LENGTH] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
model=${1:?usage: bench_big_model.sh MODEL [BUILD_DIR] [LENGTH] [THREADS]}
build=${2:-$root/build}
length=${3:-2048}
threads=${4:-2}
mkdir -p "$root/out"
work=$(mktemp -d "$root/out/bench_big.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Ordinary ids below 32000: inside every vocabulary of the shipped configs.
python3 -c "import random; r = random.Random(0); print(' '.join(str(r.randrange(100, 32000)) for _ in range($length)))" \
  > "$work/tokens.txt"
model_bytes=$(du -bL --apparent-size -s "$model" | cut -f1)
before=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/time -f "%e %M" -o "$work/time" "$build/ckv" -q dump --model "$model" --tokens "$work/tokens.txt" \
  --what q,k,v,attn,nu --dtype f16 -t "$threads" -o "$work/dump.h5" --force --timing-json "$work/timing.json"
after=$(cut -d' ' -f1-3 /proc/loadavg)
read -r wall rss_kib < "$work/time"
python3 - "$model" "$model_bytes" "$wall" "$rss_kib" "$work/timing.json" "$length" "$threads" "$before" "$after" <<'PY'
import json, sys
model, size, wall, rss, timing, n, threads, before, after = sys.argv[1:]
GiB = 2**30
size, rss = int(size), int(rss) * 1024
t = json.load(open(timing))
print(f"ckv dump, {n} tokens, all layers, q,k,v + window attn + nu (f16), -t {threads}")
print(f"model            {model}")
print(f"model size       {size / GiB:.2f} GiB")
print(f"wall             {float(wall):.1f} s (forward {t['forward_seconds']:.1f} s)")
print(f"peak RSS         {rss / GiB:.2f} GiB = model size + {(rss - size) / GiB:.2f} GiB")
print(f"load average     {before} before, {after} after")
PY

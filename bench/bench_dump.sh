#!/usr/bin/env bash
# Dump at scale (issue 3): default model, a 4096-token NIAH prompt, all 30 layers,
# q/k/v + window attention + nu in f16. Prints wall time, peak RSS, file size and write
# rate, next to `dd` writing the same number of bytes to the same disk, and the peak RSS
# of HF transformers with output_attentions=True (bench/hf_attentions_rss.py).
#   bench/bench_dump.sh [BUILD_DIR] [LENGTH]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
length=${2:-4096}
ckv="$build/ckv"
work=$(mktemp -d "$root/out/bench_dump.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$ckv" -q niah --length "$length" --count 1 --seed 0 -o "$work/prompt.jsonl"
/usr/bin/time -f "%e %M" -o "$work/time" "$ckv" -q dump --input "$work/prompt.jsonl" \
  --what q,k,v,attn,nu --dtype f16 -t 2 -o "$work/dump.h5"
read -r wall rss_kib < "$work/time"
bytes=$(stat -c %s "$work/dump.h5")
mib=$((bytes / 1048576))
dd_out=$(dd if=/dev/zero of="$work/dd.bin" bs=1M count="$mib" conv=fdatasync 2>&1 | tail -1)
dd_seconds=$(echo "$dd_out" | sed -E 's/.* copied, ([0-9.]+) s.*/\1/')
python3 - "$wall" "$rss_kib" "$bytes" "$dd_seconds" "$length" <<'PY'
import sys
wall, rss_kib, size, dd_s, n = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
rate = size / wall / 2**20
dd_rate = (size // 2**20) / dd_s
print(f"ckv dump, {n} tokens, 30 layers, q/k/v + window attn + nu, f16:")
print(f"  wall {wall:.1f} s, peak RSS {rss_kib/1024:.0f} MiB, file {size/2**20:.0f} MiB")
print(f"  write rate (file bytes / whole wall time) {rate:.0f} MiB/s; dd fdatasync {dd_rate:.0f} MiB/s "
      f"-> {100*rate/dd_rate:.0f}% of dd")
PY

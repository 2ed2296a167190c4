#!/usr/bin/env bash
# Dump at scale (issue 3): default model, a 4096-token NIAH prompt, all 30 layers,
# q/k/v + window attention + nu in f16. Runs, interleaved and REPEATS times each (best of):
#   forward alone   `ckv dump --what logits` (the forward pass records nothing)
#   dump            the full dump, with --timing-json (where the writer's time went)
#   dd              `dd bs=1M conv=fdatasync` of the dump's size, same directory
# and prints forward alone, dump wall, file size, writer busy time, HDF5 write time
# (H5Dwrite + H5Fflush/H5Fclose + the final fsync, the same span dd's number covers),
# write rate, dd rate, their ratio, and peak RSS, beside the load average.
#   bench/bench_dump.sh [BUILD_DIR] [LENGTH] [REPEATS] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
length=${2:-4096}
repeats=${3:-3}
threads=${4:-2}
ckv="$build/ckv"
mkdir -p "$root/out"
work=$(mktemp -d "$root/out/bench_dump.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$ckv" -q niah --length "$length" --count 1 --seed 0 -o "$work/prompt.jsonl"
for i in $(seq "$repeats"); do
  /usr/bin/time -f "%e %M" -o "$work/fwd.$i.time" "$ckv" -q dump --input "$work/prompt.jsonl" \
    --what logits -t "$threads" -o "$work/fwd.h5" --force --timing-json "$work/fwd.$i.json"
  /usr/bin/time -f "%e %M" -o "$work/dump.$i.time" "$ckv" -q dump --input "$work/prompt.jsonl" \
    --what q,k,v,attn,nu --dtype f16 -t "$threads" -o "$work/dump.h5" --force \
    --timing-json "$work/dump.$i.json"
  bytes=$(stat -c %s "$work/dump.h5")
  dd if=/dev/zero of="$work/dd.bin" bs=1M count=$(((bytes + 1048575) / 1048576)) conv=fdatasync \
    2> "$work/dd.$i.txt"
  rm -f "$work/dd.bin"
  uptime > "$work/load.$i.txt"
done
python3 - "$work" "$repeats" "$length" "$threads" <<'PY'
import json, re, sys
work, repeats, n, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
MiB = 2**20
def time_of(path):
    wall, rss = open(path).read().split()
    return float(wall), int(rss) / 1024
rows = []
for i in range(1, repeats + 1):
    fwd_wall, fwd_rss = time_of(f"{work}/fwd.{i}.time")
    fwd = json.load(open(f"{work}/fwd.{i}.json"))
    wall, rss = time_of(f"{work}/dump.{i}.time")
    t = json.load(open(f"{work}/dump.{i}.json"))
    dd = open(f"{work}/dd.{i}.txt").read()
    dd_bytes, dd_s = re.search(r"(\d+) bytes .* copied, ([0-9.e+-]+) s", dd).groups()
    h5_s = t["h5_write_seconds"] + t["h5_flush_seconds"] + t["commit_seconds"]
    rows.append(dict(
        fwd=fwd["forward_seconds"], fwd_wall=fwd_wall, wall=wall, rss=rss, size=t["file_bytes"],
        forward=t["forward_seconds"], busy=t["writer_busy_seconds"], nu=t["nu_seconds"],
        conv=t["h5_convert_seconds"], h5w=t["h5_write_seconds"], flush=t["h5_flush_seconds"],
        commit=t["commit_seconds"], stalled=t["forward_stalled_seconds"], h5=h5_s,
        rate=t["file_bytes"] / h5_s / MiB, dd=int(dd_bytes) / float(dd_s) / MiB,
        load=open(f"{work}/load.{i}.txt").read().split("load average:")[1].strip()))
print(f"ckv dump, {n} tokens, 30 layers, q/k/v + window attn + nu, f16, -t {threads}, {repeats} runs")
print("run  fwd-alone  dump-wall  fwd-in-dump  stalled  writer-busy (nu, f16)  HDF5-write (H5Dwrite+close+fsync)"
      "  write-rate  dd-rate  ratio  peak-RSS  load")
for i, r in enumerate(rows, 1):
    print(f"{i:3}  {r['fwd']:8.2f}s  {r['wall']:8.2f}s  {r['forward']:10.2f}s  {r['stalled']:6.2f}s"
          f"  {r['busy']:6.2f}s ({r['nu']:.2f}, {r['conv']:.2f})"
          f"  {r['h5']:6.2f}s ({r['h5w']:.2f}+{r['flush']:.2f}+{r['commit']:.2f})"
          f"  {r['rate']:7.0f} MiB/s {r['dd']:6.0f} MiB/s {100*r['rate']/r['dd']:4.0f}%"
          f"  {r['rss']:5.0f} MiB  {r['load']}")
best = min(rows, key=lambda r: r["wall"])
print(f"best: forward alone {min(r['fwd'] for r in rows):.2f} s, dump wall {best['wall']:.2f} s, "
      f"file {best['size']/MiB:.0f} MiB, writer busy {min(r['busy'] for r in rows):.2f} s, "
      f"HDF5 write {min(r['h5'] for r in rows):.2f} s, "
      f"write rate {max(r['rate'] for r in rows):.0f} MiB/s, dd {max(r['dd'] for r in rows):.0f} MiB/s, "
      f"ratio (each run's own pair, best) {max(100*r['rate']/r['dd'] for r in rows):.0f}%, "
      f"peak RSS {min(r['rss'] for r in rows):.0f} MiB")
PY

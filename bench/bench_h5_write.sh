#!/usr/bin/env bash
# The dump's write path against dd (issue 3, docs/PERF.md): REPEATS interleaved pairs of
#   ckv_bench_h5_write   the 4096-token dump's HDF5 pattern from memory, close, fsync
#   dd                   `dd bs=1M conv=fdatasync` of the same size, same directory
# and the best of each: the HDF5 rate counts H5Dwrite + close + fsync (the span dd's
# number covers), and, separately, everything including float16 conversion and dataset
# creation.
#   bench/bench_h5_write.sh [BUILD_DIR] [REPEATS] [DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
repeats=${2:-5}
mkdir -p "${3:-$root/out}"
work=$(mktemp -d "${3:-$root/out}/bench_h5_write.XXXXXX")
trap 'rm -rf "$work"' EXIT
for i in $(seq "$repeats"); do
  "$build/ckv_bench_h5_write" "$work/w.h5" > "$work/h5.$i.json"
  bytes=$(stat -c %s "$work/w.h5")
  rm -f "$work/w.h5"
  dd if=/dev/zero of="$work/dd.bin" bs=1M count=$(((bytes + 1048575) / 1048576)) conv=fdatasync 2> "$work/dd.$i.txt"
  rm -f "$work/dd.bin"
done
uptime
python3 - "$work" "$repeats" <<'PY'
import json, re, sys
work, repeats = sys.argv[1], int(sys.argv[2])
MiB = 2**20
runs = [json.load(open(f"{work}/h5.{i}.json")) for i in range(1, repeats + 1)]
dds = []
for i in range(1, repeats + 1):
    m = re.search(r"(\d+) bytes.*copied, ([0-9.]+) s", open(f"{work}/dd.{i}.txt").read())
    dds.append(int(m.group(1)) / float(m.group(2)))
path = min(r["h5dwrite_s"] + r["close_s"] + r["fsync_s"] for r in runs)
total = min(r["total_s"] for r in runs)
nbytes = runs[0]["bytes"]
dd = max(dds)
print(f"bytes written {nbytes / MiB:.0f} MiB; best of {repeats}")
print(f"H5Dwrite + close + fsync  {path:.3f} s  {nbytes / MiB / path:8.0f} MiB/s  {nbytes / path / dd:6.1%} of dd")
print(f"everything (f16, create)  {total:.3f} s  {nbytes / MiB / total:8.0f} MiB/s  {nbytes / total / dd:6.1%} of dd")
print(f"dd bs=1M conv=fdatasync            {dd / MiB:8.0f} MiB/s")
PY

#!/usr/bin/env bash
# scripts/main.sh from fresh clones of this repository at the given commits, one after the
# other under the same load, each timed by /usr/bin/time (docs/PERF.md "scripts/main.sh from a
# fresh clone"). No ccache (a fresh machine has none); the default model is fetched by each.
#   bench/bench_main_job.sh OLD_COMMIT NEW_COMMIT   # e.g. 60e34a5 HEAD
#   CKV_BENCH_OUT=DIR (default: a new temporary folder) keeps the logs and times.
set -euo pipefail
(($# >= 1)) || { echo "usage: bench/bench_main_job.sh COMMIT..." >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${CKV_BENCH_OUT:-$(mktemp -d)}
mkdir -p "$out"
printf 'host: %s, %s cores\n' "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)"
for rev in "$@"; do
  sha=$(git -C "$root" rev-parse --short=12 "$rev")
  clone=$out/clone_$sha
  rm -rf "$clone"
  git clone -q "$root" "$clone"
  git -C "$clone" checkout -q "$sha"
  status=0
  (cd "$clone" && env -u CKV_CMAKE_ARGS -u CKV_BUILD_DIR -u CKV_OUT_DIR \
     /usr/bin/time -f "%e %U %S" -o "$out/time_$sha" scripts/main.sh >"$out/log_$sha" 2>&1) || status=$?
  read -r wall user sys <"$out/time_$sha" || true
  build=$(grep -oE '\[2/[0-9]+\].*\(at [0-9]+m[0-9]+s\)' "$out/log_$sha" || true)  # the set-up's end
  printf '%s (%s): %s s wall, %s s user, %s s system, exit %d; %s\n' "$rev" "$sha" "$wall" "$user" "$sys" "$status" "$build"
  rm -rf "$clone/build" "$clone/models" "$clone/out"  # the logs stay in $out
done
echo "logs: $out"

#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz and runs each for the
# given number of seconds.
#   scripts/fuzz.sh [SECONDS_PER_TARGET=60] [TARGET...]
# Targets (fuzz/CMakeLists.txt), all by default:
#   parsers  gguf safetensors safetensors_index config_json tokenizer_gguf tokenize_text
#   inputs   records selection_file headkv_profile duo_pattern cli
#   outputs  h5_info h5_merge h5_bound_dump h5_mutate
# The parsers' corpora are seeded from the small valid files in tests/data; the others'
# from real ckv runs by scripts/fuzz_corpus.sh (run here when fuzz/corpus/templates is
# missing; it needs a built ckv, $CKV_BINARY or build/ckv). Corpora grow in fuzz/corpus/,
# crashing inputs land in fuzz/artifacts/ (both git-ignored). Prints runs and crashes per
# target; exits non-zero when any target crashed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
shift || true
targets=("$@")
all=(gguf safetensors safetensors_index config_json tokenizer_gguf tokenize_text records selection_file headkv_profile duo_pattern cli
     h5_info h5_merge h5_bound_dump h5_mutate)
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (known: ${all[*]})" >&2; exit 2; }
done
build=${CKV_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${CKV_FUZZ_BUILD_JOBS:-2}

cmake -S "$root" -B "$build" -DCKV_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DCKV_CUDA=OFF -DCKV_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$jobs" --target $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null
if [[ ! -d $root/fuzz/corpus/templates ]] && [[ " ${targets[*]} " =~ \ (records|selection_file|headkv_profile|cli|h5_[a-z_]+)\  ]]; then
  "$root/scripts/fuzz_corpus.sh"
fi

data=$root/tests/data/loaders
seeds() {
  case $1 in
    gguf) ls "$data"/*.gguf ;;
    safetensors) ls "$data"/*.safetensors "$data"/*/*.safetensors ;;
    safetensors_index) ls "$data"/*/model.safetensors.index.json ;;
    config_json) ls "$data"/*/config.json ;;
    tokenizer_gguf) ls "$root"/tests/data/tokenizers/*.gguf ;;
    tokenize_text) printf '%s\n' "$root"/tests/data/tokenizers/golden_hf.json ;;
  esac
}
dict() {
  case $1 in
    gguf | tokenizer_gguf) echo "-dict=$root/fuzz/gguf.dict" ;;
    cli) echo "-dict=$root/fuzz/corpus/cli.dict" ;;
    h5_* | duo_pattern) ;;
    *) echo "-dict=$root/fuzz/json.dict" ;;
  esac
}

status=0
summary=()
for t in "${targets[@]}"; do
  corpus=$root/fuzz/corpus/$t
  artifacts=$root/fuzz/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  seeds "$t" | while read -r f; do cp -n "$f" "$corpus/" 2>/dev/null || true; done
  if [[ $t == duo_pattern ]]; then  # tiny-model patterns (2 layers x 2 KV heads) and a ragged one
    printf '0.5\t1\n0\t0.25\n' >"$corpus/seed-2x2.tsv"
    printf '1e-300\t2\r\n-3\t 0.75\n\n' >"$corpus/seed-clipped.tsv"
    printf '0.1\t0.2\t0.3\n0.4\n' >"$corpus/seed-ragged.tsv"
  fi
  log=$build/fuzz_$t.log
  before=$(find "$artifacts" -type f | wc -l)
  set +e
  # -max_len covers the largest seed (the tiny GGUF models are ~60 KB, the HDF5 outputs of
  # fuzz_corpus.sh up to ~200 KB); h5_mutate's inputs are edit lists.
  max_len=65536
  case $t in h5_info | h5_merge | h5_bound_dump) max_len=262144 ;; h5_mutate) max_len=4096 ;; esac
  # The HDF5 targets: libhdf5 mallocs buffers of whatever size a damaged header claims (an
  # object header chunk of 16 GB in a 22 KB file) before it finds the read past the end of
  # the file, and never touches them; ckv on such a file stays at ~17 MB and prints one
  # error line, also under `ulimit -v`. Under ASan the same malloc writes shadow memory
  # (2 GB for 16 GB), and libFuzzer stops at any malloc above its limit. So for these
  # targets C mallocs above 1 GB fail (return NULL) as under a memory limit, while ckv's
  # own operator new above 1 GB still aborts as a finding, and -rss_limit_mb still bounds
  # the memory really used. libhdf5's own error paths leak a few bytes (after such a failed
  # malloc); those leaks are suppressed (scripts/sanitize.supp: leak:libhdf5_serial.so),
  # and HDF5 objects ckv leaves open after a command abort the target instead
  # (fuzz_util.h, check_no_open_h5_objects).
  extra=()
  asan=${ASAN_OPTIONS:-}
  lsan=${LSAN_OPTIONS:-}
  case $t in
    h5_*)
      extra=(-malloc_limit_mb=1048576)
      asan=${asan:+$asan:}allocator_may_return_null=1:max_allocation_size_mb=1024
      lsan=${lsan:+$lsan:}suppressions=$root/scripts/sanitize.supp:print_suppressions=0
      ;;
  esac
  # shellcheck disable=SC2046
  ASAN_OPTIONS=$asan LSAN_OPTIONS=$lsan \
  "$build/fuzz/fuzz_$t" "$corpus" -max_total_time="$seconds" -max_len=$max_len -rss_limit_mb=2048 "${extra[@]}" \
    -timeout=10 $(dict "$t") -artifact_prefix="$artifacts/" -print_final_stats=1 \
    >"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  crashes=$(( $(find "$artifacts" -type f | wc -l) - before ))
  ((rc == 0 && crashes == 0)) || status=1
  summary+=("$(printf '%-18s runs %-10s crashes %-3s exit %s  (log %s)' "$t" "${runs:-?}" "$crashes" "$rc" "$log")")
done
printf '%s\n' "${summary[@]}"
exit $status

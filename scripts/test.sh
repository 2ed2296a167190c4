#!/usr/bin/env bash
# Runs every test: sets up (packages, default model, build), then the C++ tests (CTest) and
# the Python tests that need only Debian's h5py/numpy/matplotlib.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKV_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
export CKV_MODEL="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
ctest --test-dir "$build" --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
if compgen -G "$root/tests/python/test_*.py" >/dev/null; then
  CKV_BINARY="$build/ckv" /usr/bin/python3 -m pytest -q "$root/tests/python"
fi

#!/usr/bin/env bash
# Runs every test: sets up (packages, default model, build of everything), then the C++ tests
# (CTest), the Python tests that need only Debian's h5py/numpy/matplotlib, and every example
# of the README and docs/ (scripts/check_examples.py). In CI (CI=true, as CI
# services set it; .ci/run calls this script) the C++ tests then run once more, built with
# ASan + UBSan (scripts/sanitize.sh, in build-asan): on CI's 2 cores without ccache about
# 10-12 minutes to build and 6-8 to test, on top of the ~5 minutes of the normal run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKV_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
export CKV_MODEL="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
ctest --test-dir "$build" --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
if compgen -G "$root/tests/python/test_*.py" >/dev/null; then
  CKV_BINARY="$build/ckv" /usr/bin/python3 -m pytest -q "$root/tests/python"
fi
# Every example of README.md and docs/*.md, as written, in a scratch copy of the repository
# (scripts/check_examples.py lists what it skips: a cluster, an absent model, templates).
/usr/bin/python3 "$root/scripts/check_examples.py" --build "$build"
if [[ ${CI:-} == true ]]; then
  echo "test.sh: CI=true: the C++ tests under ASan + UBSan (scripts/sanitize.sh)"
  "$root/scripts/sanitize.sh"
fi

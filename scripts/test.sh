#!/usr/bin/env bash
# Runs every test: sets up (packages, default model, build of everything), then the C++ tests
# (CTest), the Python tests that need only Debian's h5py/numpy/matplotlib, and every example
# of the README and docs/ (scripts/check_examples.py). In CI (CI=true, as CI
# services set it; .ci/run calls this script) the C++ tests then run once more, built with
# ASan + UBSan (scripts/sanitize.sh, in build-asan), all but the dozen heavy ones that would
# take CI's time (CKV_ASAN_HEAVY=0; the release run above runs them). Measured on 2 cores
# (AMD EPYC, AVX2) without ccache, unity builds (CKV_UNITY): the build of everything 8.5
# minutes, its tests 5.5, the Python package 4, the sanitizer build 15-19 and its tests 6
# (docs/PERF.md "Build and test time").
# The Python package (docs/PYTHON.md) is built and tested after them: a venv .venv over Debian's
# numpy/h5py/pytest with scikit-build-core, nanobind and pandas from PyPI, `pip install .` (the
# extension and the libraries it links, built again position-independent in build/python
# with 2 jobs), then python/tests. CKV_PYTHON=0 skips it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKV_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
export CKV_MODEL="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
ctest --test-dir "$build" --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
if compgen -G "$root/tests/python/test_*.py" >/dev/null; then
  CKV_BINARY="$build/ckv" /usr/bin/python3 -m pytest -q "$root/tests/python"
fi
if [[ ${CKV_PYTHON:-1} != 0 ]]; then
  venv=$root/.venv
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.0" \
    "pandas>=1.5,<2.3"  # ckv.table; pandas 2.2 works with Debian's numpy 1.24
  start=$SECONDS
  (cd "$root" && CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
     "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation .)
  echo "test.sh: the Python package built and installed in $((SECONDS - start)) s"
  CKV_BINARY="$build/ckv" "$venv/bin/python" -m pytest -q "$root/python/tests"
fi
# Every example of README.md and docs/*.md, as written, in a scratch copy of the repository
# (scripts/check_examples.py lists what it skips: a cluster, an absent model, templates).
/usr/bin/python3 "$root/scripts/check_examples.py" --build "$build"
if [[ ${CI:-} == true ]]; then
  echo "test.sh: CI=true: the C++ tests under ASan + UBSan, the heavy ones left out (scripts/sanitize.sh)"
  CKV_ASAN_HEAVY=0 "$root/scripts/sanitize.sh"
fi

#!/usr/bin/env bash
# Builds ckv and its C++ tests with AddressSanitizer + UndefinedBehaviorSanitizer (leak
# detection on) in their own build directory and runs the tests (CTest) under them: every
# test, and every `ckv` run a test starts, then stops at the first invalid memory access,
# leak or undefined behaviour with a report. The Slurm test is left out (it only repeats
# the CLI runs under a real Slurm, and scripts/test.sh runs it).
#   scripts/sanitize.sh [CTEST_ARGS...]        # e.g. -R Merge
#   CKV_ASAN_BUILD_DIR=build-asan  CXX=clang++ CC=clang  CKV_ASAN_JOBS=2
#   CKV_ASAN_HEAVY=0                            # leave out the heavy tests (CI does)
# The heavy tests (`heavy` below) run the default model end to end over and over: each takes
# over 4 s in a release build and 4-13 times that under the sanitizers, together about 40
# minutes of the 2 cores, more than CI has. With CKV_ASAN_HEAVY=0 they are left out; what
# they run (resume after a failed write or a kill, shards and their merge, decoding under
# eviction, the kvpress golden) is run under the sanitizers by the small tests of the same
# suites (ResumeFaults.FileSizeLimit..., ShardBound.ShardsMerge..., MergeTest.*,
# EvalCliTiny.* on the tiny model, CacheEval.*, OutputFaults.*), and in full by the release run of scripts/test.sh.
# The compiler is $CXX/$CC (default: the system's, GCC on Debian). CUDA is off: the
# sanitizers do not instrument device code. Suppressions: scripts/sanitize.supp.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKV_ASAN_BUILD_DIR:-$root/build-asan}
jobs=${CKV_ASAN_JOBS:-$(nproc 2>/dev/null || echo 2)}
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

# Also for the test discovery, which runs the test binary at build time.
export CKV_MODEL=${CKV_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
supp=$root/scripts/sanitize.supp
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Wall and CPU seconds (user + system of every process) of each step: on a shared machine
# the CPU time says what the step costs.
TIMEFORMAT='%R s wall, %U s user + %S s system'
# -O1: the tests run real forward passes; unoptimised sanitizer code makes them far slower.
# -g1: line tables only, all a sanitizer's report prints; it compiles a quarter faster than -g.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g1 $san" \
  -DCMAKE_C_FLAGS_SANITIZE="-O1 -g1 $san" -DCMAKE_EXE_LINKER_FLAGS="$san" -DCKV_CUDA=OFF -DCKV_BENCH=OFF \
  "${launcher[@]}" >/dev/null
echo "sanitize.sh: build"
time cmake --build "$build" -j "$jobs"

heavy=(EvalGolden.GeneratedTokensMatchKvpressPipeline EvalCli.OutputsAgreeWithTheSelection
       ResumeFaults.EvalResumeAfterAFailedWriteEqualsAnUninterruptedRun
       ResumeFaults.MaskResumeAfterAFailedWriteEqualsAnUninterruptedRun
       ResumeFaults.BoundResumeAfterAFailedWriteEqualsAnUninterruptedRun
       ResumeFaults.MergeRefusesAnEvalRecordOutsideItsTokens
       DumpResume.KilledBatchResumesToTheUninterruptedResult
       ShardMask.KilledRunResumesToTheUninterruptedResult ShardMask.ShardsMergeToTheSingleRun
       ShardBound.KilledRunResumesToTheUninterruptedResult DumpCli.FullDiskInALaterRecordResumes
       LinearEngine.DefaultModelIndependentOfThreadsBitForBit)
exclude=()
if [[ ${CKV_ASAN_HEAVY:-1} == 0 ]]; then
  exclude=(-E "^($(IFS='|'; echo "${heavy[*]}"))\$")
  echo "sanitize.sh: CKV_ASAN_HEAVY=0: leaving out ${#heavy[@]} heavy tests (see the top of this script)"
fi
status=0
echo "sanitize.sh: tests"
time ctest --test-dir "$build" --output-on-failure -j "$jobs" -LE slurm "${exclude[@]}" "$@" || status=$?
exit $status

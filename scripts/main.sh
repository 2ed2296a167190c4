#!/usr/bin/env bash
# The main job, end to end on the embedded default model: set up, describe the model, run a
# forward pass over a built-in prompt (greedy next tokens, per-layer statistics), dump the
# built-in prompt's Q/K/V, attention and value norms to out/default.h5 and describe it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKV_BUILD_DIR:-$root/build}
out=${CKV_OUT_DIR:-$root/out}
"$root/scripts/setup.sh"
ckv="$build/ckv"
mkdir -p "$out"
"$ckv" info
"$ckv" forward --chat --generate 16
"$ckv" dump --chat --out "$out/default.h5" --force
"$ckv" info "$out/default.h5"

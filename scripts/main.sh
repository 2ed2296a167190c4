#!/usr/bin/env bash
# The main job, end to end on the embedded default model: set up, describe the model, run a
# forward pass over a built-in prompt (greedy next tokens, per-layer statistics).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKV_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
ckv="$build/ckv"
"$ckv" info
"$ckv" forward --chat --generate 16

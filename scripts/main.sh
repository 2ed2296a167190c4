#!/usr/bin/env bash
# The main job, end to end on the embedded default model: set up; describe the model; a
# forward pass over a built-in prompt (greedy next tokens, per-layer statistics); a dump of
# its Q/K/V, attention and value norms, described; the perturbation analysis (ckv bound:
# Table-9 summary; ckv check: Assumption 3.4); a propagated masking experiment with placebo
# spans (ckv mask); and a Markdown report with the figures, in out/report/report.md.
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
"$ckv" bound --out "$out/bound" --force
"$ckv" check --out "$out/check" --force
"$ckv" mask --span-name answer_evidence --placebo 2 --generate 4 --verify-physical \
  --out "$out/mask.h5" --force
cd "$root"
/usr/bin/python3 -m analysis.report --bound "$out/bound.h5" --check "$out/check.h5" \
  --mask "$out/mask.h5" --dump "$out/default.h5" -o "$out/report"
echo "report: $out/report/report.md"

#!/usr/bin/env bash
# The main job, end to end on the embedded default model: set up; describe the model; a
# forward pass over a built-in chat prompt (greedy next tokens, per-layer statistics); then
# one needle-in-a-haystack record (512 tokens, `ckv niah`) feeds every analysis, so their
# figures can be laid side by side: a dump of its Q/K/V, value norms and last attention
# rows, described; the perturbation analysis (ckv bound: Table-9 summary; ckv check:
# Assumption 3.4); the needle's propagated eviction with placebo spans (ckv mask); snapkv and
# criticalkv(snapkv) selected inside the masked pass at 20% (ckv mask --method, Figure 5);
# answers under eviction with a KV cache on four 512-token NIAH records (ckv eval: accuracy
# against budget, the paper's Figure 2 layout, and log p(answer) change against L1); and a
# Markdown report with the figures, in out/report/report.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKV_BUILD_DIR:-$root/build}
out=${CKV_OUT_DIR:-$root/out}
"$root/scripts/setup.sh"
ckv="$build/ckv"
mkdir -p "$out"
"$ckv" info
"$ckv" forward --chat --generate 16
rec="$out/niah.jsonl"
"$ckv" niah --length 512 --seed 3 --depths 0.5 -o "$rec" --force
"$ckv" dump -i "$rec" --attn-rows last:4 --out "$out/default.h5" --force
"$ckv" info "$out/default.h5"
"$ckv" bound -i "$rec" --out "$out/bound" --force
"$ckv" check -i "$rec" --out "$out/check" --force
"$ckv" mask -i "$rec" --span-name needle --placebo 2 --match-tol 0.35 --seed 1 --generate 4 \
  --verify-physical --out "$out/mask.h5" --force
"$ckv" mask -i "$rec" --method snapkv --budget 0.2 --out "$out/mask_snapkv.h5" --force
"$ckv" mask -i "$rec" --method 'criticalkv(snapkv)' --budget 0.2 --out "$out/mask_criticalkv.h5" --force
"$ckv" niah --length 512 --count 4 --seed 3 -o "$out/niah4.jsonl" --force
"$ckv" eval -i "$out/niah4.jsonl" --methods 'snapkv,criticalkv(snapkv)' --budgets 0.2,0.4 \
  --compress prompt --max-new-tokens 12 --out "$out/eval" --force
cd "$root"
rm -rf "$out/report"        # no figures of an earlier run left beside the new report
/usr/bin/python3 -m analysis.report --bound "$out/bound.h5" --check "$out/check.h5" \
  --mask "$out/mask.h5" --dump "$out/default.h5" \
  --mask-pair "$out/mask_snapkv.h5" "$out/mask_criticalkv.h5" --eval "$out/eval.h5" -o "$out/report"
echo "report: $out/report/report.md"

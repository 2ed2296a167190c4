#!/usr/bin/env bash
# The main job, end to end on the embedded default model: set up (building only build/ckv;
# the tests and benchmarks are built by scripts/test.sh); describe the model; a forward pass
# over a built-in chat prompt (greedy next tokens, per-layer statistics); then one
# needle-in-a-haystack record (512 tokens, `ckv niah`) feeds every analysis, so their
# figures can be laid side by side: a dump of its Q/K/V, value norms and last attention
# rows, described; the perturbation analysis (ckv bound: Table-9 summary; ckv check:
# Assumption 3.4); the needle's propagated eviction with placebo spans (ckv mask); snapkv and
# criticalkv(snapkv) selected inside the masked pass at 20% (ckv mask --method, Figure 5);
# answers under eviction with a KV cache on four 512-token NIAH records (ckv eval: accuracy
# against budget, the paper's Figure 2 layout, and log p(answer) change against L1); and a
# Markdown report with the figures, in out/report/report.md.
#
# Each step starts with a header saying what it runs and what its output shows, and the
# time since the start; with output to a file (not a terminal) each subcommand prints one
# line a record on stderr. The set-up's build log goes to out/setup.log.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CKV_BUILD_DIR:-$root/build}
out=${CKV_OUT_DIR:-$root/out}
ckv="$build/ckv"
start=$SECONDS
steps=12
step=0
header() {  # header TITLE WHAT-IT-SHOWS
  step=$((step + 1))
  local t=$((SECONDS - start))
  printf '\n=== [%d/%d] %s (at %dm%02ds)\n    %s\n' "$step" "$steps" "$1" $((t / 60)) $((t % 60)) "$2"
}
# off a terminal (a log file) each subcommand prints one line a record on stderr: no --progress bar frames

mkdir -p "$out"
header "set-up: Debian packages, the default model, build/ckv" \
  "build log in $out/setup.log; only the CLI is built (scripts/test.sh builds the tests)"
if ! "$root/scripts/setup.sh" --cli >"$out/setup.log" 2>&1; then
  tail -n 30 "$out/setup.log" >&2
  echo "main.sh: the set-up failed; the whole log is $out/setup.log" >&2
  exit 1
fi
grep '^\[setup\]' "$out/setup.log" || true

header "ckv info" "the default model: architecture, tensors, tokenizer"
"$ckv" info
header "ckv forward --chat --generate 16" \
  "a built-in chat prompt: the greedy next tokens and per-layer activation statistics"
"$ckv" forward --chat --generate 16
rec="$out/niah.jsonl"
header "ckv niah: one 512-token needle-in-a-haystack record ($rec)" \
  "the record every analysis below reads: a 7-digit number hidden at half depth"
"$ckv" niah --length 512 --seed 3 --depths 0.5 -o "$rec" --force
header "ckv dump + ckv info of the dump" \
  "Q/K/V, value norms and the last 4 attention rows of every layer, then the file described"
"$ckv" dump -i "$rec" --attn-rows last:4 --out "$out/default.h5" --force
"$ckv" info "$out/default.h5"
header "ckv bound: actual eviction perturbation beside the bounds" \
  "Table 9: per budget, actual L1, CriticalKV's bound and the previous bound, share of heads improved"
"$ckv" bound -i "$rec" --out "$out/bound" --force
header "ckv check: Assumption 3.4 per head" "the share of heads where the assumption holds"
"$ckv" check -i "$rec" --out "$out/check" --force
header "ckv mask --span-name needle --placebo 2" \
  "the needle evicted in every layer beside 2 placebo spans of matched strength; 12 greedy tokens"
"$ckv" mask -i "$rec" --span-name needle --placebo 2 --match-tol 0.35 --seed 1 \
  --generate 12 --verify-physical --out "$out/mask.h5" --force
header "ckv mask --method snapkv --budget 0.2" \
  "snapkv selecting inside the masked pass at 20 %: per-layer perturbation (method snapkv)"
"$ckv" mask -i "$rec" --method snapkv --budget 0.2 --out "$out/mask_snapkv.h5" --force
header "ckv mask --method 'criticalkv(snapkv)' --budget 0.2" \
  "the same for criticalkv(snapkv): compare with the table above (Figure 5 of the report)"
"$ckv" mask -i "$rec" --method 'criticalkv(snapkv)' --budget 0.2 \
  --out "$out/mask_criticalkv.h5" --force
header "ckv niah --count 4 + ckv eval at 20 % and 40 %" \
  "answers decoded with a compressed KV cache: accuracy per method and budget"
"$ckv" niah --length 512 --count 4 --seed 3 -o "$out/niah4.jsonl" --force
"$ckv" eval -i "$out/niah4.jsonl" --methods 'snapkv,criticalkv(snapkv)' \
  --budgets 0.2,0.4 --compress prompt --max-new-tokens 12 --out "$out/eval" --force
header "the report (python3 -m analysis.report)" "what was found, then every figure and table"
cd "$root"
rm -rf "$out/report"        # no figures of an earlier run left beside the new report
/usr/bin/python3 -m analysis.report --bound "$out/bound.h5" --check "$out/check.h5" \
  --mask "$out/mask.h5" --dump "$out/default.h5" \
  --mask-pair "$out/mask_snapkv.h5" "$out/mask_criticalkv.h5" --eval "$out/eval.h5" -o "$out/report" \
  >/dev/null
sed -n '/^## What was found/,/^## /p' "$out/report/report.md" | sed '$d'

t=$((SECONDS - start))
cat <<EOF

=== done in $((t / 60))m$((t % 60))s
    report:   $out/report/report.md (figures in $out/report/figures/, PNG and PDF)
    outputs:  $out/default.h5 (dump), $out/bound.{h5,csv,json}, $out/check.{h5,csv,json},
              $out/mask.h5, $out/mask_snapkv.h5, $out/mask_criticalkv.h5, $out/eval.{h5,csv,json}
    inputs:   $rec, $out/niah4.jsonl
    build:    $ckv (log: $out/setup.log); tests: scripts/test.sh
EOF

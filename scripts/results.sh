#!/usr/bin/env bash
# The question-token protocol (--eval question --compress context, the defaults): `ckv
# bound` and `ckv check` with the default model (SmolLM2-135M-Instruct Q4_1) on the five
# texts of data/texts/ with a factual question each, budgets 2.5%-40%, in the paper's
# snapkv setting (window 32, max pool 7) and kvpress's (64, avg 5), then prints the
# Table 9 / Figure 4 / Figure 6 / Figure 8 tables. docs/RESULTS.md is written from
# scripts/reproduce_paper.sh (the paper's protocol and the sweep of every choice).
#
#   scripts/results.sh                   # CKV=build/ckv OUT=out/results THREADS=2
#   CKV=other-build/ckv OUT=somewhere scripts/results.sh
#   SKIP_RUN=1 scripts/results.sh        # only print the tables from an earlier run's OUT
#
# About 6 minutes on 2 cores. Needs python3 with h5py and numpy (Debian's are enough).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CKV="${CKV:-$ROOT/build/ckv}"
OUT="${OUT:-$ROOT/out/results}"   # out/ is git-ignored
THREADS="${THREADS:-2}"
BUDGETS=0.025,0.05,0.1,0.2,0.4
mkdir -p "$OUT"

if [ -z "${SKIP_RUN:-}" ]; then
  python3 "$ROOT/data/texts/make_texts.py" jsonl "$OUT/texts.jsonl"
  # Paper setting: snapkv window 32 / max pool 7; attn and criticalkv(attn) are Algorithm 1
  # on the evaluation queries' own attention (the paper's analysis setting).
  "$CKV" bound -t "$THREADS" --input "$OUT/texts.jsonl" --budgets "$BUDGETS" --force -o "$OUT/paper" \
    --methods 'attn,criticalkv(attn),snapkv,criticalkv(snapkv),adakv(snapkv),criticalkv(adakv(snapkv))' \
    > "$OUT/paper.txt" 2> "$OUT/paper.err"
  # kvpress's SnapKVPress setting: window 64, average pool 5; the default four methods.
  "$CKV" bound -t "$THREADS" --input "$OUT/texts.jsonl" --budgets "$BUDGETS" --force -o "$OUT/kvpress" \
    --window 64 --pool avg --kernel 5 > "$OUT/kvpress.txt" 2> "$OUT/kvpress.err"
  # Assumption 3.4 (Figure 8): stage 1 of Algorithm 1 (attn), alpha 0.5, and the alpha sweep.
  "$CKV" check -t "$THREADS" --input "$OUT/texts.jsonl" --budgets "$BUDGETS" --alpha 0.25,0.5,0.75 --force \
    -o "$OUT/check" > "$OUT/check.txt" 2> "$OUT/check.err"
  "$CKV" check -t "$THREADS" --input "$OUT/texts.jsonl" --budgets "$BUDGETS" --method snapkv --force \
    -o "$OUT/check_snapkv" > "$OUT/check_snapkv.txt" 2> "$OUT/check_snapkv.err"
fi

echo "== records (tokens of the default model's tokenizer)"
grep '^record' "$OUT/paper.err"
echo
echo "== ckv bound console, paper setting (window 32, max 7)"
sed -n '/^Table 9/,/^Kept entries/p' "$OUT/paper.txt" | grep -v '^Kept entries'
echo "== ckv bound console, kvpress setting (window 64, avg 5)"
sed -n '/^Table 9/,/^Kept entries/p' "$OUT/kvpress.txt" | grep -v '^Kept entries'
echo "== ckv check (stage 1 by attn, then by snapkv)"
grep -v '^  record' "$OUT/check.txt" | grep -v '^ *L[0-9]\|per layer' || true
grep -v '^  record' "$OUT/check_snapkv.txt" | grep -v '^ *L[0-9]\|per layer' || true

# Figure 4/6 split: ties (identical kept sets) apart, the share among non-tied heads,
# per-head means over the records (the paper's "mean per-head perturbation"), and the
# last evaluation query alone (the paper's first decoding token).
python3 - "$OUT/paper.h5" "$OUT/kvpress.h5" <<'EOF'
import sys

import h5py
import numpy as np

for path in sys.argv[1:]:
    f = h5py.File(path, "r")
    names = lambda a: [x.decode() if isinstance(x, bytes) else str(x) for x in f.attrs[a]]
    methods, metrics = names("methods"), names("metrics")
    L1 = metrics.index("L1")
    recs = [f["records"][r] for r in f["records"]]
    budgets = [float(x) for x in __import__("json").loads(f.attrs["settings"])["budgets"].split(",")]
    print(f"\n== {path}: Figure 4/6 statistic split (criticalkv(B) vs B, L1, heads = record x layer x head)")
    print(f"{'method':28s} {'budget':>6} {'lower':>6} {'tied':>6} {'lower|non-tied':>14} {'higher':>6} "
          f"{'med rel':>8} {'last q':>6} {'per-head mean':>13} {'mean L':>8} {'base L':>8}")
    for crit in [m for m in methods if m.startswith("criticalkv(")]:
        base = crit[len("criticalkv("):-1]
        ci, bi = methods.index(crit), methods.index(base)
        tot = {"lower": 0, "tied": 0, "n": 0}
        for b, frac in enumerate(budgets):
            lc, lb, tied, lastc, lastb = [], [], [], [], []
            for r in recs:
                mm, mq, km = r["metrics_mean"], r["metrics"], r["kept_mask"]
                c_ = mm[ci, b, :, :, L1]
                group = c_.shape[1] // km.shape[3]
                same = (km[ci, b] == km[bi, b]).all(axis=-1)  # [layer, kv_head]
                lc.append(c_); lb.append(mm[bi, b, :, :, L1]); tied.append(np.repeat(same, group, axis=1))
                lastc.append(mq[ci, b, :, :, -1, L1]); lastb.append(mq[bi, b, :, :, -1, L1])
            lc, lb, tied = np.stack(lc), np.stack(lb), np.stack(tied)  # [record, layer, head]
            lower = lc < lb
            nt = ~tied
            rel = (lc - lb) / lb
            head_mean_lower = np.mean(lc.mean(axis=0) < lb.mean(axis=0))
            tot["lower"] += lower.sum(); tot["tied"] += tied.sum(); tot["n"] += lower.size
            print(f"{crit:28s} {100*frac:5.1f}% {lower.mean():6.1%} {tied.mean():6.1%} "
                  f"{(lower[nt].mean() if nt.any() else float('nan')):14.1%} {np.mean(lc > lb):6.1%} "
                  f"{(np.median(rel[nt]) if nt.any() else 0):+8.2%} {np.mean(np.stack(lastc) < np.stack(lastb)):6.1%} "
                  f"{head_mean_lower:13.1%} {lc.mean():8.3g} {lb.mean():8.3g}")
        n, lo, ti = tot["n"], tot["lower"], tot["tied"]
        print(f"{crit:28s} {'all':>6} {lo/n:6.1%} {ti/n:6.1%} {(lo/(n-ti) if n > ti else float('nan')):14.1%}")
EOF

# Figure 8: Assumption 3.4 per budget, overall and without layer 0 (the paper's exceptions
# are first-layer heads), from check.json (S1 >= 1/2 at every evaluation query).
python3 - "$OUT/check.json" "$OUT/check_snapkv.json" <<'EOF2'
import json
import sys

for path in sys.argv[1:]:
    j = json.load(open(path))
    print(f"\n== {path}: Figure 8 (share of heads with S1 >= 1/2), stage 1 by {j['settings'].get('method', 'attn')}")
    print(f"{'alpha':>6} {'budget':>8} {'all layers':>11} {'layers >= 1':>12}")
    budgets = j["settings"]["budgets"].split(",")
    for r in j["results"]:
        per = r["per_layer"]
        rest = [f for l, f in per.items() if l != "0"]
        no0 = sum(rest) / len(rest) if rest else float("nan")
        bi = [x["budget"] for x in j["results"] if x["alpha"] == r["alpha"]].index(r["budget"])
        print(f"{r['alpha']:6g} {100 * float(budgets[bi]):7.1f}% {r['fraction_holds']:11.2%} {no0:12.2%}")
EOF2

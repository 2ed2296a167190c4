#!/usr/bin/env bash
# The accuracy table of docs/RESULTS.md ("Answers under eviction"): `ckv eval` on NIAH
# records of the default model (SmolLM2-135M-Instruct Q4_1) at 1K, 2K and 4K tokens, snapkv,
# adakv(snapkv) and their criticalkv versions at 5-40 % budgets, with the paper's protocol
# (--compress prompt: the question is inside the snapkv window; kvpress's --compress context
# is question-agnostic and loses the needle at every budget), then prints the tables.
#
#   scripts/eval_results.sh                         # CKV=build/ckv OUT=out/eval THREADS=2 COUNT=100
#   COUNT=20 LENGTHS="1024 2048" scripts/eval_results.sh
#   SHARDS=4 scripts/eval_results.sh                # 4 shards one after the other (or run them as a
#                                                   # Slurm array: --shard i/N), then ckv merge
#   SKIP_RUN=1 scripts/eval_results.sh              # only print the tables of an earlier run
#
# Resumable: an interrupted run continues with the same command (--resume).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CKV="${CKV:-$ROOT/build/ckv}"
OUT="${OUT:-$ROOT/out/eval}"   # out/ is git-ignored
THREADS="${THREADS:-2}"
COUNT="${COUNT:-100}"
LENGTHS="${LENGTHS:-1024 2048 4096}"
SHARDS="${SHARDS:-1}"
BUDGETS=0.05,0.1,0.2,0.4
METHODS='snapkv,adakv(snapkv),criticalkv(snapkv),criticalkv(adakv(snapkv))'
mkdir -p "$OUT"

for len in $LENGTHS; do
  if [ -z "${SKIP_RUN:-}" ]; then
    "$CKV" niah -q --length "$len" --count "$COUNT" --seed 11 -o "$OUT/niah_$len.jsonl" --force
    shards=()
    for ((i = 0; i < SHARDS; i++)); do
      out="$OUT/eval_${len}_s$i"
      [ "$SHARDS" = 1 ] && out="$OUT/eval_$len"
      resume=--force
      [ -e "$out.h5" ] || [ -e "$(dirname "$out")/.$(basename "$out").h5.partial" ] && resume=--resume
      "$CKV" eval -q -t "$THREADS" -i "$OUT/niah_$len.jsonl" --methods "$METHODS" --budgets "$BUDGETS" \
        --compress prompt --max-new-tokens 16 --shard "$i/$SHARDS" -o "$out" "$resume"
      shards+=("$out.h5")
    done
    [ "$SHARDS" = 1 ] || "$CKV" merge -q "$OUT/eval_$len" "${shards[@]}" --force
  fi
  echo "== $len tokens, $COUNT records"
  python3 - "$OUT/eval_$len.json" "$OUT/eval_$len.csv" <<'EOF'
import csv, json, sys
j = json.load(open(sys.argv[1]))


def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(v):
        k = i
        while k + 1 < len(v) and v[order[k + 1]] == v[order[i]]:
            k += 1
        for m in range(i, k + 1):
            r[order[m]] = (i + k) / 2 + 1
        i = k + 1
    return r


def spearman(x, y):
    if len(x) < 3:
        return None
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return None if sxx == 0 or syy == 0 else sxy / (sxx * syy) ** 0.5


# Within one method and budget: per record, mean L1 against the change of log p(answer).
pairs = {}
for r in csv.DictReader(open(sys.argv[2], newline="")):
    if r["method"] != "full" and r["logp_answer"] and r["logp_answer_full"]:
        pairs.setdefault((r["method"], float(r["fraction"])), []).append(
            (float(r["mean_l1"]), float(r["logp_answer"]) - float(r["logp_answer_full"])))
rows = j["by_method_budget"]
full = next(r for r in rows if r["method"] == "full")
budgets = sorted({r["fraction"] for r in rows if r["method"] != "full"})
methods = list(dict.fromkeys(r["method"] for r in rows if r["method"] != "full"))
cell = {(r["method"], r["fraction"]): r for r in rows}
print(f"| method | " + " | ".join(f"{100*b:g} %" for b in budgets) + " | Spearman(L1, Δlog p) |")
print("|---|" + "---:|" * (len(budgets) + 1))
print(f"| full cache | {full['accuracy']:.2f} |" + " |" * len(budgets))
for m in methods:
    rho = j["correlation"].get(m, {}).get("spearman_l1_vs_delta_logp")
    print(f"| {m} | " + " | ".join(f"{cell[(m, b)]['accuracy']:.2f}" for b in budgets) +
          f" | {'n/a' if rho is None else f'{rho:+.2f}'} |")
print()
print("Spearman(mean L1, Δlog p(answer)) over the records, per budget:")
for m in methods:
    rhos = [spearman(*zip(*pairs[(m, b)])) if (m, b) in pairs else None for b in budgets]
    print(f"  {m}: " + ", ".join(f"{100*b:g}% " + ("n/a" if r is None else f"{r:+.2f}") for b, r in zip(budgets, rhos)))
print("mean L1 at the first decoded token:")
for m in methods:
    print(f"  {m}: " + ", ".join(f"{100*b:g}% {cell[(m, b)]['mean_l1']:.2f}" for b in budgets))
EOF
done

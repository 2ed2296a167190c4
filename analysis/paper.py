"""The protocol sweep beside the paper's numbers (Table 9, Figures 4 and 6), from `ckv bound` runs
that differ only in --eval / --compress (scripts/reproduce_paper.sh makes them):

    /usr/bin/python3 -m analysis.paper RUN.h5 [RUN.h5 ...] [--budgets 20%,40%] [--json OUT.json]

For every file (its `eval` and `compress` settings), every nu_min reading (all four are
columns of every bound file: theta_rel_all, ..._no_sink, ..._stage2, ..._stage2_partial;
docs/BOUND.md) and every criticalkv(B) vs B pair, one row: at each budget Actual L, Our
bound theta_hat, Prev. bound theta_rel under that reading and Ratio, all over the heads
where both methods' S1 >= 1/2 (their count), and Figure 4's share of heads whose mean L over
records is lowered (the paper's statistic) with the per-record share beside it. The
paper's row (Llama-3.1-8B, MultiNews, docs/MATH.md §5) heads the table. Then, from the first
file, what no protocol choice changes (model_facts): where the smallest nu sits, nu_min / C,
and Figure 6 (the relative L reduction and the share of heads lowered, per budget).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from .ckv_reader import BoundFile, SchemaError, open_ckv

READINGS = ["all", "no-sink", "stage2", "stage2-partial"]
BOUND_READINGS = {"all", "stage2-partial"}  # readings that are upper bounds of theta_hat
# docs/MATH.md §5: Table 9 (20 %, 40 %) and Figure 4 (20 %), Llama-3.1-8B on MultiNews.
PAPER = {"20%": {"actual": 0.70, "our": 3.21, "prev": 4.65, "ratio": 0.690},
         "40%": {"actual": 0.28, "our": 1.43, "prev": 2.64, "ratio": 0.542},
         "figure4": 0.92}


def _below(f: BoundFile, method: int, budget: int, rel: int, hat: int, s1: int, c: int) -> float:
    """Share of the (record, layer, head, query) of `method` where S1 >= 1/2 and theta_rel
    under a reading is below the same selection's theta_hat (beyond rounding): 0 for a
    reading that is an upper bound (docs/MATH.md §3). Per query, since S1 >= 1/2 on average over
    a head's queries does not make the bound hold at each."""
    q = np.concatenate([r.metrics[method, budget].reshape(-1, r.metrics.shape[-1]) for r in f.records])
    ok = q[:, s1] >= 0.5
    if not ok.any():
        return float("nan")
    return float(np.mean(q[ok, rel] < q[ok, hat] - 1e-9 * q[ok, c]))


def sweep_rows(f: BoundFile, budgets=("20%", "40%")) -> list:
    """One dict per (nu_min reading, criticalkv pair) of one bound file."""
    labels = f.budget_labels
    ix = f.metric_index
    mm = np.stack([r.metrics_mean for r in f.records])   # [rec, method, budget, layer, head, metric]
    rows = []
    for crit, base in f.base_pairs:
        ci, bi_ = f.method_index(crit), f.method_index(base)
        for reading in READINGS:
            row = {"eval": f.settings.get("eval", "question"), "compress": f.settings.get("compress", "context"),
                   "nu_min": reading, "is_bound": reading in BOUND_READINGS, "method": crit, "base": base,
                   "records": len(f.records), "budgets": {}}
            for label in budgets:
                if label not in labels:
                    continue
                b = labels.index(label)
                c, p = mm[:, ci, b], mm[:, bi_, b]          # [rec, layer, head, metric]
                both = (c[..., ix("S1")] >= 0.5) & (p[..., ix("S1")] >= 0.5)
                n = int(both.sum())
                mean = (lambda x: float(x[both].mean())) if n else (lambda x: float("nan"))
                prev_col = "theta_rel_" + reading.replace("-", "_")
                our, prev = mean(c[..., ix("theta_hat")]), mean(p[..., ix(prev_col)])
                lc, lb = c[..., ix("L1")], p[..., ix("L1")]
                # nu_min_over_C is stored for the run's own --nu-min reading only.
                own = f.settings.get("nu_min", "all") == reading
                row["budgets"][label] = {
                    "heads": n, "actual": mean(lc), "our": our, "prev": prev,
                    "ratio": our / prev if prev else float("nan"),
                    "prev_below_our": _below(f, bi_, b, ix(prev_col), ix("theta_hat"), ix("S1"), ix("C")),
                    "nu_min_over_C": mean(p[..., ix("nu_min_over_C")]) if own else None,
                    "below_window": f.below_window(b),
                    "fig4_head_means": float(np.mean(lc.mean(axis=0) < lb.mean(axis=0))),
                    "fig4_per_record": float(np.mean(lc < lb)),
                }
            rows.append(row)
    return rows


def model_facts(f: BoundFile, budget="20%") -> dict:
    """What no protocol choice changes, from one bound file at one budget, per (record, layer,
    head) of each criticalkv pair's base: the share whose smallest nu over all keys is
    position 0 (theta_rel_all above theta_rel_no_sink: the sink), overall and in the upper
    half of the layers; the mean nu_min / C over all keys (when the run's reading is `all`);
    and Figure 6 (1 - mean L(crit) / mean L(base) and the share of heads whose mean L is
    lowered, per budget)."""
    ix = f.metric_index
    mm = np.stack([r.metrics_mean for r in f.records])   # [rec, method, budget, layer, head, metric]
    b = f.budget_labels.index(budget)
    out = {"budget": budget, "pairs": {}}
    L = f.mean_metric("L1")                              # [method, budget, layer, head]
    half = len(f.layers) // 2
    for crit, base in f.base_pairs:
        x = mm[:, f.method_index(base), b]               # [rec, layer, head, metric]
        sink = x[..., ix("theta_rel_all")] > x[..., ix("theta_rel_no_sink")] + 1e-9 * x[..., ix("C")]
        lc, lb = L[f.method_index(crit)], L[f.method_index(base)]
        out["pairs"][f"{crit} vs {base}"] = {
            "sink_is_nu_min": float(sink.mean()), "sink_is_nu_min_upper_layers": float(sink[:, half:].mean()),
            "upper_layers_from": int(f.layers[half]),
            "nu_min_over_C": float(x[..., ix("nu_min_over_C")].mean())
            if f.settings.get("nu_min", "all") == "all" else None,
            "figure6": {lab: {"relative_reduction": float(1 - lc[i].mean() / lb[i].mean()),
                              "head_means_lowered": float(np.mean(lc[i] < lb[i]))}
                        for i, lab in enumerate(f.budget_labels)}}
    return out


def facts_markdown(facts: dict) -> str:
    lines = []
    for pair, x in facts["pairs"].items():
        lines.append(f"{pair}, budget {facts['budget']}: the sink (position 0) holds the smallest nu of all keys in "
                     f"{_pct(x['sink_is_nu_min'])} of heads ({_pct(x['sink_is_nu_min_upper_layers'])} from layer "
                     f"{x['upper_layers_from']} on); mean nu_min / C = {_num(x['nu_min_over_C'])}")
        lines.append("  Figure 6: " + ", ".join(
            f"{lab}: criticalkv mean L {100 * -v['relative_reduction']:+.1f}% vs base, {_pct(v['head_means_lowered'])} of heads lowered"
            for lab, v in x["figure6"].items()))
    return "\n".join(lines) + "\n"


def _pct(x):
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.1f}%"


def _num(x):
    return "–" if x is None or np.isnan(x) else f"{x:.4g}"


def to_markdown(rows, budgets=("20%", "40%")) -> str:
    head = ["eval", "compress", "nu_min", "pair"]
    for b in budgets:
        head += [f"{b} heads", f"{b} Actual", f"{b} Our", f"{b} Prev", f"{b} Ratio"]
    head += ["Prev<θ̂ (20%, queries)", "Fig. 4 head means (20%)", "per record (20%)"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 4 else "---:" for i in range(len(head))) + "|"]
    paper = ["first-decode", "prompt", "(unstated)", "paper, Llama-3.1-8B"]
    for b in budgets:
        p = PAPER.get(b)
        paper += (["", _num(p["actual"]), _num(p["our"]), _num(p["prev"]), _pct(p["ratio"])] if p else [""] * 5)
    paper += ["", _pct(PAPER["figure4"]), ""]
    out.append("| " + " | ".join(paper) + " |")
    for r in rows:
        cells = [r["eval"], r["compress"], r["nu_min"] + ("" if r["is_bound"] else " (not a bound)"),
                 f"{r['method']} vs {r['base']}"]
        for b in budgets:
            x = r["budgets"].get(b)
            if x is None:
                cells += ["–"] * 5
                continue
            mark = "*" if x["below_window"] else ""
            cells += [f"{x['heads']}{mark}", _num(x["actual"]), _num(x["our"]), _num(x["prev"]), _pct(x["ratio"])]
        x = r["budgets"].get("20%", {})
        cells += [_pct(x.get("prev_below_our")), _pct(x.get("fig4_head_means")), _pct(x.get("fig4_per_record"))]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m analysis.paper", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+")
    p.add_argument("--budgets", default="20%,40%")
    p.add_argument("--json", default=None, help="also write the rows as JSON")
    a = p.parse_args(argv)
    budgets = tuple(a.budgets.split(","))
    rows, facts = [], None
    try:
        for path in a.inputs:
            f = open_ckv(path)
            if f.kind != "bound":
                raise ValueError(f"{path}: a `ckv bound` output is needed (kind {f.kind})")
            rows += sweep_rows(f, budgets)
            if facts is None:
                facts = model_facts(f, budgets[0])
    except (SchemaError, KeyError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(to_markdown(rows, budgets))
    print(f"Properties of the model (from {a.inputs[0]}):")
    print(facts_markdown(facts))
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"rows": rows, "model": facts}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

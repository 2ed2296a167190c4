"""Table 9 (bound tightness) and per-head statistics from a `ckv bound` output, as Markdown
and LaTeX:

    /usr/bin/python3 -m analysis.tables bound.h5 [--method 'criticalkv(snapkv)'] [--latex]

Table 9 (MATH.md §3, docs/BOUND.md): per budget, the actual L1 of the criticalkv method
(mean over records × layers × heads, each the mean over evaluation queries), "Our bound"
theta_hat of criticalkv and "Prev. bound" theta_rel of its base, both averaged over the
heads where S1 ≥ 1/2 (each method's own S1), Ratio = Our/Prev, the share of heads where L
is below the base's and the share where S1 ≥ 1/2.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from .ckv_reader import BoundFile, open_ckv
from .figures import _crit_pair

TABLE9_COLUMNS = ["budget", "kept", "actual_L1", "our_bound_theta_hat", "prev_bound_theta_rel",
                  "ratio", "share_L_below_base", "share_S1_holds"]


def table9(f: BoundFile, method=None) -> tuple:
    """(crit, base, rows): one dict per budget with TABLE9_COLUMNS."""
    crit, base = _crit_pair(f, method)
    ci, bi_ = f.method_index(crit), f.method_index(base)
    ix = f.metric_index
    mm = np.stack([r.metrics_mean for r in f.records])   # [rec, method, budget, layer, head, metric]
    rows = []
    for b, label in enumerate(f.budget_labels):
        c, p = mm[:, ci, b], mm[:, bi_, b]                 # [rec, layer, head, metric]
        ok_c, ok_p = c[..., ix("S1")] >= 0.5, p[..., ix("S1")] >= 0.5
        ours = float(c[..., ix("theta_hat")][ok_c].mean()) if ok_c.any() else float("nan")
        prev = float(p[..., ix("theta_rel")][ok_p].mean()) if ok_p.any() else float("nan")
        kept = sorted({int(r.budgets[b]) for r in f.records})
        rows.append({
            "budget": label, "kept": "/".join(map(str, kept)),
            "actual_L1": float(c[..., ix("L1")].mean()),
            "our_bound_theta_hat": ours, "prev_bound_theta_rel": prev,
            "ratio": ours / prev if prev else float("nan"),
            "share_L_below_base": float(np.mean(c[..., ix("L1")] < p[..., ix("L1")])),
            "share_S1_holds": float(np.mean(ok_c)),
        })
    return crit, base, rows


def head_stats(f: BoundFile, method=None, budget_index=None) -> list:
    """Per-layer statistics of the per-head reduction L(base) − L(crit): one dict per layer."""
    from .figures import _budget_index
    crit, base = _crit_pair(f, method)
    bi = _budget_index(f, budget_index)
    L = f.mean_metric("L1")
    red = L[f.method_index(base), bi] - L[f.method_index(crit), bi]
    return [{"layer": int(l), "mean_reduction": float(r.mean()), "min": float(r.min()),
             "max": float(r.max()), "share_improved": float(np.mean(r > 0))}
            for l, r in zip(f.layers, red)]


HEAD_COLUMNS = ["layer", "mean_reduction", "min", "max", "share_improved"]
HEAD_HEADERS = {"layer": "Layer", "mean_reduction": "Mean L(base) − L(crit)", "min": "Min",
                "max": "Max", "share_improved": "Heads improved"}


def _fmt(v, col):
    if isinstance(v, (str, int)):
        return str(v)
    if np.isnan(v):
        return "–"
    if col in ("ratio",) or col.startswith("share"):
        return f"{100 * v:.1f}%"
    return f"{v:.4g}"


HEADERS = {"budget": "Budget", "kept": "Kept", "actual_L1": "Actual L1",
           "our_bound_theta_hat": "Our bound θ̂", "prev_bound_theta_rel": "Prev. bound θ_rel",
           "ratio": "Ratio", "share_L_below_base": "L < base", "share_S1_holds": "S1 ≥ 1/2"}
LATEX_HEADERS = {"budget": "Budget", "kept": "Kept", "actual_L1": "Actual $L_1$",
                 "our_bound_theta_hat": r"Our bound $\hat\theta$",
                 "prev_bound_theta_rel": r"Prev.\ bound $\theta_{\mathrm{rel}}$",
                 "ratio": "Ratio", "share_L_below_base": r"$L <$ base",
                 "share_S1_holds": r"$S_1 \ge 1/2$"}


def to_markdown(rows, columns=TABLE9_COLUMNS, headers=HEADERS) -> str:
    out = ["| " + " | ".join(headers.get(c, c) for c in columns) + " |",
           "|" + "|".join("---" if c in ("budget", "layer") else "---:" for c in columns) + "|"]
    for r in rows:
        out.append("| " + " | ".join(_fmt(r[c], c) for c in columns) + " |")
    return "\n".join(out) + "\n"


def to_latex(rows, columns=TABLE9_COLUMNS, headers=LATEX_HEADERS, caption="") -> str:
    out = [r"\begin{table}[t]", r"\centering", r"\begin{tabular}{l" + "r" * (len(columns) - 1) + "}",
           r"\toprule", " & ".join(headers.get(c, c) for c in columns) + r" \\", r"\midrule"]
    for r in rows:
        out.append(" & ".join(_fmt(r[c], c).replace("%", r"\%").replace("–", "--")
                              for c in columns) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        out.append(r"\caption{" + caption.replace("_", r"\_").replace("%", r"\%") + "}")
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m analysis.tables", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("--method", default=None)
    p.add_argument("--latex", action="store_true")
    a = p.parse_args(argv)
    try:
        f = open_ckv(a.input)
        crit, base, rows = table9(f, a.method)
    except (KeyError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    cap = f"Table 9: {crit} vs {base}, {f.model}, {f.data}; L1"
    print(to_latex(rows, caption=cap) if a.latex else f"{cap}\n\n" + to_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

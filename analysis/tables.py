"""Table 9 (bound tightness) and per-head statistics from a `ckv bound` output, and the
perturbation along the answer from a `ckv eval --track-steps` output, as Markdown and LaTeX:

    /usr/bin/python3 -m analysis.tables bound.h5 [--method 'criticalkv(snapkv)'] [--latex]
    /usr/bin/python3 -m analysis.tables steps.h5 [--layers all|global|local|0,5,11]
    /usr/bin/python3 -m analysis.tables bound.h5 --mass
    /usr/bin/python3 -m analysis.tables bound.h5 --swaps dump.h5

Along the answer (docs/EVAL.md "Along the answer"): for each criticalkv(X) beside its X, per
budget, the mean L1 at the first decoded token and over steps 2..n (n: the steps every record
reaches), at how many of those n steps criticalkv's mean is below its base's, and the mean
next-token KL over the n steps. `--layers global` / `local` keep the layers the file marks
as full-attention / sliding-window (its `sliding_layers` attribute; Gemma 3's local layers
hold only their window, so their L1 is not comparable with the global layers').

Table 9 (docs/MATH.md §3, docs/BOUND.md): per budget, over the (record, layer, head) where both
methods' S1 ≥ 1/2 (their count `heads`), the actual L1 of the criticalkv method (each head
the mean over evaluation queries), "Our bound" theta_hat of criticalkv and "Prev. bound"
theta_rel of its base, Ratio = Our/Prev; then Figure 4's share of heads whose mean L over
records is below the base's (the paper's statistic), the per-record share, and the share
where criticalkv's S1 ≥ 1/2.

Kept mass (`--mass`, a bound file): for each criticalkv(X) beside its X, per budget and per
group of layers (global and local where the file has sliding layers, else all), the mean L1
and the mean kept attention mass S (the evaluation queries' attention on the kept entries,
before renormalisation) of both, the share of (record, layer, head) where criticalkv keeps
less of it, the correlation over them of criticalkv's extra L1 with the mass it gives up,
the mean C = sum_i A_i nu_i (docs/MATH.md §3) and the mean renormalisation term (1/S - 1) C, the
part of the bound theta that the kept entries' rescaling by 1/S contributes, and the mean theta
itself, which (unlike theta_hat's S1) sees the mass the selection keeps (docs/RESULTS.md
"Gemma 3 270M along the answer").

Swaps (`--swaps DUMP`, a bound file and a `ckv dump --what attn,nu` of the same records with
the question's attention rows): for each criticalkv(X) beside its X, per budget and layer
group, the entries one keeps and the other does not, per KV head: how many, the question's
attention on X's own (kept by X only) and on criticalkv's own (kept by criticalkv only),
their mean nu (nu_l1) and their A * nu, A the dump's attention averaged over the question's
rows and the KV head's query heads (GQA's mean, as the selections').
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from .ckv_reader import BoundFile, DumpFile, EvalFile, open_ckv
from .figures import _crit_pair
from .figures_eval import along_answer

TABLE9_COLUMNS = ["budget", "kept", "heads", "actual_L1", "our_bound_theta_hat", "prev_bound_theta_rel",
                  "ratio", "share_head_means_L_below_base", "share_L_below_base", "share_S1_holds"]


def table9(f: BoundFile, method=None) -> tuple:
    """(crit, base, rows): one dict per budget with TABLE9_COLUMNS.

    Actual, Our and Prev are over one population: the (record, layer, head) where both
    methods' S1 >= 1/2, `heads` of them. The Figure 4 share is the paper's, over each
    (layer, head)'s mean L over records; the per-record share is beside it. A budget below
    the snapkv window in some record is marked '*'."""
    crit, base = _crit_pair(f, method)
    ci, bi_ = f.method_index(crit), f.method_index(base)
    ix = f.metric_index
    mm = np.stack([r.metrics_mean for r in f.records])   # [rec, method, budget, layer, head, metric]
    rows = []
    for b, label in enumerate(f.budget_labels):
        c, p = mm[:, ci, b], mm[:, bi_, b]                 # [rec, layer, head, metric]
        both = (c[..., ix("S1")] >= 0.5) & (p[..., ix("S1")] >= 0.5)
        n = int(both.sum())
        mean = (lambda x: float(x[both].mean())) if n else (lambda x: float("nan"))
        ours, prev = mean(c[..., ix("theta_hat")]), mean(p[..., ix("theta_rel")])
        kept = sorted({int(r.budgets[b]) for r in f.records})
        lc, lb = c[..., ix("L1")], p[..., ix("L1")]
        rows.append({
            "budget": label + ("*" if f.below_window(b) else ""), "kept": "/".join(map(str, kept)),
            "heads": n, "actual_L1": mean(lc),
            "our_bound_theta_hat": ours, "prev_bound_theta_rel": prev,
            "ratio": ours / prev if prev else float("nan"),
            "share_head_means_L_below_base": float(np.mean(lc.mean(axis=0) < lb.mean(axis=0))),
            "share_L_below_base": float(np.mean(lc < lb)),
            "share_S1_holds": float(np.mean(c[..., ix("S1")] >= 0.5)),
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


ALONG_COLUMNS = ["budget", "base", "l1_step1", "l1_later", "steps_crit_lower", "kl_steps"]
ALONG_HEADERS = {"budget": "budget", "base": "criticalkv of", "l1_step1": "L1 step 1: base → crit",
                 "l1_later": "L1 steps 2–n (mean): base → crit", "steps_crit_lower": "steps where crit < base",
                 "kl_steps": "KL over steps: base → crit"}


MASS_COLUMNS = ["budget", "base", "layers", "heads", "l1", "kept_mass", "share_crit_less_mass", "corr", "c",
                "renorm", "theta"]
MASS_HEADERS = {"budget": "budget", "base": "criticalkv of", "layers": "layers", "heads": "(record, layer, head)",
                "l1": "mean L1: base → crit", "kept_mass": "mean S: base → crit",
                "share_crit_less_mass": "crit keeps less mass", "corr": "corr(ΔL1, S lost)",
                "c": "mean C", "renorm": "mean (1/S − 1)·C: base → crit", "theta": "mean θ: base → crit"}


def _layer_groups(f: BoundFile) -> list:
    """[(name, positions in f.layers)]: global and local where the file has sliding layers
    (empty groups left out), else all."""
    sliding = set(f.sliding_layers)
    layers = [int(l) for l in f.layers]
    if not sliding:
        return [("all", list(range(len(layers))))]
    groups = [(name, [i for i, l in enumerate(layers) if (l in sliding) == (name == "local")])
              for name in ("global", "local")]
    return [(name, idx) for name, idx in groups if idx]


def mass_pairs(f: BoundFile) -> list:
    """One dict per (criticalkv pair, budget, layer group) with MASS_COLUMNS."""
    pairs = f.base_pairs
    if not pairs:
        raise ValueError(f"{f.path}: no criticalkv(X) beside its X among {', '.join(f.methods)}")
    groups = _layer_groups(f)
    mm = np.stack([r.metrics_mean for r in f.records])  # [rec, method, budget, layer, head, metric]
    l1, mass, big_c, theta = (f.metric_index(n) for n in ("L1", "S", "C", "theta"))
    rows = []
    for crit, base in pairs:
        ci, bi_ = f.method_index(crit), f.method_index(base)
        for b, label in enumerate(f.budget_labels):
            for name, idx in groups:
                c, p = mm[:, ci, b][:, idx], mm[:, bi_, b][:, idx]  # [rec, layer, head, metric]
                extra, lost = (c[..., l1] - p[..., l1]).ravel(), (p[..., mass] - c[..., mass]).ravel()
                corr = (float(np.corrcoef(extra, lost)[0, 1])
                        if extra.size > 1 and extra.std() > 0 and lost.std() > 0 else float("nan"))
                lb, lc = float(p[..., l1].mean()), float(c[..., l1].mean())
                rows.append({"budget": label, "base": base, "layers": f"{name} ({len(idx)})", "heads": int(extra.size),
                             "l1": f"{lb:.2f} → {lc:.2f} ({100 * (lc / lb - 1):+.1f} %)",
                             "kept_mass": f"{float(p[..., mass].mean()):.4f} → {float(c[..., mass].mean()):.4f}",
                             "share_crit_less_mass": float(np.mean(lost > 0)), "corr": f"{corr:.2f}",
                             "c": float(p[..., big_c].mean()),
                             "renorm": " → ".join(f"{float(((1 / x[..., mass] - 1) * x[..., big_c]).mean()):.2f}"
                                                  for x in (p, c)),
                             "theta": f"{float(p[..., theta].mean()):.2f} → {float(c[..., theta].mean()):.2f}"})
    return rows


SWAP_COLUMNS = ["budget", "base", "layers", "swapped", "mass", "nu", "a_nu"]
SWAP_HEADERS = {"budget": "budget", "base": "criticalkv of", "layers": "layers",
                "swapped": "entries swapped per KV head", "mass": "question's A: base's own → crit's own",
                "nu": "mean ν: base's own, crit's own", "a_nu": "Σ A·ν: base's own → crit's own"}


def swap_pairs(f: BoundFile, dump: DumpFile) -> list:
    """One dict per (criticalkv pair, budget, layer group) with SWAP_COLUMNS: the entries
    that criticalkv(X) and X disagree on, read against the question's attention in `dump`."""
    pairs = f.base_pairs
    if not pairs:
        raise ValueError(f"{f.path}: no criticalkv(X) beside its X among {', '.join(f.methods)}")
    if dump.attrs.get("model_sha256") != f.attrs.get("model_sha256"):
        raise ValueError(f"{dump.path}: another model than {f.path}'s")
    layers = [int(l) for l in f.layers]
    group_of = {i: (name, len(idx)) for name, idx in _layer_groups(f) for i in idx}
    n_kv = int(f.records[0].kept_count.shape[-1])
    acc = {}  # (pair, budget, group) -> lists over (record, layer, kv head)
    for rec in f.records:
        if rec.id not in dump.record_ids:
            raise ValueError(f"{dump.path}: no record {rec.id} (dump the bound's input)")
        c = rec.context_end
        rows = dump.array(rec.id, "attn_rows")
        question = rows >= rec.question_start
        if not question.any():
            raise ValueError(f"{dump.path}: record {rec.id} has no attention row of the question "
                             f"(positions {rec.question_start} on; dump with --attn-rows window)")
        kept = f.kept_mask(rec.id).astype(bool)  # [method, budget, layer, kv, c]
        for li, layer in enumerate(layers):
            attn = dump.array(rec.id, "attn", layer).astype(np.float64)[:, question, :c].mean(axis=1)
            nu = dump.array(rec.id, "nu_l1", layer).astype(np.float64)[:, :c]
            group = attn.shape[0] // n_kv
            name = group_of[li]
            for crit, base in pairs:
                ci, bi_ = f.method_index(crit), f.method_index(base)
                for b in range(len(f.budget_labels)):
                    o = acc.setdefault((base, b, name), {k: [] for k in ("n", "mb", "mc", "nb", "nc", "ab", "ac")})
                    for g in range(n_kv):
                        a = attn[g * group:(g + 1) * group].mean(axis=0)
                        v = nu[g * group:(g + 1) * group].mean(axis=0)
                        own_b = kept[bi_, b, li, g] & ~kept[ci, b, li, g]
                        own_c = kept[ci, b, li, g] & ~kept[bi_, b, li, g]
                        o["n"].append(own_b.sum())
                        o["mb"].append(a[own_b].sum())
                        o["mc"].append(a[own_c].sum())
                        o["nb"].append(v[own_b].mean() if own_b.any() else np.nan)
                        o["nc"].append(v[own_c].mean() if own_c.any() else np.nan)
                        o["ab"].append((a[own_b] * v[own_b]).sum())
                        o["ac"].append((a[own_c] * v[own_c]).sum())
    rows_out = []
    for (base, b, (name, count)), o in sorted(acc.items()):
        m = {k: float(np.nanmean(x)) for k, x in o.items()}
        rows_out.append({"budget": f.budget_labels[b], "base": base, "layers": f"{name} ({count})",
                         "swapped": f"{m['n']:.1f}", "mass": f"{m['mb']:.4f} → {m['mc']:.4f}",
                         "nu": f"{m['nb']:.1f}, {m['nc']:.1f}", "a_nu": f"{m['ab']:.3f} → {m['ac']:.3f}"})
    return rows_out


def eval_layers(f: EvalFile, which: str):
    """Model layer indices for --layers: None for all; 'global'/'local' from the file's
    sliding layers; else a comma list."""
    if which == "all":
        return None
    n_layer = int(f.attrs["n_layer"])
    sliding = set(f.sliding_layers)
    if which in ("global", "local"):
        chosen = [l for l in range(n_layer) if (l in sliding) == (which == "local")]
        if not chosen:
            raise ValueError(f"{f.path}: no {which} layers (sliding layers: {sorted(sliding) or 'none'})")
        return chosen
    try:
        chosen = [int(x) for x in which.split(",")]
    except ValueError:
        raise ValueError(f"--layers {which!r}: all, global, local or a comma list of layer indices") from None
    if any(l < 0 or l >= n_layer for l in chosen):
        raise ValueError(f"--layers {which}: the model has layers 0-{n_layer - 1}")
    return chosen


def along_answer_pairs(f: EvalFile, layers=None) -> tuple:
    """(n, rows): each criticalkv(X) run beside its X per budget, over the first n steps
    (the steps every record's answer reaches), one dict per pair with ALONG_COLUMNS."""
    curves = along_answer(f, layers)
    if not curves:
        raise ValueError(f"{f.path}: no run has --track-steps data (run ckv eval --track-steps N)")
    total = max(int(c["records"].max()) for c in curves.values())
    n = min(int(np.sum(c["records"] >= total)) for c in curves.values())
    rows = []
    for frac in sorted({frac for _, frac in curves}):
        for crit_name, base_name in f.base_pairs:
            if (crit_name, frac) not in curves or (base_name, frac) not in curves:
                continue
            rows.append(_along_row(curves[(base_name, frac)], curves[(crit_name, frac)], base_name, frac, n))
    return n, rows


def _along_row(base, crit, base_name, frac, n) -> dict:
    b, c = base["l1"][:n], crit["l1"][:n]
    later = (f"{b[1:].mean():.2f} → {c[1:].mean():.2f} ({100 * (c[1:].mean() / b[1:].mean() - 1):+.1f} %)"
             if n > 1 else "—")
    return {"budget": f"{100 * frac:g} %", "base": base_name,
            "l1_step1": f"{b[0]:.2f} → {c[0]:.2f} ({100 * (c[0] / b[0] - 1):+.1f} %)",
            "l1_later": later, "steps_crit_lower": f"{int(np.sum(c < b))} of {n}",
            "kl_steps": f"{base['kl'][:n].mean():.3f} → {crit['kl'][:n].mean():.3f}"}


def _fmt(v, col):
    if isinstance(v, (str, int)):
        return str(v)
    if np.isnan(v):
        return "–"
    if col in ("ratio",) or col.startswith("share"):
        return f"{100 * v:.1f}%"
    return f"{v:.4g}"


HEADERS = {"budget": "Budget", "kept": "Kept", "heads": "Heads", "actual_L1": "Actual L1",
           "our_bound_theta_hat": "Our bound θ̂", "prev_bound_theta_rel": "Prev. bound θ_rel",
           "ratio": "Ratio", "share_head_means_L_below_base": "L < base (head means)",
           "share_L_below_base": "L < base (per record)", "share_S1_holds": "S1 ≥ 1/2"}
LATEX_HEADERS = {"budget": "Budget", "kept": "Kept", "heads": "Heads", "actual_L1": "Actual $L_1$",
                 "our_bound_theta_hat": r"Our bound $\hat\theta$",
                 "prev_bound_theta_rel": r"Prev.\ bound $\theta_{\mathrm{rel}}$",
                 "ratio": "Ratio", "share_head_means_L_below_base": r"$L <$ base (head means)",
                 "share_L_below_base": r"$L <$ base (per record)",
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
    p.add_argument("--layers", default="all", help="eval --track-steps: all, global, local or a list")
    p.add_argument("--mass", action="store_true", help="a bound file: kept attention mass against L1")
    p.add_argument("--swaps", metavar="DUMP", help="a bound file and a dump of its records (attn, nu)")
    p.add_argument("--latex", action="store_true")
    a = p.parse_args(argv)
    try:
        f = open_ckv(a.input)
        if a.swaps:
            dump = open_ckv(a.swaps)
            if not isinstance(f, BoundFile) or not isinstance(dump, DumpFile):
                raise ValueError("--swaps reads a ckv bound output and a ckv dump (--what attn,nu) of its records")
            rows = swap_pairs(f, dump)
            cap = (f"Entries criticalkv and its base disagree on, {f.model}, {f.data}, {len(f.records)} records; "
                   f"{f.protocol}")
            print(to_latex(rows, SWAP_COLUMNS, SWAP_HEADERS, cap) if a.latex
                  else f"{cap}\n\n" + to_markdown(rows, SWAP_COLUMNS, SWAP_HEADERS))
            return 0
        if a.mass:
            if not isinstance(f, BoundFile):
                raise ValueError(f"{a.input}: --mass reads a ckv bound output")
            rows = mass_pairs(f)
            cap = f"Kept attention mass and L1, {f.model}, {f.data}, {len(f.records)} records; {f.protocol}"
            print(to_latex(rows, MASS_COLUMNS, MASS_HEADERS, cap) if a.latex
                  else f"{cap}\n\n" + to_markdown(rows, MASS_COLUMNS, MASS_HEADERS))
            return 0
        if isinstance(f, EvalFile):
            n, rows = along_answer_pairs(f, eval_layers(f, a.layers))
            cap = (f"Mean L1 along the answer, {len(f.records)} records, first {n} steps, "
                   f"layers: {a.layers}")
            print(to_latex(rows, ALONG_COLUMNS, ALONG_HEADERS, cap) if a.latex
                  else f"{cap}\n\n" + to_markdown(rows, ALONG_COLUMNS, ALONG_HEADERS))
            return 0
        crit, base, rows = table9(f, a.method)
    except (KeyError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    cap = (f"Table 9: {crit} vs {base}, {f.model}, {f.data}; {f.protocol}; L1 over the heads where "
           f"both S1 >= 1/2" + ("; * budget below the snapkv window" if any("*" in r["budget"] for r in rows)
                                else ""))
    print(to_latex(rows, caption=cap) if a.latex else f"{cap}\n\n" + to_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

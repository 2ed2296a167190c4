"""The CriticalKV figures from ckv outputs; each a function and a CLI entry:

    /usr/bin/python3 -m analysis.figures NAME INPUT.h5 -o DIR [--method M] [--budget 20%]

NAME: reduction-heatmap (Figure 4, ckv bound), assumption (Figure 8, ckv check),
tightness (Table 9 per layer, ckv bound), reduction-budget (Figure 6, ckv bound),
kept (kept entries per layer and KV head, ckv bound), propagated (per-layer residual
perturbation, ckv mask), reduction-layers (Figure 5: per-layer reduction, isolated from
ckv bound beside propagated from `--mask-pair BASE.h5 CRIT.h5`, `ckv mask --method X` and
`--method criticalkv(X)` at one budget), attention (one layer/head over positions from a
ckv dump with --what attn, spans shaded; --layer --head --row, --mask for raw vs
corrected), eval-accuracy (accuracy against budget per method, the paper's Figure 2 layout,
ckv eval), eval-logp (log p(answer) change against mean L1 with Spearman's rho, ckv eval), eval-steps
(mean L1 and next-token KL against the answer step, ckv eval --track-steps).
The mask and dump figures live in analysis/figures_mask.py, the eval ones in
analysis/figures_eval.py. Every function
returns a Figure with the arrays it drew, so tests compare the drawn numbers with the HDF5
file; PNG and PDF are written to DIR.
"""
from __future__ import annotations

import argparse
import sys

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import SymLogNorm, TwoSlopeNorm

from .ckv_reader import BoundFile, SchemaError, open_ckv
from .figures_eval import accuracy_vs_budget, logp_vs_l1, perturbation_along_answer
from .figures_mask import (attention, layer_reduction, most_evicted_head, propagated,
                           reduction_per_layer)
from .plotting import Figure, _header, _save, _slug

__all__ = ["FIGURES", "Figure", "accuracy_vs_budget", "assumption_heatmap", "attention", "kept_heatmap",
           "layer_reduction", "logp_vs_l1", "main", "most_evicted_head", "propagated", "reduction_heatmap",
           "reduction_per_layer", "reduction_vs_budget", "tightness", "tightness_per_layer"]


def _queries(f: BoundFile) -> str:
    nq = sorted({r.metrics.shape[-2] for r in f.records})
    return f"{'/'.join(map(str, nq))} question queries"


def _budget_index(f: BoundFile, budget) -> int:
    labels = f.budget_labels
    if budget is None:
        return labels.index("20%") if "20%" in labels else len(labels) - 1
    if isinstance(budget, int):
        return budget
    if budget in labels:
        return labels.index(budget)
    raise KeyError(f"{f.path}: no budget {budget!r}; it has {', '.join(labels)}")


def _crit_pair(f: BoundFile, method):
    pairs = f.base_pairs
    if not pairs:
        raise KeyError(f"{f.path}: no criticalkv(X) method with its base X among {f.methods}")
    if method is None:
        return pairs[0]
    for m, b in pairs:
        if method in (m, b):
            return m, b
    raise KeyError(f"{f.path}: no criticalkv pair for {method!r}; pairs: {pairs}")


def _symlog(values):
    """Diverging norm centred at 0: linear near 0, logarithmic beyond the 25th percentile of
    the nonzero magnitudes, so one outlier head does not wash out the rest."""
    mag = np.abs(values[np.isfinite(values)])
    lim = float(mag.max()) if mag.size else 1.0
    nz = mag[mag > 0]
    lin = float(np.percentile(nz, 25)) if nz.size else 1.0
    lim = max(lim, lin * 10, 1e-12)
    return SymLogNorm(linthresh=max(lin, lim * 1e-4), linscale=0.5, vmin=-lim, vmax=lim, base=10)


def _symlog_ticks(norm):
    """0 and the signed decades above the linear range (no crowding around 0)."""
    lo = int(np.ceil(np.log10(norm.linthresh * 1.5)))
    hi = int(np.floor(np.log10(norm.vmax)))
    dec = [10.0 ** k for k in range(lo, hi + 1)]
    return [-d for d in reversed(dec)] + [0.0] + dec


def _layer_head_axes(ax, layers, n_head):
    ax.set_xlabel("query head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(n_head))
    step = 1 if len(layers) <= 32 else 2
    ax.set_yticks(range(0, len(layers), step))
    ax.set_yticklabels([str(x) for x in layers[::step]], fontsize=7)
    ax.tick_params(axis="x", labelsize=8)


def reduction_heatmap(f: BoundFile, out_dir, method=None, budget=None, metric="L1") -> Figure:
    """Figure 4: per head L(base) − L(criticalkv), mean over queries and records; the share
    of heads whose mean is lowered (the paper's statistic) and, beside it, the share of
    (record, layer, head) lowered."""
    crit, base = _crit_pair(f, method)
    bi = _budget_index(f, budget)
    L = f.mean_metric(metric)
    red = L[f.method_index(base), bi] - L[f.method_index(crit), bi]   # [layer, head]
    share = float(np.mean(red > 0))
    equal = float(np.mean(red == 0))
    i = f.metric_index(metric)
    per = np.stack([r.metrics_mean[:, bi, ..., i] for r in f.records])  # [rec, method, layer, head]
    share_rec = float(np.mean(per[:, f.method_index(crit)] < per[:, f.method_index(base)]))
    fig, ax = plt.subplots(figsize=(5.2, 8.0))
    im = ax.imshow(red, cmap="RdBu", norm=_symlog(red), aspect="auto", interpolation="nearest")
    _layer_head_axes(ax, f.layers, red.shape[1])
    cb = fig.colorbar(im, ax=ax, shrink=0.8, ticks=_symlog_ticks(im.norm), format="%g")
    cb.ax.minorticks_off()
    cb.set_label(f"{metric}(base) − {metric}(criticalkv), symlog   (> 0: criticalkv lower)")
    ax.set_title(f"{crit} vs {base}, budget {f.budget_labels[bi]}\n"
                 f"{metric} lowered in {100 * share:.1f}% of heads (equal in {100 * equal:.1f}%);\n"
                 f"per record: {100 * share_rec:.1f}% of (record, layer, head)\n"
                 f"{_header(f)}\n{f.protocol}; {metric} norm of Δo, mean over {_queries(f)}", fontsize=8)
    name = f"reduction_heatmap_{_slug(crit)}_{_slug(f.budget_labels[bi])}"
    return Figure(name, fig, _save(fig, out_dir, name),
                  {"reduction": red, "share": share, "share_per_record": share_rec},
                  [im], f.command_line,
                  f"Per-head perturbation reduction {metric}({base}) − {metric}({crit}) at budget "
                  f"{f.budget_labels[bi]}; {100 * share:.1f}% of heads improved.")


def assumption_heatmap(f: BoundFile, out_dir, alpha_index=0) -> Figure:
    """Figure 8: smallest S1 over evaluation queries per layer × head, one panel per budget."""
    if f.kind != "check":
        raise ValueError(f"{f.path}: Assumption 3.4 needs a `ckv check` output (kind {f.kind})")
    s1 = f.min_metric("S1")[alpha_index]                 # [budget, layer, head]
    labels = f.budget_labels
    nb = s1.shape[0]
    fig, axes = plt.subplots(1, nb, figsize=(2.6 * nb + 1.2, 8.0), squeeze=False)
    images, shares = [], []
    for bi in range(nb):
        ax = axes[0, bi]
        im = ax.imshow(s1[bi], cmap="RdBu", norm=TwoSlopeNorm(0.5, 0.0, 1.0), aspect="auto",
                       interpolation="nearest")
        images.append(im)
        share = float(np.mean(s1[bi] >= 0.5))
        shares.append(share)
        _layer_head_axes(ax, f.layers, s1.shape[2])
        if bi:
            ax.set_ylabel("")
        ax.set_title(f"budget {labels[bi]}: S1 ≥ 1/2 in\n{100 * share:.1f}% of heads", fontsize=9)
    cb = fig.colorbar(images[-1], ax=axes[0, :].tolist(), shrink=0.8)
    cb.set_label("S1 (stage-1 attention mass), min over queries")
    alpha = f.alphas[alpha_index]
    fig.suptitle(f"Assumption 3.4 (S1 ≥ 1/2), stage 1 by {f.settings.get('method', 'attn')}, "
                 f"alpha {alpha:g}\n{_header(f)}; min over {_queries(f)}", fontsize=9)
    name = f"assumption_alpha{alpha:g}"
    return Figure(name, fig, _save(fig, out_dir, name), {"s1_min": s1, "shares": shares},
                  images, f.command_line,
                  "Assumption 3.4 per head: " + ", ".join(
                      f"{l}: {100 * s:.1f}%" for l, s in zip(labels, shares)) + " of heads hold.")


def tightness_per_layer(f: BoundFile, method=None):
    """[budget, layer] arrays: actual L (criticalkv), theta_hat (criticalkv) and theta_rel
    (base), all three over one population as Table 9: the heads where both methods'
    S1 ≥ 1/2 (NaN where none); `heads` is their count."""
    crit, base = _crit_pair(f, method)
    ci, bi_ = f.method_index(crit), f.method_index(base)
    ix = f.metric_index
    mm = np.stack([r.metrics_mean for r in f.records])   # [rec, method, budget, layer, head, metric]
    ok = (mm[:, ci, ..., ix("S1")] >= 0.5) & (mm[:, bi_, ..., ix("S1")] >= 0.5)  # [rec, budget, layer, head]
    cnt = ok.sum(axis=(0, 3))
    out = {"heads": cnt}
    for key, m, metric in (("actual", ci, "L1"), ("theta_hat", ci, "theta_hat"), ("theta_rel", bi_, "theta_rel")):
        val = np.where(ok, mm[:, m, ..., ix(metric)], 0.0).sum(axis=(0, 3))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[key] = np.where(cnt > 0, val / np.maximum(cnt, 1), np.nan)
    return crit, base, out


def tightness(f: BoundFile, out_dir, method=None) -> Figure:
    """Table 9 as a plot: per layer actual L, theta_hat and theta_rel, one panel per budget."""
    crit, base, arr = tightness_per_layer(f, method)
    labels = f.budget_labels
    nb = len(labels)
    fig, axes = plt.subplots(1, nb, figsize=(3.0 * nb + 0.5, 3.6), sharey=True, squeeze=False)
    x = f.layers
    for bi in range(nb):
        ax = axes[0, bi]
        ax.plot(x, arr["actual"][bi], "o-", ms=3, label=f"actual L1 ({crit})")
        ax.plot(x, arr["theta_hat"][bi], "s-", ms=3, label=rf"$\hat\theta$ ({crit})")
        ax.plot(x, arr["theta_rel"][bi], "^-", ms=3, label=rf"$\theta_{{rel}}$ ({base})")
        ax.set_yscale("log")
        ax.set_title(f"budget {labels[bi]}", fontsize=9)
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("L1 perturbation / bound")
    h, l = axes[0, 0].get_legend_handles_labels()
    fig.suptitle(f"Bound tightness per layer (Table 9): {crit} vs {base}\n{_header(f)}; {f.protocol}; "
                 f"L1, mean over {_queries(f)}\nand over the heads where both methods' S1 ≥ 1/2 "
                 f"(gaps where none)", fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(h, l, loc="lower center", ncol=3, fontsize=8, frameon=False)
    name = f"tightness_{_slug(crit)}"
    return Figure(name, fig, _save(fig, out_dir, name), arr, [], f.command_line,
                  f"Actual L1 of {crit}, its bound θ̂ and the attention-only bound θ_rel of "
                  f"{base}, over the heads where both S1 ≥ 1/2, per layer and budget.")


def reduction_vs_budget(f: BoundFile, out_dir, metric="L1") -> Figure:
    """Figure 6: relative reduction 1 − mean L(crit)/mean L(base) and the share of improved
    heads against the budget, one curve per base method."""
    labels = f.budget_labels
    L = f.mean_metric(metric)                                 # [method, budget, layer, head]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    arrays = {}
    x = np.arange(len(labels))
    for crit, base in f.base_pairs:
        lc, lb = L[f.method_index(crit)], L[f.method_index(base)]
        rel = 100 * (1 - lc.mean(axis=(1, 2)) / lb.mean(axis=(1, 2)))
        share = 100 * np.mean(lb > lc, axis=(1, 2))   # heads' means over records: the paper's
        i = f.metric_index(metric)
        per = np.stack([r.metrics_mean[..., i] for r in f.records])   # [rec, method, budget, layer, head]
        per_rec = 100 * np.mean(per[:, f.method_index(crit)] < per[:, f.method_index(base)], axis=(0, 2, 3))
        arrays[base] = {"relative_reduction_pct": rel, "share_improved_pct": share,
                        "share_improved_per_record_pct": per_rec}
        a1.plot(x, rel, "o-", label=f"base {base}")
        a2.plot(x, share, "o-", label=f"base {base}")
    for ax in (a1, a2):
        ax.set_xticks(x)
        ax.set_xticklabels(labels)
        ax.set_xlabel("budget (share of the context kept per KV head)")
        ax.grid(alpha=0.3)
    a1.axhline(0, color="k", lw=0.8)
    a1.set_ylabel(f"{metric} reduction by criticalkv (%)\n1 − mean L(crit) / mean L(base)")
    a2.set_ylabel("heads whose mean L(crit) < L(base) (%)")
    a2.set_ylim(0, 100)
    a1.legend(fontsize=8)
    fig.suptitle(f"Reduction against budget (Figure 6)\n{_header(f)}; {metric}, mean over "
                 f"{_queries(f)}, layers and heads", fontsize=9)
    fig.tight_layout()
    name = "reduction_vs_budget"
    return Figure(name, fig, _save(fig, out_dir, name), arrays, [], f.command_line,
                  "Relative L1 reduction of criticalkv over each base method, and the share of "
                  "heads it improves, per budget.")


def kept_heatmap(f: BoundFile, out_dir, method=None, budget=None) -> Figure:
    """Kept entries per layer and KV head for one method and budget (record 0)."""
    method = method or f.methods[0]
    mi, bi = f.method_index(method), _budget_index(f, budget)
    kc = f.records[0].kept_count[mi, bi]                      # [layer, kv_head]
    fig, ax = plt.subplots(figsize=(3.6, 8.0))
    im = ax.imshow(kc, cmap="viridis", aspect="auto", interpolation="nearest")
    _layer_head_axes(ax, f.layers, kc.shape[1])
    ax.set_xlabel("KV head")
    for (i, j), v in np.ndenumerate(kc):
        ax.text(j, i, str(v), ha="center", va="center", fontsize=6,
                color="w" if v < (kc.min() + kc.max()) / 2 else "k")
    fig.colorbar(im, ax=ax, shrink=0.8).set_label("kept context entries")
    ax.set_title(f"kept entries: {method}\nbudget {f.budget_labels[bi]}, "
                 f"{int(f.records[0].budgets[bi])} per KV head on average\n{_header(f)}\n"
                 f"record {f.records[0].id}, context c = {f.records[0].context_end}", fontsize=8.5)
    name = f"kept_{_slug(method)}_{_slug(f.budget_labels[bi])}"
    return Figure(name, fig, _save(fig, out_dir, name), {"kept": kc}, [im], f.command_line,
                  f"Kept context entries per layer and KV head, {method} at {f.budget_labels[bi]}.")


FIGURES = {
    "reduction-heatmap": (reduction_heatmap, "bound"),
    "assumption": (assumption_heatmap, "check"),
    "tightness": (tightness, "bound"),
    "reduction-budget": (reduction_vs_budget, "bound"),
    "kept": (kept_heatmap, "bound"),
    "propagated": (propagated, "mask"),
    "reduction-layers": (reduction_per_layer, "bound + --mask-pair"),
    "attention": (attention, "dump"),
    "eval-accuracy": (accuracy_vs_budget, "eval"),
    "eval-logp": (logp_vs_l1, "eval"),
    "eval-steps": (perturbation_along_answer, "eval --track-steps"),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m analysis.figures", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=sorted(FIGURES))
    p.add_argument("input")
    p.add_argument("-o", "--out-dir", default="figures")
    p.add_argument("--method", default=None)
    p.add_argument("--budget", default=None, help="budget label as in the file, e.g. 20%%")
    p.add_argument("--layer", type=int, default=None, help="attention: layer (default: middle)")
    p.add_argument("--head", type=int, default=0, help="attention: query head")
    p.add_argument("--row", type=int, default=None, help="attention: query position (default: last)")
    p.add_argument("--mask", default=None, help="attention: ckv mask file of the same prompt")
    p.add_argument("--mask-pair", nargs=2, metavar=("BASE", "CRIT"), default=None,
                   help="reduction-layers: ckv mask --method X and --method criticalkv(X) runs, "
                        "same --budget, of the bound file's prompts")
    a = p.parse_args(argv)
    fn, _ = FIGURES[a.name]
    try:
        f = open_ckv(a.input)
        kw = {}
        if a.method and a.name in ("reduction-heatmap", "tightness", "kept"):
            kw["method"] = a.method
        if a.budget and a.name in ("reduction-heatmap", "kept"):
            kw["budget"] = a.budget
        if a.name == "reduction-layers":
            if not a.mask_pair:
                raise ValueError("reduction-layers: give --mask-pair BASE.h5 CRIT.h5")
            kw = dict(base_mask=open_ckv(a.mask_pair[0]), crit_mask=open_ckv(a.mask_pair[1]))
        if a.name == "attention":
            layer = a.layer if a.layer is not None else int(f.model_attrs["n_layer"]) // 2
            kw = dict(layer=layer, head=a.head, row=a.row,
                      mask=open_ckv(a.mask) if a.mask else None)
        r = fn(f, a.out_dir, **kw)
    except (SchemaError, KeyError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for path in r.paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

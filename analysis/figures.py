"""The CriticalKV figures from ckv outputs; each a function and a CLI entry:

    /usr/bin/python3 -m analysis.figures NAME INPUT.h5 -o DIR [--method M] [--budget 20%]

NAME: reduction-heatmap (Figure 4, ckv bound), assumption (Figure 8, ckv check),
tightness (Table 9 per layer, ckv bound), reduction-budget (Figure 6, ckv bound),
kept (kept entries per layer and KV head, ckv bound), propagated (per-layer residual
perturbation, ckv mask), attention (one layer/head over positions from a ckv dump with
--what attn, spans shaded; --layer --head --row, --mask for raw vs corrected). Every function returns a Figure with the arrays it drew, so tests
compare the drawn numbers with the HDF5 file; PNG and PDF are written to DIR.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import SymLogNorm, TwoSlopeNorm  # noqa: E402

from .ckv_reader import BoundFile, DumpFile, MaskFile, open_ckv  # noqa: E402


@dataclass
class Figure:
    name: str
    fig: object
    paths: list                                  # [png, pdf]
    arrays: dict = field(default_factory=dict)   # what was drawn, by name
    images: list = field(default_factory=list)   # AxesImage per panel (heatmaps)
    source: str = ""                             # the ckv command line of the data
    caption: str = ""


def _save(fig, out_dir, name) -> list:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=130, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    return paths


def _header(f) -> str:
    n_rec = len(f.records)
    return f"{f.model} · {f.data} ({n_rec} record{'s' if n_rec != 1 else ''})"


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
    """Figure 4: per head L(base) − L(criticalkv), mean over queries and records."""
    crit, base = _crit_pair(f, method)
    bi = _budget_index(f, budget)
    L = f.mean_metric(metric)
    red = L[f.method_index(base), bi] - L[f.method_index(crit), bi]   # [layer, head]
    share = float(np.mean(red > 0))
    equal = float(np.mean(red == 0))
    fig, ax = plt.subplots(figsize=(5.2, 8.0))
    im = ax.imshow(red, cmap="RdBu", norm=_symlog(red), aspect="auto", interpolation="nearest")
    _layer_head_axes(ax, f.layers, red.shape[1])
    cb = fig.colorbar(im, ax=ax, shrink=0.8, ticks=_symlog_ticks(im.norm), format="%g")
    cb.ax.minorticks_off()
    cb.set_label(f"{metric}(base) − {metric}(criticalkv), symlog   (> 0: criticalkv lower)")
    ax.set_title(f"{crit} vs {base}, budget {f.budget_labels[bi]}\n"
                 f"{metric} lowered in {100 * share:.1f}% of heads (equal in {100 * equal:.1f}%)\n"
                 f"{_header(f)}\n{metric} norm of Δo, mean over {_queries(f)}", fontsize=8.5)
    name = f"reduction_heatmap_{_slug(crit)}_{_slug(f.budget_labels[bi])}"
    return Figure(name, fig, _save(fig, out_dir, name), {"reduction": red, "share": share},
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
    (base), the bounds averaged over the heads where S1 ≥ 1/2 (NaN if none), as Table 9."""
    crit, base = _crit_pair(f, method)
    ci, bi_ = f.method_index(crit), f.method_index(base)
    ix = f.metric_index
    mm = np.stack([r.metrics_mean for r in f.records])   # [rec, method, budget, layer, head, metric]
    L = mm[:, ci, ..., ix("L1")].mean(axis=(0, 3))
    out = {"actual": L}
    for key, m, metric in (("theta_hat", ci, "theta_hat"), ("theta_rel", bi_, "theta_rel")):
        ok = mm[:, m, ..., ix("S1")] >= 0.5
        val = np.where(ok, mm[:, m, ..., ix(metric)], 0.0).sum(axis=(0, 3))
        cnt = ok.sum(axis=(0, 3))
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
    fig.suptitle(f"Bound tightness per layer (Table 9): {crit} vs {base}\n{_header(f)}; L1, mean "
                 f"over {_queries(f)} and heads\nactual: all heads; bounds: heads with S1 ≥ 1/2 "
                 f"(gaps where none)", fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(h, l, loc="lower center", ncol=3, fontsize=8, frameon=False)
    name = f"tightness_{_slug(crit)}"
    return Figure(name, fig, _save(fig, out_dir, name), arr, [], f.command_line,
                  f"Actual L1 of {crit} (all heads), its bound θ̂ and the attention-only bound θ_rel of "
                  f"{base} (heads with S1 ≥ 1/2), per layer and budget.")


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
        share = 100 * np.mean(lb > lc, axis=(1, 2))
        arrays[base] = {"relative_reduction_pct": rel, "share_improved_pct": share}
        a1.plot(x, rel, "o-", label=f"base {base}")
        a2.plot(x, share, "o-", label=f"base {base}")
    for ax in (a1, a2):
        ax.set_xticks(x)
        ax.set_xticklabels(labels)
        ax.set_xlabel("budget (share of the context kept per KV head)")
        ax.grid(alpha=0.3)
    a1.axhline(0, color="k", lw=0.8)
    a1.set_ylabel(f"{metric} reduction by criticalkv (%)\n1 − mean L(crit) / mean L(base)")
    a2.set_ylabel("heads with L(crit) < L(base) (%)")
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
    ax.set_title(f"kept entries: {method}, budget {f.budget_labels[bi]}\n{_header(f)}\n"
                 f"record {f.records[0].id}, context c = {f.records[0].context_end}", fontsize=8.5)
    name = f"kept_{_slug(method)}_{_slug(f.budget_labels[bi])}"
    return Figure(name, fig, _save(fig, out_dir, name), {"kept": kc}, [im], f.command_line,
                  f"Kept context entries per layer and KV head, {method} at {f.budget_labels[bi]}.")


def propagated(f: MaskFile, out_dir, record=0, norm="l1") -> Figure:
    """Figure 5 (propagated part): per layer ‖r' − r‖ of the residual stream, mean over the
    question rows, for the target eviction and each placebo."""
    rec = f.records[record]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    arrays = {}
    for name in sorted(rec.runs, key=lambda s: (s != "target", s)):
        run = rec.runs[name]
        y = run.data[f"resid_{norm}"].mean(axis=1)            # [layer]
        arrays[name] = y
        sp = np.asarray(run.attrs.get("spans", [])).reshape(-1, 2).tolist()
        ax.plot(np.arange(len(y)), y, "o-" if name == "target" else ".--", ms=3,
                label=f"{name} spans {sp}, KL {float(run.attrs.get('kl', np.nan)):.3g}")
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel(f"residual perturbation ‖r' − r‖ ({norm.upper()})\nmean over question rows")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"Propagated eviction (ckv mask): {_header(f)}\nrecord {rec.id}, c = "
                 f"{rec.context_end}, source {rec.runs.get('target').attrs.get('source', '?')}"
                 if "target" in rec.runs else f"Propagated eviction: {_header(f)}", fontsize=8.5)
    fig.tight_layout()
    name = f"propagated_{norm}"
    return Figure(name, fig, _save(fig, out_dir, name), arrays, [], f.command_line,
                  "Per-layer residual-stream perturbation of the masked run against the unmasked "
                  "one, target eviction beside the Δθ-matched placebos.")


SPAN_COLOURS = {"sink": "0.6", "question": "tab:blue", "needle": "tab:green",
                "answer_evidence": "tab:green", "evidence": "tab:green", "distractor": "tab:orange"}


def attention(d: DumpFile, out_dir, layer, head, record=None, row=None, mask=None,
              run="target", sinks=None) -> Figure:
    """Attention of one layer/head over positions for one query row of a dump (needs
    `--what attn` with that row), with the sink, named spans and question shaded. With a
    `ckv mask` file of the same prompt, also the renormalised attention after evicting the
    run's entries, raw A' = N·A/S, and the corrected A'·S = N·A (Theorem 3.2), both from
    the dump's unmasked A (this layer in isolation)."""
    import json
    rid = record if record is not None else d.record_ids[0]
    g = d.h5[f"records/{rid}"]
    heads = list(np.asarray(d.attrs.get("heads", [])))
    if head not in heads:
        raise KeyError(f"{d.path}: head {head} not recorded (heads {heads})")
    if f"layers/{layer}/attn" not in g:
        raise KeyError(f"{d.path}: no attn for layer {layer} in record {rid} (dump --what attn)")
    rows = list(g["attn_rows"][()])
    n, c = int(g.attrs["n_tokens"]), int(g.attrs["context_end"])
    row = n - 1 if row is None else row
    if row not in rows:
        raise KeyError(f"{d.path}: row {row} not among the dumped attention rows")
    A = g[f"layers/{layer}/attn"][heads.index(head), rows.index(row), :row + 1].astype(np.float64)
    spans = json.loads(g.attrs.get("spans", "{}") or "{}")
    arrays = {"attn": A}
    fig, ax = plt.subplots(figsize=(9.0, 3.6))
    pos = np.arange(len(A))
    sub = f"layer {layer}, head {head}, query row {row}"
    if mask is not None:
        mrec = next((r for r in mask.records if r.id == str(rid)), mask.records[0])
        tok_d, tok_m = g["tokens"][()], None
        with h5py.File(mask.path, "r") as mf:
            tok_m = mf[f"records/{mrec.id}/tokens"][()]
        if len(tok_m) < n or not np.array_equal(tok_m[:n], tok_d):
            raise ValueError(f"{mask.path}: record {mrec.id} is not the prompt of {d.path} "
                             f"record {rid} (tokens differ)")
        group = int(d.model_attrs["n_head"]) // int(d.model_attrs["n_kv_head"])
        ev = mrec.runs[run].data["evicted"][layer, head // group]        # [pos<c]
        keep = np.ones(len(A))
        keep[:len(ev)] = 1 - ev[:len(A)]
        S = float((keep * A).sum())
        arrays.update(raw=keep * A / S, corrected=keep * A, retained=S)
        ax.plot(pos, A, color="0.2", lw=1.0, label="full A (no eviction)")
        ax.plot(pos, arrays["raw"], color="tab:red", lw=1.0, label=f"raw A' = N·A/S (S = {S:.3f})")
        ax.plot(pos, arrays["corrected"], color="tab:purple", lw=1.0, ls="--",
                label="corrected A'·S = N·A")
        for j in np.flatnonzero(ev):
            ax.axvline(j, color="tab:red", alpha=0.15, lw=2)
        sub += f"; {run} of {mask.path.name} evicted (red bars)"
        if sinks is None:
            sinks = int(mask.settings.get("sinks", 4))
    else:
        ax.plot(pos, A, color="0.2", lw=1.0, label="attention A")
    sinks = 4 if sinks is None else sinks
    shade = [("sink", 0, sinks)] + [(k, s, e) for k, v in spans.items() for s, e in v]
    if c < n:
        shade.append(("question", c, n))
    seen = set()
    for name, s, e in shade:
        col = SPAN_COLOURS.get(name, "tab:cyan")
        ax.axvspan(s - 0.5, e - 0.5, color=col, alpha=0.18, lw=0,
                   label=None if name in seen else f"{name} [{s}, {e})")
        seen.add(name)
    ax.set_yscale("log")
    ax.set_ylim(max(1e-5, float(A[A > 0].min()) / 2) if (A > 0).any() else 1e-5, 1.0)
    ax.set_xlabel("key position")
    ax.set_ylabel("attention weight (log)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"Attention over positions: {d.model} · record {rid} (c = {c}, n = {n})\n{sub}",
                 fontsize=8.5)
    fig.tight_layout()
    name = f"attention_L{layer}_H{head}_row{row}"
    return Figure(name, fig, _save(fig, out_dir, name), arrays, [], d.command_line,
                  f"Attention of layer {layer}, head {head} at query {row} with spans shaded"
                  + ("; raw vs renormalisation-corrected after the eviction." if mask else "."))


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s).strip("_").replace("__", "_")


FIGURES = {
    "reduction-heatmap": (reduction_heatmap, "bound"),
    "assumption": (assumption_heatmap, "check"),
    "tightness": (tightness, "bound"),
    "reduction-budget": (reduction_vs_budget, "bound"),
    "kept": (kept_heatmap, "bound"),
    "propagated": (propagated, "mask"),
    "attention": (attention, "dump"),
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
    a = p.parse_args(argv)
    fn, _ = FIGURES[a.name]
    try:
        f = open_ckv(a.input)
        kw = {}
        if a.method and a.name in ("reduction-heatmap", "tightness", "kept"):
            kw["method"] = a.method
        if a.budget and a.name in ("reduction-heatmap", "kept"):
            kw["budget"] = a.budget
        if a.name == "attention":
            layer = a.layer if a.layer is not None else int(f.model_attrs["n_layer"]) // 2
            kw = dict(layer=layer, head=a.head, row=a.row,
                      mask=open_ckv(a.mask) if a.mask else None)
        r = fn(f, a.out_dir, **kw)
    except (KeyError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for path in r.paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The figures from `ckv mask` and `ckv dump` outputs: propagated residual perturbation,
Figure 5 (per-layer reduction, isolated from `ckv bound` beside propagated from a pair of
`ckv mask --method` runs) and attention over positions. CLI and index: analysis.figures.
"""
from __future__ import annotations

import json

import h5py
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter

from .ckv_reader import BoundFile, DumpFile, MaskFile
from .plotting import Figure, _header, _save, _slug


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
                label=f"{name} spans {sp}, KL {float(run.attrs.get('kl', np.nan)):.3g}"
                      + (f", Δθ ×{float(run.attrs['delta_theta_ratio']):.2f} of target"
                         if "delta_theta_ratio" in run.attrs else ""))
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


def _mask_budget(m: MaskFile, rec) -> int:
    """Kept context entries per KV head of a `--method M --budget B` mask run, from its
    evicted entries (layers it masked; adakv-style methods keep B per head on average)."""
    ev = rec.runs["target"].data["evicted"]                   # [layer, kv_head, pos<c]
    kept = {float(rec.context_end - ev[l].sum() / ev.shape[1]) for l in range(len(ev)) if ev[l].any()}
    if len(kept) != 1 or not float(next(iter(kept))).is_integer():
        raise ValueError(f"{m.path}: record {rec.id}: not one budget per layer ({sorted(kept)})")
    return int(next(iter(kept)))


def layer_reduction(f: BoundFile, base_mask: MaskFile, crit_mask: MaskFile, norm="l1") -> dict:
    """Figure 5's arrays for a base/criticalkv pair at one budget: per layer, isolated =
    mean over heads of L(base) − L(crit) from `ckv bound` (each layer evicted alone),
    propagated = ‖r' − r‖ of the residual stream, base run − crit run, from two `ckv mask
    --method M --budget B` runs (every layer evicted in one pass). Both are means over the
    question queries, then over the records the three files share. The masks must be of the
    bound's prompts (record id, c and evaluation rows) and model, at one of its budgets."""
    base, crit = base_mask.method, crit_mask.method
    if not base or crit != f"criticalkv({base})":
        raise ValueError(f"{crit_mask.path}: --method {crit or '(none)'!r} is not criticalkv(X) of "
                         f"{base_mask.path} (--method {base or '(none)'!r})")
    mi_b, mi_c = f.method_index(base), f.method_index(crit)
    metric = f.metric_index(norm.upper())
    by_id = [{r.id: r for r in m.records} for m in (base_mask, crit_mask)]
    ids = [r.id for r in f.records if all(r.id in d for d in by_id)]
    if not ids:
        raise ValueError(f"{base_mask.path}, {crit_mask.path}: no record in common with {f.path}")
    iso, prop, bi = {"base": [], "crit": []}, {"base": [], "crit": []}, None
    for r in f.records:
        if r.id not in ids:
            continue
        for m, d, key in ((base_mask, by_id[0], "base"), (crit_mask, by_id[1], "crit")):
            mr = d[r.id]
            if mr.context_end != r.context_end or not np.array_equal(mr.eval_rows, r.eval_rows):
                raise ValueError(f"{m.path}: record {r.id} is not the prompt of {f.path} (c = "
                                 f"{mr.context_end} vs {r.context_end}, evaluation rows differ)")
            if m.attrs.get("model_sha256") != f.attrs.get("model_sha256"):
                raise ValueError(f"{m.path}: another model than {f.path} (sha256 differs)")
            b = _mask_budget(m, mr)
            hit = [i for i, x in enumerate(r.budgets) if int(x) == b]
            if not hit or (bi is not None and hit[0] != bi):
                raise ValueError(f"{m.path}: record {r.id} keeps {b} entries per KV head; {f.path} "
                                 f"has budgets {', '.join(map(str, r.budgets))}")
            bi = hit[0]
            prop[key].append(mr.runs["target"].data[f"resid_{norm}"].mean(axis=1))   # [layer]
        iso["base"].append(r.metrics_mean[mi_b, bi, :, :, metric].mean(axis=1))      # [layer]
        iso["crit"].append(r.metrics_mean[mi_c, bi, :, :, metric].mean(axis=1))
    out = {"base": base, "crit": crit, "budget_index": bi, "records": ids,
           "layers_isolated": np.asarray(f.layers), "layers_propagated": np.arange(len(prop["base"][0]))}
    for name, d in (("isolated", iso), ("propagated", prop)):
        lb, lc = np.mean(d["base"], axis=0), np.mean(d["crit"], axis=0)
        out[f"{name}_base"], out[f"{name}_crit"], out[name] = lb, lc, lb - lc
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"{name}_relative_pct"] = np.where(lb > 0, 100 * (1 - lc / lb), np.nan)
    return out


def reduction_per_layer(f: BoundFile, out_dir, base_mask: MaskFile, crit_mask: MaskFile,
                        norm="l1") -> Figure:
    """Figure 5: per-layer reduction L(base) − L(crit), isolated (ckv bound) beside propagated
    (ckv mask), and both relative to the base's perturbation."""
    a = layer_reduction(f, base_mask, crit_mask, norm)
    N, sub = norm.upper(), norm[1:]
    label = f.budget_labels[a["budget_index"]]
    kept = sorted({int(r.budgets[a["budget_index"]]) for r in f.records if r.id in a["records"]})
    nq = sorted({len(r.eval_rows) for r in f.records if r.id in a["records"]})
    n_head = f.records[0].metrics_mean.shape[3]
    rd = plt.get_cmap("RdBu")
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 4.4))
    panels = (
        ("isolated", f"(a) isolated: one layer evicted at a time\n(ckv bound, mean over {n_head} query heads)",
         rf"$\|o'_h - o_h\|_{sub}$ (head output, $W_h$-projected)" "\nbase − criticalkv"),
        ("propagated", "(b) propagated: every layer evicted in one pass\n(ckv mask, residual stream "
         "after the layer)", rf"$\|r' - r\|_{sub}$ (residual stream)" "\nbase − criticalkv"))
    for ax, (key, title, ylabel) in zip(axes, panels):
        x, y = a[f"layers_{key}"], a[key]
        ax.bar(x, y, width=0.8, color=[rd(0.85) if v > 0 else rd(0.15) for v in y])
        ax.axhline(0, color="k", lw=0.8)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8.5)
    ax = axes[2]
    for key, style in (("isolated", "o-"), ("propagated", "s--")):
        ax.plot(a[f"layers_{key}"], a[f"{key}_relative_pct"], style, ms=3, label=key)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_title("(c) both relative to the base's perturbation", fontsize=9)
    ax.set_yscale("symlog", linthresh=10)      # layer 0 can be −200% while deep layers are ±5%
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel(f"1 − {N}(criticalkv) / {N}(base)  (%)\nsymlog, linear within ±10%", fontsize=8.5)
    ax.legend(fontsize=8)
    for ax in axes:
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    n_rec = len(a["records"])
    fig.suptitle(f"Per-layer perturbation reduction (Figure 5): {a['crit']} vs {a['base']}, budget {label} "
                 f"({'/'.join(map(str, kept))} kept per KV head)\n{f.model} · {f.data} ({n_rec} record"
                 f"{'s' if n_rec != 1 else ''}); {N} norm, mean over {'/'.join(map(str, nq))} question "
                 f"queries; > 0 (blue): criticalkv perturbs less", fontsize=9)
    fig.tight_layout()
    name = f"reduction_layers_{_slug(a['crit'])}_{_slug(label)}"
    return Figure(name, fig, _save(fig, out_dir, name), a, [],
                  [f.command_line, base_mask.command_line, crit_mask.command_line],
                  f"Per-layer reduction {N}({a['base']}) − {N}({a['crit']}) at budget {label}: "
                  f"isolated (ckv bound, mean over heads) beside propagated (ckv mask, residual "
                  f"stream), and both relative to the base.")


SPAN_COLOURS = {"sink": "0.6", "question": "tab:blue", "needle": "tab:green",
                "answer_evidence": "tab:green", "evidence": "tab:green", "distractor": "tab:orange"}


def attention(d: DumpFile, out_dir, layer, head, record=None, row=None, mask=None,
              run="target", sinks=None) -> Figure:
    """Attention of one layer/head over positions for one query row of a dump (needs
    `--what attn` with that row), with the sink, named spans and question shaded. With a
    `ckv mask` file of the same prompt, also the renormalised attention after evicting the
    run's entries, raw A' = N·A/S, and the corrected A'·S = N·A (Theorem 3.2), both from
    the dump's unmasked A (this layer in isolation)."""
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
        # a rug along the bottom, so the evicted span does not hide its own shading
        ax.vlines(np.flatnonzero(ev), 0, 0.05, color="k", lw=1, transform=ax.get_xaxis_transform())
        ax.plot([], [], "|", color="k", ms=8, label=f"evicted positions ({int(ev.sum())})")
        sub += f"; {run} of {mask.path.name} evicted (rug)"
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


def most_evicted_head(d: DumpFile, mask: MaskFile, record=None, run="target"):
    """(layer, head, S) whose last prompt row loses the most attention mass (smallest
    retained S) to the mask run's eviction, over the dump's attention layers and heads:
    the head where raw and corrected attention differ most visibly."""
    rid = record if record is not None else d.record_ids[0]
    g = d.h5[f"records/{rid}"]
    mrec = next((r for r in mask.records if r.id == str(rid)), mask.records[0])
    ev = mrec.runs[run].data["evicted"]                      # [layer, kv_head, pos<c]
    heads = [int(h) for h in np.asarray(d.attrs.get("heads", []))]
    group = int(d.model_attrs["n_head"]) // int(d.model_attrs["n_kv_head"])
    row = list(g["attn_rows"][()]).index(int(g.attrs["n_tokens"]) - 1)
    best = None
    for name in g["layers"]:
        if "attn" not in g[f"layers/{name}"]:
            continue
        layer = int(name)
        A = g[f"layers/{name}/attn"][:, row, :ev.shape[2]].astype(np.float64)   # [head, pos<c]
        for hi, h in enumerate(heads):
            S = 1.0 - float((ev[layer, h // group] * A[hi]).sum())
            if best is None or S < best[2]:
                best = (layer, h, S)
    if best is None:
        raise KeyError(f"{d.path}: no attention rows in record {rid} (dump --what attn)")
    return best

"""One self-contained Markdown report from ckv outputs, figures beside it:

    /usr/bin/python3 -m analysis.report [--bound bound.h5] [--check check.h5] [--mask mask.h5]
        [--dump dump.h5 [--attn LAYER,HEAD]] [--mask-pair BASE.h5 CRIT.h5] [--eval eval.h5] -o DIR

writes DIR/report.md and DIR/figures/*.png|pdf. The report opens with what was found, in
sentences generated from the numbers (analysis/findings.py: whether the paper's claims hold
on this model, with the caveats); each section then explains its figures' surprising
features where the data has one. Every figure and table is captioned with the ckv command
that produced its data (the file's provenance `command_line`), the model (with its sha256)
and the ckv build (version, git commit).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import json

import matplotlib.pyplot as plt
import numpy as np

from . import figures as F
from . import figures_eval as FE
from . import findings as W
from . import tables as T
from .ckv_reader import SchemaError, open_ckv


def _provenance(f) -> str:
    a = f.attrs
    sha = a.get("model_sha256", "")
    return (f"Data: `{f.path.name}` ({f.schema} v{f.version}), produced by\n\n"
            f"    {f.command_line}\n\n"
            f"ckv {a.get('ckv_version', '?')} (git {a.get('git_commit', '?')}), "
            f"{a.get('created', '?')}, model `{a.get('model_path', '?')}`"
            + (f" (sha256 {sha[:16]}…)" if sha else "") + ".\n")


def _figure(fig: F.Figure, out_dir: Path, lines: list):
    rel = Path(fig.paths[0]).relative_to(out_dir)
    pdf = Path(fig.paths[1]).relative_to(out_dir)
    src = fig.source if isinstance(fig.source, list) else [fig.source]
    lines += [f"![{fig.name}]({rel})", "",
              f"*{fig.caption}* ([PDF]({pdf})) Data from " + "; ".join(f"`{s}`" for s in src), ""]
    plt.close(fig.fig)


def _bound_numbers(f, crit: str, base: str) -> dict:
    """What the prose of a criticalkv pair needs from a bound file: Table 9's rows, the
    all-heads mean actual L1 and the relative reduction per budget, the kept counts."""
    _, _, rows = T.table9(f, crit)
    ix = f.metric_index("L1")
    mm = np.stack([r.metrics_mean for r in f.records])   # [rec, method, budget, layer, head, metric]
    L = f.mean_metric("L1")                                # [method, budget, layer, head]
    lc, lb = L[f.method_index(crit)], L[f.method_index(base)]
    return {"rows": rows, "labels": f.budget_labels,
            "actual_all": [float(mm[:, f.method_index(crit), b, ..., ix].mean()) for b in range(len(rows))],
            "reduction_pct": list(100 * (1 - lc.mean(axis=(1, 2)) / lb.mean(axis=(1, 2)))),
            "kept": [int(min(r.budgets[b] for r in f.records)) for b in range(len(rows))],
            "below": [f.below_window(b) > 0 for b in range(len(rows))],
            "window": int(f.settings.get("window", 32) or 32)}


def _bound_notes(n: dict) -> list:
    """The surprising features of Table 9 and Figure 6, explained (analysis/findings.py)."""
    rows = n["rows"]
    key = [(r["heads"], round(r["actual_L1"], 12), round(r["our_bound_theta_hat"], 12),
            round(r["prev_bound_theta_rel"], 12)) for r in rows]
    notes = [W.below_window_sentence(n["labels"], n["kept"], n["window"], n["reduction_pct"]),
             W.population_sentence(n["labels"], [r["heads"] for r in rows], [r["actual_L1"] for r in rows],
                                   n["actual_all"]),
             W.equal_rows_sentence(n["labels"], key, n["below"])]
    return [s for s in notes if s]


def _placebo(rec) -> dict:
    p = rec.attrs.get("placebo")
    return json.loads(p) if isinstance(p, str) and p else {}


def _findings(files: dict, mask_pair) -> list:
    """'What was found': the paper's claims against this run's numbers, then the caveat."""
    out = []
    bound = files.get("bound")
    if bound is not None:
        for crit, base in bound.base_pairs:
            n = _bound_numbers(bound, crit, base)
            bi = F._budget_index(bound, None)
            out.append(W.head_share_sentence(crit, base, n["labels"][bi],
                                             n["rows"][bi]["share_head_means_L_below_base"]))
    ev = files.get("eval")
    if ev is not None and ev.budgets:
        acc = FE.accuracy_table(ev)
        b = min(range(len(ev.budgets)), key=lambda i: abs(ev.budgets[i] - 0.2))
        out.append(W.accuracy_sentence(ev.budgets[b], {m: acc[m][b] for m in ev.methods}, acc["full"],
                                       len(ev.records)))
    mask = files.get("mask")
    if mask is not None:
        # Over every record, as the console's closing note counts them.
        ps = [p for p in (_placebo(r) for r in mask.records) if p]
        requested, found = sum(int(p.get("requested", 0)) for p in ps), sum(int(p.get("found", 0)) for p in ps)
        if ps and found < requested:
            short = next(p for p in ps if int(p.get("found", 0)) < int(p.get("requested", 0)))
            out.append(W.placebo_sentence(requested, found, float(ps[0].get("tolerance", 0)),
                                          float(short.get("best_ratio", float("nan")))))
    any_file = next(iter(files.values()))
    counts = [len(f.records) for f in files.values() if getattr(f, "records", None)] or [1]
    out.append(W.caveat_sentence(any_file.model, min(counts), max(counts)))
    return out


def _protocol_note(eval_file, mask_pair_files) -> str:
    if eval_file is None or not mask_pair_files:
        return ""
    acc = FE.accuracy_table(eval_file)
    budget = mask_pair_files[0].budget_fraction
    if budget is not None and len(eval_file.budgets):
        b = min(range(len(eval_file.budgets)), key=lambda i: abs(eval_file.budgets[i] - budget))
        eval_acc = {m: acc[m][b] for m in eval_file.methods}
    else:
        eval_acc = {}
    logp = {}
    for m in mask_pair_files:
        rec = m.records[0]
        logp[m.method] = (float(rec.runs["target"].attrs.get("logp_answer", float("nan"))),
                          float(rec.attrs.get("logp_answer_full", float("nan"))))
    shown = str(mask_pair_files[0].settings.get("budget", "?"))  # as given: 0.2 or 20%
    return W.protocol_sentence(len(mask_pair_files[0].records), shown, len(eval_file.records),
                               str(eval_file.settings.get("compress", "context")), logp, eval_acc)


def _eval_section(f, out_dir: Path, fig_dir: Path, lines: list, note: str = ""):
    """`ckv eval`: accuracy per method x budget (table and Figure 2's layout), and the change
    of log p(answer) against mean L1 with Spearman's rho per method."""
    lines += ["## Answers under eviction (`ckv eval`)", "", _provenance(f)]
    acc = FE.accuracy_table(f)
    pairs = FE.delta_logp_pairs(f)
    head = "| method | " + " | ".join(f"{100 * b:g}%" for b in f.budgets) + " | ρ(L1, Δ log p) | pairs |"
    lines += [f"Accuracy (the task's score, mean over {len(f.records)} records; full cache "
              f"{acc['full']:.3f}) per method and budget, and Spearman's ρ between a run's mean L1 "
              "and its change of log p(answer) against the full cache:", "",
              head, "|---|" + "---:|" * (len(f.budgets) + 2)]
    for m in f.methods:
        rho = FE.spearman(*pairs[m])
        lines.append(f"| {m} | " + " | ".join(f"{a:.3f}" for a in acc[m])
                     + f" | {rho:.3f} | {pairs[m][0].size} |")
    lines.append("")
    if note:
        lines += [note, ""]
    _figure(FE.accuracy_vs_budget(f, fig_dir), out_dir, lines)
    _figure(FE.logp_vs_l1(f, fig_dir), out_dir, lines)
    if FE.along_answer(f):  # ckv eval --track-steps
        lines += ["The perturbation along the answer (`--track-steps`): both caches are fed the full "
                  "cache's answer, and each step's mean L1 and next-token KL is measured against the "
                  "full cache (docs/EVAL.md \"Along the answer\").", ""]
        _figure(FE.perturbation_along_answer(f, fig_dir), out_dir, lines)


def write_report(out_dir, bound=None, check=None, mask=None, dump=None, attn=None,
                 mask_pair=None, eval_file=None) -> Path:
    """Write out_dir/report.md; returns its path. Inputs are paths (any may be None);
    attn = (layer, head) for the dump's attention figure (default: middle layer, head 0);
    mask_pair = (base, crit): `ckv mask --method X` and `--method criticalkv(X)` at one
    budget on the bound's prompts, for Figure 5 (needs bound); eval_file: a `ckv eval`
    output (accuracy against budget, log p change against L1)."""
    out_dir = Path(out_dir)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    lines = ["# CriticalKV analysis report", ""]
    files = [(k, open_ckv(p)) for k, p in (("bound", bound), ("check", check), ("mask", mask),
                                           ("dump", dump), ("eval", eval_file)) if p]
    if not files:
        raise ValueError("no input: give --bound, --check, --mask, --dump and/or --eval")
    if mask_pair and not bound:
        raise ValueError("--mask-pair (Figure 5) needs --bound of the same prompts")
    mask_file = next((f for k, f in files if k == "mask"), None)
    models = sorted({f.model for _, f in files})
    lines += [f"Model: {', '.join(models)}. Generated by `python3 -m analysis.report` from "
              f"{len(files)} ckv output(s).", ""]
    pair_files = [open_ckv(p) for p in mask_pair] if mask_pair else []
    eval_f = next((f for k, f in files if k == "eval"), None)
    protocol = _protocol_note(eval_f, pair_files)
    lines += ["## What was found", ""] + [" ".join(_findings(dict(files), mask_pair)), ""]
    for kind, f in files:
        if kind == "bound":
            lines += ["## Perturbation bounds (`ckv bound`)", "", _provenance(f)]
            for crit, base in f.base_pairs:
                _, _, rows = T.table9(f, crit)
                lines += [f"### Table 9: {crit} vs {base}", "",
                          f"Protocol: {f.protocol}. Actual L1, Our and Prev. bound over one "
                          "population: the heads where both methods' S1 ≥ 1/2 (`Heads`); "
                          "Ratio = Our/Prev; L < base: the share of heads whose mean L over "
                          "records is lower (the paper's Figure 4), then per record; * budget "
                          "below the snapkv window.", "",
                          T.to_markdown(rows)]
                notes = _bound_notes(_bound_numbers(f, crit, base))
                if notes:
                    lines += [" ".join(notes), ""]
                fig = F.reduction_heatmap(f, fig_dir, crit)
                _figure(fig, out_dir, lines)
                label = f.budget_labels[F._budget_index(f, None)]
                lines += [f"Per-layer statistics of the per-head reduction L1({base}) − "
                          f"L1({crit}), budget {label}:", "",
                          T.to_markdown(T.head_stats(f, crit), T.HEAD_COLUMNS, T.HEAD_HEADERS)]
                _figure(F.tightness(f, fig_dir, crit), out_dir, lines)
            if len(f.budget_labels) > 1 and f.base_pairs:
                _figure(F.reduction_vs_budget(f, fig_dir), out_dir, lines)
            _figure(F.kept_heatmap(f, fig_dir, f.methods[-1]), out_dir, lines)
        elif kind == "check":
            lines += ["## Assumption 3.4 (`ckv check`)", "", _provenance(f)]
            for ai in range(len(f.alphas)):
                _figure(F.assumption_heatmap(f, fig_dir, ai), out_dir, lines)
        elif kind == "mask":
            lines += ["## Propagated eviction (`ckv mask`)", "", _provenance(f)]
            rec = f.records[0]
            lines += ["| run | spans | Δθ total | KL | top-1 agree | log p(answer) |",
                      "|---|---|---:|---:|---|---:|"]
            for name in sorted(rec.runs, key=lambda s: (s != "target", s)):
                a = rec.runs[name].attrs
                sp = [list(map(int, a.get("spans", [])))]
                lines.append(f"| {name} | {sp[0]} | {float(a.get('delta_theta_total', float('nan'))):.4g} "
                             f"| {float(a.get('kl', float('nan'))):.3g} | {a.get('top1_agree', '')} "
                             f"| {float(a.get('logp_answer', float('nan'))):.3f} |")
            lines += ["", f"Unmasked log p(answer {rec.attrs.get('answer', '')!r}) = "
                      f"{float(rec.attrs.get('logp_answer_full', float('nan'))):.3f}.", ""]
            p = _placebo(rec)
            if p:
                lines += [W.placebo_sentence(int(p.get("requested", 0)), int(p.get("found", 0)),
                                             float(p.get("tolerance", 0)),
                                             float(p.get("best_ratio", float("nan")))), ""]
            _figure(F.propagated(f, fig_dir), out_dir, lines)
        elif kind == "dump":
            lines += ["## Attention over positions (`ckv dump`)", "", _provenance(f)]
            default = attn or (int(f.model_attrs["n_layer"]) // 2, 0)
            try:
                # with the overlay, the head where raw and corrected differ most
                layer, head = (F.most_evicted_head(f, mask_file)[:2] if mask_file and not attn
                               else default)
                fig = F.attention(f, fig_dir, layer, head, mask=mask_file)
            except ValueError as e:      # the mask file is of another prompt: attention alone
                lines += [f"(No eviction overlay: {e}.)", ""]
                fig = F.attention(f, fig_dir, *default)
            _figure(fig, out_dir, lines)
            f.close()
        elif kind == "eval":
            _eval_section(f, out_dir, fig_dir, lines, protocol)
    if mask_pair:
        base_m, crit_m = pair_files
        lines += ["## Per-layer reduction, isolated and propagated (Figure 5)", "",
                  "Isolated: `ckv bound` evicts one layer at a time from the unmasked pass. "
                  "Propagated: `ckv mask --method M --budget B` selects and evicts in every "
                  "layer of one masked pass, so each layer sees the earlier layers' eviction.",
                  "", *([protocol, ""] if protocol else []), _provenance(base_m), _provenance(crit_m),
                  "| --method | KL(full ‖ masked) | top-1 agree | log p(answer) masked / full |",
                  "|---|---:|---|---:|"]
        for m in (base_m, crit_m):
            for rec in m.records:
                a = rec.runs["target"].attrs
                lines.append(f"| {m.method} (record {rec.id}) | {float(a.get('kl', float('nan'))):.3g} "
                             f"| {a.get('top1_agree', '')} | {float(a.get('logp_answer', float('nan'))):.3f}"
                             f" / {float(rec.attrs.get('logp_answer_full', float('nan'))):.3f} |")
        lines.append("")
        bound_file = next(f for k, f in files if k == "bound")
        _figure(F.reduction_per_layer(bound_file, fig_dir, base_m, crit_m), out_dir, lines)
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m analysis.report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bound")
    p.add_argument("--check")
    p.add_argument("--mask")
    p.add_argument("--dump", help="a ckv dump with --what attn (attention figure)")
    p.add_argument("--attn", help="LAYER,HEAD for the attention figure")
    p.add_argument("--mask-pair", nargs=2, metavar=("BASE", "CRIT"),
                   help="ckv mask --method X and --method criticalkv(X) at one --budget, of the "
                        "--bound prompts (Figure 5)")
    p.add_argument("--eval", help="a ckv eval output (answers under eviction)")
    p.add_argument("-o", "--out-dir", default="report")
    a = p.parse_args(argv)
    try:
        attn = tuple(int(x) for x in a.attn.split(",")) if a.attn else None
        path = write_report(a.out_dir, a.bound, a.check, a.mask, a.dump, attn, a.mask_pair, a.eval)
    except (SchemaError, KeyError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `ckv eval` figures (docs/EVAL.md): accuracy against budget per method (the layout of
the paper's Figure 2, the full cache as a horizontal line), and per record x budget the
change of log p(answer) against the full cache over the run's mean L1 at the first decoded
token, with Spearman's rank correlation per method. Both are computed from the HDF5 file's
runs (not from its JSON summary), so a test can compare them with the summary ckv wrote.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .ckv_reader import EvalFile
from .plotting import Figure, _header, _save


def spearman(x, y) -> float:
    """Spearman's rank correlation with average ranks for ties (ckv's eval_schema.cpp
    definition); NaN for fewer than 3 pairs or a constant side."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 3 or x.size != y.size:
        return float("nan")

    def ranks(v):
        order = np.argsort(v, kind="stable")
        r = np.empty(v.size)
        sv = v[order]
        i = 0
        while i < v.size:
            j = i
            while j + 1 < v.size and sv[j + 1] == sv[i]:
                j += 1
            r[order[i:j + 1]] = (i + j) / 2.0
            i = j + 1
        return r

    rx, ry = ranks(x), ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    sxx, syy = float((dx * dx).sum()), float((dy * dy).sum())
    if sxx == 0 or syy == 0:
        return float("nan")
    return float((dx * dy).sum() / np.sqrt(sxx * syy))


def _scored_mean(runs) -> float:
    s = [r.score for r in runs if r.scores]
    return float(np.mean(s)) if s else float("nan")


def accuracy_table(f: EvalFile) -> dict:
    """{'full': accuracy, method: [accuracy per budget of f.budgets]}: the mean of the task's
    headline score over the records that have a task."""
    out = {"full": _scored_mean([r.full for r in f.records])}
    for m in f.methods:
        out[m] = [_scored_mean([run for r in f.records for run in r.runs[1:]
                                if run.method == m and run.fraction == b]) for b in f.budgets]
    return out


def delta_logp_pairs(f: EvalFile) -> dict:
    """method -> (mean L1 [p], log p(answer) run minus full [p]) over records x budgets that
    have a reference answer."""
    out = {}
    for m in f.methods:
        xs, ys = [], []
        for r in f.records:
            full = r.full.logp_answer
            for run in r.runs[1:]:
                if run.method == m and np.isfinite(run.logp_answer) and np.isfinite(full):
                    xs.append(run.mean_l1)
                    ys.append(run.logp_answer - full)
        out[m] = (np.array(xs), np.array(ys))
    return out


def accuracy_vs_budget(f: EvalFile, out_dir) -> Figure:
    """Figure 2's layout: accuracy (the task's headline score, mean over records) against the
    kept share of the evictable entries, one line per method, the full cache dashed."""
    acc = accuracy_table(f)
    x = 100 * np.asarray(f.budgets)
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    for m in f.methods:
        ax.plot(x, acc[m], marker="o", label=m)
    ax.axhline(acc["full"], color="black", linestyle="--", linewidth=1, label="full cache")
    ax.set_xscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{v:g}%" for v in x])
    ax.minorticks_off()
    ax.set_xlabel("budget (kept share of the evictable entries)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.03, 1.03)
    ax.legend(fontsize=7)
    s = f.settings
    ax.set_title(f"Accuracy under eviction (ckv eval, compress {s.get('compress', 'context')})\n"
                 f"{_header(f)}", fontsize=8)
    name = "eval_accuracy_vs_budget"
    return Figure(name, fig, _save(fig, out_dir, name),
                  {"budgets": np.asarray(f.budgets), "accuracy": {m: np.asarray(acc[m]) for m in f.methods},
                   "full": acc["full"]}, [], f.command_line,
                  f"Accuracy against budget per method over {len(f.records)} records (the paper's "
                  f"Figure 2 layout); the dashed line is the full cache ({acc['full']:.3f}).")


def logp_vs_l1(f: EvalFile, out_dir) -> Figure:
    """Per record x budget: log p(answer) with the compressed cache minus with the full cache,
    against the run's mean L1 (layers and heads, first decoded token); Spearman's rho per
    method in the legend."""
    pairs = delta_logp_pairs(f)
    rho = {m: spearman(*pairs[m]) for m in f.methods}
    fig, ax = plt.subplots(figsize=(5.6, 4.2))
    for m in f.methods:
        xs, ys = pairs[m]
        ax.scatter(xs, ys, s=14, alpha=0.75, label=f"{m} (ρ = {rho[m]:.2f}, n = {xs.size})")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlabel("mean L1 of Δo at the first decoded token (layers × heads)")
    ax.set_ylabel("log p(answer): compressed − full")
    ax.legend(fontsize=7)
    ax.set_title(f"Answer log-likelihood change against perturbation (ckv eval)\n{_header(f)}", fontsize=8)
    name = "eval_logp_vs_l1"
    return Figure(name, fig, _save(fig, out_dir, name),
                  {"l1": {m: pairs[m][0] for m in f.methods}, "delta_logp": {m: pairs[m][1] for m in f.methods},
                   "spearman": rho}, [], f.command_line,
                  "Change of log p(reference answer) under each method and budget against the run's "
                  "mean L1; Spearman's ρ per method: "
                  + ", ".join(f"{m} {rho[m]:.2f}" for m in f.methods) + ".")


def along_answer(f: EvalFile, layers=None) -> dict:
    """(method, fraction) -> {'steps': [S], 'l1', 'theta_hat', 'kl': means over the records
    that reach each step, 'records': how many do}: `ckv eval --track-steps` (docs/EVAL.md
    "Along the answer"), each record's value the mean over layers and heads, as ckv's JSON
    summary `along_answer`; with `layers` (model layer indices) the mean over those layers
    only (the KL is the model's, whatever the layers)."""
    acc = {}
    for r in f.records:
        for run in r.runs[1:]:
            if "step_kl" not in run.steps:
                continue
            a = acc.setdefault((run.method, run.fraction), {"l1": [], "theta_hat": [], "kl": []})
            for name, key in (("l1", "step_l1"), ("theta_hat", "step_theta_hat")):
                x = run.steps[key]                                # [step, layer, head]
                if layers is not None:
                    x = x[:, list(layers), :]
                a[name].append(x.reshape(x.shape[0], -1).mean(axis=1))
            a["kl"].append(np.asarray(run.steps["step_kl"], float))
    out = {}
    for key, a in acc.items():
        n = max(len(x) for x in a["kl"])
        out[key] = {"steps": np.arange(1, n + 1)}
        for name, xs in a.items():
            sums, counts = np.zeros(n), np.zeros(n)
            for x in xs:
                sums[:len(x)] += x
                counts[:len(x)] += 1
            out[key][name] = sums / np.maximum(counts, 1)
        out[key]["records"] = counts
    return out


def perturbation_along_answer(f: EvalFile, out_dir) -> Figure:
    """Mean L1 of Δo (layers × heads × records) and the next-token KL against the answer
    step, one line per method × budget: does a selection that perturbs least at the first
    decoded token stay the least perturbing over the answer?"""
    curves = along_answer(f)
    if not curves:
        raise ValueError(f"{f.path}: no run has --track-steps data (run ckv eval --track-steps N)")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 3.9))
    # One colour per method, one line style per budget.
    methods = [m for m in f.methods if any(k[0] == m for k in curves)]
    budgets = sorted({b for _, b in curves})
    styles = ["-", "--", ":", "-."]
    for (m, b), c in sorted(curves.items(), key=lambda kv: (kv[0][1], methods.index(kv[0][0]))):
        label = f"{m} {100 * b:g}%"
        style = dict(color=f"C{methods.index(m) % 10}", linestyle=styles[budgets.index(b) % len(styles)], marker=".")
        ax1.plot(c["steps"], c["l1"], label=label, **style)
        ax2.plot(c["steps"], c["kl"], label=label, **style)
    ax1.set_xlabel("answer step (teacher-forced with the full cache's tokens)")
    ax1.set_ylabel("mean L1 of Δo (layers × heads)")
    ax2.set_xlabel("answer step")
    ax2.set_ylabel("KL(full ‖ compressed) of the next token, nats")
    ax2.set_yscale("symlog", linthresh=1e-3)
    ax1.legend(fontsize=7)
    fig.suptitle(f"Perturbation along the answer (ckv eval --track-steps)\n{_header(f)}", fontsize=8)
    name = "eval_perturbation_along_answer"
    first_last = ", ".join(f"{m} {100 * b:g}% {c['l1'][0]:.3g}→{c['l1'][-1]:.3g}" for (m, b), c in curves.items())
    return Figure(name, fig, _save(fig, out_dir, name),
                  {"curves": {f"{m} {100 * b:g}%": c for (m, b), c in curves.items()}}, [], f.command_line,
                  "Mean L1 of the attention-output change and next-token KL at each answer step, both "
                  f"caches fed the full cache's answer; mean L1 first → last step: {first_last}.")

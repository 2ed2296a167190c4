"""The report's prose, generated from the numbers: what was found (whether the paper's
claims hold on this model, with the caveats) and what each figure's surprising feature
means. Every function takes plain numbers (lists, dicts) so tests/python/test_findings.py
can feed it a synthetic case where a claim holds and one where it does not; report.py
gathers the numbers from the ckv outputs.

The paper's claims (docs/RESULTS.md, from Feng et al.): criticalkv lowers the actual
perturbation L against its base method in 92 % of heads on Llama-3.1-8B and 86 % on
Mistral-7B at a 20 % budget, and keeps or improves answer quality under the same budget.
"""
from __future__ import annotations

import math

PAPER_SHARE_LOW, PAPER_SHARE_HIGH = 0.86, 0.92   # Mistral-7B, Llama-3.1-8B (docs/RESULTS.md)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _budget(label: str) -> str:
    return label.replace("%", " %")


def head_share_sentence(crit: str, base: str, label: str, share: float) -> str:
    """The paper's Figure-4 statistic at one budget: the share of heads whose mean L over
    records is lower with `crit` than with `base`."""
    if math.isnan(share):
        return f"At {_budget(label)} no head could be compared ({crit} against {base})."
    verdict = ("as in the paper" if share >= PAPER_SHARE_LOW
               else "a majority, but short of the paper" if share > 0.5
               else "so the paper's claim does not hold on this model")
    return (f"{crit} lowers the actual perturbation L1 against {base} in {_pct(share)} of heads "
            f"at {_budget(label)}, {verdict} (the paper: 86–92 %).")


def accuracy_sentence(budget: float, accuracy: dict, full: float, records: int) -> str:
    """Eval accuracy per method at one budget (fraction), beside the full cache."""
    parts = [f"{m} {a:.2f}" for m, a in accuracy.items()]
    best = max(accuracy.values()) if accuracy else float("nan")
    leaders = [m for m, a in accuracy.items() if a == best]
    crit = [m for m in accuracy if m.startswith("criticalkv(")]
    text = (f"Answers decoded with a compressed cache at {100 * budget:g} % ({records} records): "
            f"accuracy {', '.join(parts)}, against {full:.2f} with the full cache")
    if crit and len(accuracy) > 1:
        c = crit[0]
        base = c[len("criticalkv("):-1]
        if base in accuracy:
            diff = accuracy[c] - accuracy[base]
            text += (f"; {c} is {'above' if diff > 0 else 'below' if diff < 0 else 'level with'} "
                     f"{base}" + (f" by {abs(diff):.2f}" if diff else ""))
            text += (", as the paper finds" if diff >= 0 else ", against the paper's finding")
    elif len(leaders) < len(accuracy):
        text += f"; best: {', '.join(leaders)}"
    return text + "."


def caveat_sentence(model: str, records: int) -> str:
    """The scope of the numbers: the model (a small quantised one is named as such) and how
    many records they come from, against the paper's 7-8B models and 200 samples."""
    n = f"{records} record{'s' if records != 1 else ''}"
    small = "135M" in model
    quant = next((q for q in ("Q4_0", "Q4_1", "Q4_K", "Q6_K", "Q8_0") if q in model), "")
    what = (f"a 135M-parameter model" + (f" quantised to {quant}" if quant else "")) if small else "this model"
    return (f"Caveat: these numbers are {what} ({model}) on {n}, not the paper's 7–8B models on 200 "
            "MultiNews samples; they say how the method behaves here, not whether the paper is right "
            "about its models.")


def below_window_sentence(labels: list, kept: list, window: int, reduction_pct: list) -> str:
    """Budgets where half the kept entries is below the snapkv window: stage 1 of criticalkv
    (half the budget chosen by the base's scores) is then all window entries, and the rest
    is chosen by value norm alone, so the reduction against the base can be negative."""
    low = [i for i, k in enumerate(kept) if k / 2 < window]
    if not low:
        return ""
    where = ", ".join(f"{_budget(labels[i])} (k = {kept[i]}, reduction {reduction_pct[i]:+.0f} %)" for i in low)
    return (f"Below-window budgets: at {where}, half the budget is below the {window}-token observation "
            "window, so criticalkv's stage 1 (half the budget, chosen by the base's scores) is all window "
            "entries and the rest is chosen by value norm alone; a reduction that dips or turns negative "
            "there is that mechanism, not a bug.")


def population_sentence(labels: list, heads: list, actual: list, actual_all: list) -> str:
    """Table 9's Actual L1 is over the heads where both methods' S1 >= 1/2, whose number
    changes with the budget: say so when the population changes, with the all-heads mean."""
    if len(set(heads)) <= 1:
        return ""
    fall_rise = any(a > b for a, b in zip(actual, actual[1:])) and any(a < b for a, b in zip(actual, actual[1:]))
    pairs = ", ".join(f"{_budget(l)}: {h} heads, {a:.3g} (all heads {aa:.3g})"
                      for l, h, a, aa in zip(labels, heads, actual, actual_all))
    return ("Actual L1 in Table 9 is the mean over the heads where both methods' S1 ≥ 1/2, and that "
            f"population changes with the budget ({pairs})"
            + ("; its fall-then-rise is the population changing, the all-heads mean is the one to read "
               "across budgets." if fall_rise else "; compare budgets with the all-heads mean."))


def equal_rows_sentence(labels: list, rows: list, below: list) -> str:
    """Adjacent Table-9 rows with the same numbers: below the window the budgets can keep the
    same entries (every method keeps the window), which is correct, not a copy."""
    same = [(i, i + 1) for i in range(len(rows) - 1) if rows[i] == rows[i + 1]]
    if not same:
        return ""
    text = "; ".join(f"{_budget(labels[i])} and {_budget(labels[j])}" for i, j in same)
    why = (" both are below the snapkv window, where the methods keep the same entries (adakv equals "
           "snapkv there), so equal rows are expected" if all(below[i] and below[j] for i, j in same)
           else " the methods kept the same entries at both budgets")
    return f"Equal rows ({text}):{why}."


def placebo_sentence(requested: int, found: int, tolerance: float, best_ratio: float) -> str:
    if requested <= 0:
        return ""
    if found >= requested:
        return (f"Placebos: {found} of {requested} asked for were found within --match-tol {tolerance:g} "
                "of the target's Delta_theta.")
    return (f"Placebos: {requested} asked for, {found} found within --match-tol {tolerance:g} of the target's "
            f"Delta_theta (the closest candidate's ratio was {best_ratio:.2f}); the needle carries more "
            "value-weighted attention than most spans of its length. A larger --match-tol finds more.")


def protocol_sentence(mask_records: int, mask_budget: str, eval_records: int, eval_compress: str,
                      mask_logp: dict, eval_acc: dict) -> str:
    """Figure 5 (ckv mask --method) and the eval section measure different things; say how,
    so that snapkv losing the needle in one and answering in the other does not read as a
    contradiction."""
    lost = [m for m, (masked, full) in mask_logp.items() if masked < full - 5]
    answers = [m for m, a in eval_acc.items() if a > 0]
    clash = sorted(set(lost) & set(answers))
    text = (f"Two protocols: Figure 5 evicts inside one masked pass over {mask_records} record"
            f"{'s' if mask_records != 1 else ''} (`ckv mask --method M --budget {mask_budget}`: only the "
            "context is evicted, the question's rows read it, log p(answer) is teacher-forced), while the "
            f"eval section decodes answers from a KV cache compressed with --compress {eval_compress} on "
            f"{eval_records} other records (`ckv eval`)")
    if clash:
        text += (f"; so {', '.join(clash)} can lose the needle's log-probability there and still answer "
                 "here: different prompts and a different eviction")
    return text + "."

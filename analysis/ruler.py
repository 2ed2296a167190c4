"""RULER under eviction in the paper's layout (its Table 1 and Figure 1a): per task and the
average over tasks, the full cache and each method at each budget, with the loss against
the full cache. Input: one `ckv eval` output per task (scripts/ruler_results.sh writes
DIR/eval_<task>.h5 over `ckv ruler --task <task>` records; docs/RULER.md "Under eviction").

    python3 -m analysis.ruler DIR [-o REPORT_DIR]     # DIR/ruler_table.md, figure, report.md

A task's score is RULER's: the mean over its records of the record's metric
(string_match_all or string_match_part, which `ckv eval` stores as each run's `score`) x 100;
the average is the mean of the task scores (tasks with no records are left out and named).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .ckv_reader import SchemaError, open_ckv  # noqa: E402
from .plotting import Figure, _save  # noqa: E402

# RULER's 13 tasks in its table order (lib/data/ruler.cpp).
TASKS = ["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
         "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2"]


def task_scores(eval_file) -> dict:
    """{'full': score, (method, fraction): score} of one task's eval file: the mean of the
    runs' `score` (RULER's metric, 0-1) over the records, x 100."""
    out = {"full": 100 * float(np.mean([r.full.score for r in eval_file.records]))}
    for m in eval_file.methods:
        for b in eval_file.budgets:
            s = [run.score for r in eval_file.records for run in r.runs[1:]
                 if run.method == m and run.fraction == b]
            if s:
                out[(m, b)] = 100 * float(np.mean(s))
    return out


def collect(directory) -> dict:
    """{'tasks': [task], 'records': {task: n}, 'scores': {task: task_scores}, 'methods',
    'budgets', 'command_lines'} from DIR/eval_<task>.h5 of every task present."""
    directory = Path(directory)
    tasks, records, scores, lines = [], {}, {}, []
    methods, budgets = [], []
    for t in TASKS:
        path = directory / f"eval_{t}.h5"
        if not path.exists():
            continue
        f = open_ckv(path)
        if f.schema != "ckv.eval":
            raise SchemaError(path, f"schema {f.schema}, not ckv.eval")
        tasks.append(t)
        records[t] = len(f.records)
        scores[t] = task_scores(f)
        lines.append(f.command_line)
        methods += [m for m in f.methods if m not in methods]
        budgets += [b for b in f.budgets if b not in budgets]
    if not tasks:
        raise FileNotFoundError(f"{directory}: no eval_<task>.h5 of a RULER task ({', '.join(TASKS)})")
    return {"tasks": tasks, "records": records, "scores": scores, "methods": methods,
            "budgets": sorted(budgets), "command_lines": lines}


def average(c: dict, key) -> float:
    """The mean over tasks of one column (key 'full' or (method, fraction)); NaN when a task
    lacks it."""
    vals = [c["scores"][t].get(key, float("nan")) for t in c["tasks"]]
    return float(np.mean(vals))


def table_markdown(c: dict) -> str:
    """The paper's layout: one row per method x budget (the full cache first), one column per
    task, then the average and its loss against the full cache."""
    tasks = c["tasks"]
    head = "| method | budget | " + " | ".join(tasks) + " | average | loss vs full |"
    sep = "|---|---:|" + "---:|" * (len(tasks) + 2)
    full_avg = average(c, "full")
    rows = [head, sep,
            "| full cache | 100% | " + " | ".join(f"{c['scores'][t]['full']:.2f}" for t in tasks)
            + f" | {full_avg:.2f} | 0.00 |"]
    for b in sorted(c["budgets"], reverse=True):
        for m in c["methods"]:
            key = (m, b)
            if not any(key in c["scores"][t] for t in tasks):
                continue
            cells = [c["scores"][t].get(key, float("nan")) for t in tasks]
            avg = average(c, key)
            rows.append(f"| {m} | {100 * b:g}% | " + " | ".join(f"{v:.2f}" for v in cells)
                        + f" | {avg:.2f} | {avg - full_avg:+.2f} |")
    n = ", ".join(f"{t} {c['records'][t]}" for t in tasks)
    missing = [t for t in TASKS if t not in tasks]
    notes = [f"Records per task: {n}."]
    if missing:
        notes.append(f"Tasks without an eval file (left out of the average): {', '.join(missing)}.")
    return "\n".join(rows) + "\n\n" + " ".join(notes) + "\n"


def average_vs_budget(c: dict, out_dir) -> Figure:
    """Figure 1a's layout: the average RULER score against the budget, one line per method,
    the full cache dashed."""
    budgets = sorted(c["budgets"])
    x = 100 * np.asarray(budgets)
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    avg = {}
    for m in c["methods"]:
        avg[m] = np.array([average(c, (m, b)) for b in budgets])
        ax.plot(x, avg[m], marker="o", label=m)
    full = average(c, "full")
    ax.axhline(full, color="black", linestyle="--", linewidth=1, label="full cache")
    ax.set_xscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{v:g}%" for v in x])
    ax.minorticks_off()
    ax.set_xlabel("budget (kept share of the evictable entries)")
    ax.set_ylabel(f"RULER average over {len(c['tasks'])} tasks")
    ax.set_ylim(-2, 102)
    ax.legend(fontsize=7)
    ax.set_title("RULER under eviction (ckv ruler + ckv eval)", fontsize=9)
    name = "ruler_average_vs_budget"
    return Figure(name, fig, _save(fig, out_dir, name), {"budgets": np.asarray(budgets), "average": avg,
                                                         "full": full}, [], c["command_lines"],
                  f"Average RULER score over {len(c['tasks'])} tasks against budget, per method; the dashed "
                  f"line is the full cache ({full:.2f}).")


def write_report(directory, out_dir=None) -> Path:
    """DIR/ruler_table.md and REPORT_DIR/report.md with the table and the figure."""
    directory = Path(directory)
    out_dir = Path(out_dir) if out_dir else directory / "report"
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    c = collect(directory)
    table = table_markdown(c)
    (directory / "ruler_table.md").write_text(table)
    fig = average_vs_budget(c, out_dir / "figures")
    rel = Path(fig.paths[0]).relative_to(out_dir)
    plt.close(fig.fig)
    lines = ["# RULER under eviction", "",
             "RULER's synthetic tasks generated by `ckv ruler` for this model's tokenizer, answered under "
             "each method's compressed cache by `ckv eval` and scored as RULER scores them (docs/RULER.md). "
             "Scores are x 100; the loss is the average's difference from the full cache's.", "",
             table, f"![{fig.name}]({rel})", "", f"*{fig.caption}*", "", "Data from:", ""]
    lines += [f"    {line}" for line in c["command_lines"]]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m analysis.ruler", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory", help="where scripts/ruler_results.sh wrote eval_<task>.h5")
    p.add_argument("-o", "--out-dir", default=None, help="report directory (default DIR/report)")
    a = p.parse_args(argv)
    try:
        path = write_report(a.directory, a.out_dir)
    except (SchemaError, FileNotFoundError) as e:
        print(f"analysis.ruler: {e}", file=sys.stderr)
        return 1
    print((Path(a.directory) / "ruler_table.md").read_text(), end="")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

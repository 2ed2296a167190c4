"""analysis/ruler.py: RULER's table (per task, the average, the loss against the full cache)
and Figure 1a's layout from one `ckv eval` file per task, against scores computed here by
hand from RULER's definition (task score = mean over records of the run's metric x 100,
average = mean of the task scores). The eval files are written with h5py in ckv.eval's
schema (lib/output/eval_schema.h), with scores chosen so every cell differs.
"""
import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from analysis import ruler as RU  # noqa: E402

METHODS = ["snapkv", "criticalkv(snapkv)"]
BUDGETS = [0.2, 0.5]


def score(task_i, rec, method_i, budget_i):
    """A run's metric: the full cache (method_i -1) and each method x budget differ."""
    if method_i < 0:
        return [1.0, 0.5, 0.75][rec] - 0.05 * task_i
    return round(((task_i + 1) * 0.07 + rec * 0.11 + method_i * 0.13 + budget_i * 0.17) % 1.0, 6)


def write_eval(path, task_i, records=3):
    with h5py.File(path, "w") as f:
        f.attrs["schema"] = "ckv.eval"
        f.attrs["schema_version"] = 2
        f.attrs["command_line"] = f"ckv eval -i ruler_{task_i}.jsonl"
        f.attrs["settings"] = json.dumps({"compress": "context"})
        f.attrs["methods"] = METHODS
        f.attrs["budgets"] = BUDGETS
        for r in range(records):
            g = f.create_group(f"records/t{task_i}_{r}")
            g.attrs["complete"] = True
            g.attrs["index"] = r
            runs = [("full", 1.0, score(task_i, r, -1, 0))]
            runs += [(m, b, score(task_i, r, mi, bi)) for mi, m in enumerate(METHODS) for bi, b in enumerate(BUDGETS)]
            for k, (m, b, s) in enumerate(runs):
                rg = g.create_group(f"runs/{k}")
                rg.attrs["method"] = m
                rg.attrs["fraction"] = b
                rg.attrs["scores"] = json.dumps({"score": s})
                rg.create_dataset("tokens", data=np.zeros(2, np.int32))


@pytest.fixture()
def run_dir(tmp_path):
    tasks = ["niah_single_1", "vt", "qa_1"]
    for i, t in enumerate(tasks):
        write_eval(tmp_path / f"eval_{t}.h5", i)
    return tmp_path, tasks


def test_table_is_rulers_scores(run_dir):
    d, tasks = run_dir
    c = RU.collect(d)
    assert c["tasks"] == tasks  # RULER's order
    for i, t in enumerate(tasks):
        want_full = 100 * np.mean([score(i, r, -1, 0) for r in range(3)])
        assert c["scores"][t]["full"] == pytest.approx(want_full, abs=1e-9)
        for mi, m in enumerate(METHODS):
            for bi, b in enumerate(BUDGETS):
                want = 100 * np.mean([score(i, r, mi, bi) for r in range(3)])
                assert c["scores"][t][(m, b)] == pytest.approx(want, abs=1e-9)
    avg = np.mean([100 * np.mean([score(i, r, 1, 0) for r in range(3)]) for i in range(3)])
    full = np.mean([100 * np.mean([score(i, r, -1, 0) for r in range(3)]) for i in range(3)])
    assert RU.average(c, ("criticalkv(snapkv)", 0.2)) == pytest.approx(avg, abs=1e-9)
    md = RU.table_markdown(c)
    row = next(line for line in md.splitlines() if line.startswith("| criticalkv(snapkv) | 20% |"))
    cells = [x.strip() for x in row.strip("|").split("|")]
    assert cells[-2] == f"{avg:.2f}" and cells[-1] == f"{avg - full:+.2f}"
    assert md.splitlines()[2].startswith("| full cache | 100% |")
    assert "Tasks without an eval file" in md and "niah_multikey_1" in md  # the missing ones are named


def test_report_and_cli(run_dir, tmp_path):
    d, _ = run_dir
    r = subprocess.run([sys.executable, "-m", "analysis.ruler", str(d), "-o", str(tmp_path / "rep")],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "| full cache | 100% |" in r.stdout
    assert (d / "ruler_table.md").exists()
    text = (tmp_path / "rep/report.md").read_text()
    assert "figures/ruler_average_vs_budget.png" in text and "ckv eval -i ruler_0.jsonl" in text
    assert (tmp_path / "rep/figures/ruler_average_vs_budget.png").exists()


def test_empty_directory_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "analysis.ruler", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "no eval_<task>.h5" in r.stderr

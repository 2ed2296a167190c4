"""analysis/figures_eval.py and the report's `--eval` section on a small real `ckv eval` run
of the default model (4 NIAH records, 2 methods, 2 budgets).

The values each figure draws (the accuracy lines and the full-cache line, the scatter
points) are compared with ckv's own JSON summary (PREFIX.json: accuracy per method x
budget, mean change of log p(answer), Spearman's rho per method) and with the runs read
straight from the HDF5 file with h5py.
Environment: CKV_BINARY, CKV_MODEL; tests skip when either is absent.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
BINARY = os.environ.get("CKV_BINARY", str(ROOT / "build" / "ckv"))
MODEL = os.environ.get("CKV_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
METHODS = ["snapkv", "criticalkv(snapkv)"]
BUDGETS = [0.2, 0.5]
STEPS = 6  # --track-steps

pytestmark = pytest.mark.skipif(not (Path(BINARY).exists() and Path(MODEL).exists()),
                                reason="ckv binary or default model absent")

from analysis import figures as F  # noqa: E402
from analysis import figures_eval as FE  # noqa: E402
from analysis import report as R  # noqa: E402
from analysis.ckv_reader import EvalFile, SchemaError, open_ckv  # noqa: E402


def ckv(*args):
    r = subprocess.run([BINARY, "-q", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval")
    ckv("niah", "-m", MODEL, "--length", "256", "--count", "4", "--seed", "5",
        "--haystack", str(ROOT / "data/texts/constitution.txt"), "-o", str(tmp / "niah.jsonl"))
    ckv("eval", "-m", MODEL, "-t", "2", "-i", str(tmp / "niah.jsonl"), "--methods", ",".join(METHODS),
        "--budgets", ",".join(map(str, BUDGETS)), "--compress", "prompt", "--max-new-tokens", "8",
        "--track-steps", str(STEPS), "-o", str(tmp / "eval"))
    summary = json.loads((tmp / "eval.json").read_text())
    return tmp, summary


def summary_cell(summary, method, fraction, key):
    for row in summary["by_method_budget"]:
        if row["method"] == method and (method == "full" or abs(row["fraction"] - fraction) < 1e-12):
            return row[key]
    raise KeyError((method, fraction))


def h5_runs(path):
    """(record, method, fraction, mean_l1, logp_answer, logp full) straight from h5py."""
    out = []
    with h5py.File(path, "r") as f:
        for rid, g in f["records"].items():
            full = float(g["runs/0"].attrs["logp_answer"])
            for k in sorted(g["runs"].keys(), key=int)[1:]:
                a = g["runs"][k].attrs
                m = a["method"].decode() if isinstance(a["method"], bytes) else a["method"]
                out.append((rid, m, float(a["fraction"]), float(a["mean_l1"]), float(a["logp_answer"]), full))
    return out


def test_reader_reads_eval(run):
    tmp, summary = run
    f = open_ckv(tmp / "eval.h5")
    assert isinstance(f, EvalFile)
    assert f.methods == METHODS and f.budgets == BUDGETS
    assert len(f.records) == 4 == summary["records"]
    assert all(len(r.runs) == 1 + len(METHODS) * len(BUDGETS) and r.full.method == "full" for r in f.records)


def test_reader_refuses_other_eval_version(run, tmp_path):
    tmp, _ = run
    bad = tmp_path / "eval.h5"
    bad.write_bytes((tmp / "eval.h5").read_bytes())
    with h5py.File(bad, "r+") as f:
        f.attrs["schema_version"] = 4
    with pytest.raises(SchemaError, match="version 4"):
        open_ckv(bad)


def test_accuracy_vs_budget_draws_the_summary(run, tmp_path):
    tmp, summary = run
    fig = FE.accuracy_vs_budget(open_ckv(tmp / "eval.h5"), tmp_path)
    ax = fig.fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    for m in METHODS:
        x, y = lines[m].get_data()
        np.testing.assert_allclose(x, 100 * np.array(BUDGETS))
        want = [summary_cell(summary, m, b, "accuracy") for b in BUDGETS]
        np.testing.assert_allclose(y, want, rtol=0, atol=1e-12)
        np.testing.assert_allclose(fig.arrays["accuracy"][m], want, rtol=0, atol=1e-12)
    full = summary_cell(summary, "full", 1.0, "accuracy")
    np.testing.assert_allclose(lines["full cache"].get_ydata(), [full, full], rtol=0, atol=1e-12)
    assert fig.arrays["full"] == pytest.approx(full, abs=1e-12)
    for p in fig.paths:
        assert Path(p).stat().st_size > 1000


def test_logp_vs_l1_draws_the_runs_and_the_correlation(run, tmp_path):
    tmp, summary = run
    fig = FE.logp_vs_l1(open_ckv(tmp / "eval.h5"), tmp_path)
    ax = fig.fig.axes[0]
    rows = h5_runs(tmp / "eval.h5")
    for m, coll in zip(METHODS, ax.collections):
        pts = coll.get_offsets()
        want = np.array([(l1, lp - full) for _, mm, _, l1, lp, full in rows if mm == m])
        assert pts.shape == want.shape == (4 * len(BUDGETS), 2)
        np.testing.assert_allclose(np.asarray(pts), want, rtol=1e-12, atol=1e-12)
        rho = summary["correlation"][m]["spearman_l1_vs_delta_logp"]
        assert rho is not None and fig.arrays["spearman"][m] == pytest.approx(rho, abs=1e-12)
        assert f"ρ = {rho:.2f}" in coll.get_label()
        for b in BUDGETS:  # the mean change per budget is the summary's
            d = [lp - full for _, mm, fr, _, lp, full in rows if mm == m and fr == b]
            assert np.mean(d) == pytest.approx(summary_cell(summary, m, b, "delta_logp_answer"), abs=1e-9)


def test_along_answer_draws_the_summary_and_step_one_is_the_first_token(run, tmp_path):
    tmp, summary = run
    f = open_ckv(tmp / "eval.h5")
    fig = FE.perturbation_along_answer(f, tmp_path)
    assert (tmp_path / "eval_perturbation_along_answer.png").exists()
    with h5py.File(tmp / "eval.h5", "r") as h:
        for rid, g in h["records"].items():
            steps = g["step_tokens"][()]
            assert 1 <= steps.size <= STEPS
            assert np.array_equal(steps, g["runs/0/tokens"][()][:steps.size])  # the full cache's answer
            for k in list(g["runs"].keys())[1:]:
                rg = g[f"runs/{k}"]
                assert rg["step_l1"].shape == (steps.size, h.attrs["n_layer"], h.attrs["n_head"])
                # step 1 is the first decoded token's query: the run's per-head l1
                np.testing.assert_allclose(rg["step_l1"][0], rg["l1"][()], rtol=1e-5, atol=1e-7)
                # Theorem 3.5: theta_hat bounds L1 at every step
                assert np.all(rg["step_theta_hat"][()] >= rg["step_l1"][()] * (1 - 1e-5) - 1e-6)
                # --compress prompt: step 1's row is the first row that reads the compressed cache
                assert rg["step_kl"][0] == pytest.approx(rg.attrs["kl"], rel=1e-6, abs=1e-9)
    for m in METHODS:
        for b in BUDGETS:
            want = summary_cell(summary, m, b, "along_answer")
            drawn = fig.arrays["curves"][f"{m} {100 * b:g}%"]
            np.testing.assert_allclose(drawn["l1"], want["mean_l1"], rtol=1e-6)
            np.testing.assert_allclose(drawn["kl"], want["kl"], rtol=1e-6, atol=1e-12)
            np.testing.assert_allclose(drawn["records"], want["records"])


def test_along_answer_table_per_layer_subset(run):
    # analysis.tables on an eval --track-steps file: each criticalkv(X) beside X over the
    # steps every record reaches, L1 averaged over the chosen layers, recomputed here from h5py.
    from analysis import tables as T
    tmp, _ = run
    f = open_ckv(tmp / "eval.h5")
    layers = [0, 7, 29]
    n, rows = T.along_answer_pairs(f, layers)
    with h5py.File(tmp / "eval.h5", "r") as h:
        groups = list(h["records"].values())
        assert n == min(g["step_tokens"].size for g in groups)
        for b in BUDGETS:
            row = next(r for r in rows if r["budget"] == f"{100 * b:g} %")
            mean = {}
            for m in METHODS:
                per_rec = []
                for g in groups:
                    k = next(k for k in g["runs"] if g[f"runs/{k}"].attrs["method"] in (m, m.encode())
                             and abs(g[f"runs/{k}"].attrs["fraction"] - b) < 1e-12)
                    per_rec.append(g[f"runs/{k}/step_l1"][()][:n][:, layers, :].mean(axis=(1, 2)))
                mean[m] = np.mean(per_rec, axis=0)
            base, crit = mean["snapkv"], mean["criticalkv(snapkv)"]
            assert row["base"] == "snapkv"
            assert row["l1_step1"].startswith(f"{base[0]:.2f} → {crit[0]:.2f}")
            assert row["steps_crit_lower"] == f"{int(np.sum(crit < base))} of {n}"
            if n > 1:
                assert row["l1_later"].startswith(f"{base[1:].mean():.2f} → {crit[1:].mean():.2f}")
    assert T.eval_layers(f, "all") is None
    with pytest.raises(ValueError, match="no local layers"):
        T.eval_layers(f, "local")  # SmolLM2 has no sliding layers
    assert T.eval_layers(f, "global") == list(range(int(f.attrs["n_layer"])))
    assert T.main([str(tmp / "eval.h5"), "--layers", "0,7,29"]) == 0


def test_spearman_matches_definition():
    # average ranks for ties: x ranks [1, 2.5, 2.5, 4], y ranks [4, 3, 2, 1]
    x, y = [1.0, 2.0, 2.0, 5.0], [9.0, 3.0, 2.0, 1.0]
    rx, ry = np.array([1, 2.5, 2.5, 4]), np.array([4, 3, 2, 1.0])
    want = np.corrcoef(rx, ry)[0, 1]
    assert FE.spearman(x, y) == pytest.approx(want, abs=1e-12)
    assert np.isnan(FE.spearman([1, 2], [3, 4]))
    assert np.isnan(FE.spearman([1, 1, 1], [3, 4, 5]))


def test_report_eval_section_and_cli(run, tmp_path):
    tmp, summary = run
    path = R.write_report(tmp_path / "rep", eval_file=tmp / "eval.h5")
    text = path.read_text()
    assert "## Answers under eviction (`ckv eval`)" in text
    assert "figures/eval_accuracy_vs_budget.png" in text and "figures/eval_logp_vs_l1.png" in text
    assert "ckv eval" in text  # the command line of the data
    for m in METHODS:
        cells = " | ".join(f"{summary_cell(summary, m, b, 'accuracy'):.3f}" for b in BUDGETS)
        assert f"| {m} | {cells} |" in text
    assert (tmp_path / "rep/figures/eval_accuracy_vs_budget.pdf").exists()
    out = tmp_path / "cli"
    assert F.main(["eval-accuracy", str(tmp / "eval.h5"), "-o", str(out)]) == 0
    assert (out / "eval_accuracy_vs_budget.png").exists()
    r = subprocess.run([sys.executable, "-m", "analysis.report", "--eval", str(tmp / "eval.h5"),
                        "-o", str(tmp_path / "rep2")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

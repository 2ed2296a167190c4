"""analysis/ on small real outputs of the default model (ckv bound, check, mask, dump).

The numbers each figure draws (the heatmap arrays from AxesImage.get_array(), the curves'
y data) and each table cell are compared with values computed here straight from the HDF5
files with h5py, and Table 9 also with the `table9` that ckv's C++ wrote to PREFIX.json.
Environment: CKV_BINARY, CKV_MODEL; tests skip when either is absent.
"""
import json
import os
import shutil
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
LAYERS = "0,1,14,29"

pytestmark = pytest.mark.skipif(not (Path(BINARY).exists() and Path(MODEL).exists()),
                                reason="ckv binary or default model absent")

from analysis import figures as F  # noqa: E402
from analysis import report as R  # noqa: E402
from analysis import tables as T  # noqa: E402
from analysis.ckv_reader import BoundFile, DumpFile, MaskFile, SchemaError, open_ckv  # noqa: E402


def ckv(*args):
    r = subprocess.run([BINARY, "-q", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckv")
    m = ["-m", MODEL, "-t", "2"]
    ckv("bound", *m, "--budgets", "0.1,0.2,0.4", "--layers", LAYERS, "-o", str(tmp / "bound"))
    ckv("check", *m, "--budgets", "0.1,0.2", "--layers", LAYERS, "-o", str(tmp / "check"))
    ckv("mask", *m, "--span-name", "answer_evidence", "--placebo", "1", "-o", str(tmp / "mask.h5"))
    rec = {"id": "code", "context": "Notes. The museum opens at nine. The secret code is 4417. "
           "The cafe closes at six. Parking is free on Sundays. The library is on Elm Street. ",
           "question": "What is the secret code? Answer:", "answer": "4417",
           "spans": {"needle": [[33, 57]], "distractor": [[59, 82]]}}
    (tmp / "rec.jsonl").write_text(json.dumps(rec) + "\n")
    ckv("dump", *m, "-i", str(tmp / "rec.jsonl"), "--layers", "0,2", "--what", "attn",
        "--attn-rows", "last:3", "-o", str(tmp / "dump.h5"))
    ckv("mask", *m, "-i", str(tmp / "rec.jsonl"), "--span-name", "needle", "--layers", "2",
        "-o", str(tmp / "mask_rec.h5"))
    # Figure 5: one niah record through ckv bound and a snapkv / criticalkv(snapkv) pair of
    # ckv mask --method at 20% (every layer masked)
    ckv("niah", "-m", MODEL, "--length", "256", "--seed", "3", "--depths", "0.5",
        "-o", str(tmp / "niah.jsonl"))
    niah = ["-i", str(tmp / "niah.jsonl")]
    ckv("bound", *m, *niah, "--budgets", "0.1,0.2", "--layers", LAYERS, "-o", str(tmp / "bound_niah"))
    ckv("dump", *m, *niah, "--layers", LAYERS, "--what", "attn,nu", "--attn-rows", "window",
        "-o", str(tmp / "dump_niah.h5"))
    ckv("mask", *m, *niah, "--method", "snapkv", "--budget", "0.2", "-o", str(tmp / "mask_base.h5"))
    ckv("mask", *m, *niah, "--method", "criticalkv(snapkv)", "--budget", "0.2",
        "-o", str(tmp / "mask_crit.h5"))
    return tmp


def h5mean(path):
    """metrics_mean of record 0 and the metric names, straight from h5py."""
    with h5py.File(path, "r") as f:
        names = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["metrics"]]
        return f["records/0/metrics_mean"][()], f["records/0/metrics"][()], names


def nonempty(paths):
    assert [Path(p).suffix for p in paths] == [".png", ".pdf"]
    for p in paths:
        assert Path(p).stat().st_size > 1000, p


def test_reader_dispatch(outs):
    b, c, m, d = (open_ckv(outs / n) for n in ("bound.h5", "check.h5", "mask.h5", "dump.h5"))
    assert isinstance(b, BoundFile) and b.kind == "bound" and b.schema == "ckv.bound"
    assert isinstance(c, BoundFile) and c.kind == "check" and c.alphas == [0.5]
    assert isinstance(m, MaskFile) and "target" in m.records[0].runs
    assert isinstance(d, DumpFile) and d.schema == "ckv.dump" and d.record_ids
    d.close()
    assert b.budget_labels == ["10%", "20%", "40%"]
    assert list(b.layers) == [0, 1, 14, 29]
    assert "bound" in b.command_line and b.model == "SmolLM2-135M-Instruct.Q4_1"


@pytest.mark.parametrize("name", ["bound.h5", "check.h5", "mask.h5", "dump.h5"])
def test_reader_refuses_other_version(outs, tmp_path, name):
    bad = tmp_path / f"v99_{name}"
    shutil.copy(outs / name, bad)
    with h5py.File(bad, "r+") as f:
        f.attrs["schema_version"] = 99
    with pytest.raises(SchemaError, match=r"v99_.*version 99.*version [0-9 and]+ only") as e:
        open_ckv(bad)
    assert e.value.path == str(bad)


def test_reader_refuses_foreign_files(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(SchemaError, match="other.h5.*no 'schema'"):
        open_ckv(other)
    with h5py.File(other, "r+") as f:
        f.attrs["schema"] = "ckv.unknown"
        f.attrs["schema_version"] = 1
    with pytest.raises(SchemaError, match="ckv.unknown"):
        open_ckv(other)
    text = tmp_path / "text.h5"
    text.write_text("not hdf5")
    with pytest.raises(SchemaError, match="text.h5"):
        open_ckv(text)


def test_reduction_heatmap_draws_the_file(outs, tmp_path):
    mm, _, names = h5mean(outs / "bound.h5")
    L1 = names.index("L1")
    f = open_ckv(outs / "bound.h5")
    for method, crit_i, base_i in (("criticalkv(snapkv)", 1, 0), ("criticalkv(adakv(snapkv))", 3, 2)):
        assert f.methods[crit_i] == method
        for bi, label in enumerate(["10%", "20%", "40%"]):
            r = F.reduction_heatmap(f, tmp_path, method, label)
            want = mm[base_i, bi, :, :, L1] - mm[crit_i, bi, :, :, L1]
            np.testing.assert_allclose(np.asarray(r.images[0].get_array()), want, rtol=0, atol=0)
            assert r.images[0].norm(0.0) == pytest.approx(0.5)        # diverging, centred at 0
            share = 100 * np.mean(want > 0)
            assert f"in {share:.1f}% of heads" in r.fig.axes[0].get_title()
            assert method in r.fig.axes[0].get_title() and label in r.fig.axes[0].get_title()
            nonempty(r.paths)


def test_assumption_heatmap_draws_min_s1(outs, tmp_path):
    _, metrics, names = h5mean(outs / "check.h5")
    want = metrics[0, ..., names.index("S1")].min(axis=-1)          # [budget, layer, head]
    r = F.assumption_heatmap(open_ckv(outs / "check.h5"), tmp_path)
    assert len(r.images) == 2
    for bi, im in enumerate(r.images):
        np.testing.assert_array_equal(np.asarray(im.get_array()), want[bi])
        assert f"{100 * np.mean(want[bi] >= 0.5):.1f}% of heads" in r.fig.axes[bi].get_title()
    # the share agrees with ckv's own check.json (C++ implementation)
    res = json.loads((outs / "check.json").read_text())["results"]
    for bi, row in enumerate(res):
        assert np.mean(want[bi] >= 0.5) == pytest.approx(row["fraction_holds"])
    nonempty(r.paths)


def test_tightness_curves(outs, tmp_path):
    mm, _, names = h5mean(outs / "bound.h5")
    ix = names.index
    r = F.tightness(open_ckv(outs / "bound.h5"), tmp_path, "criticalkv(snapkv)")
    for bi in range(3):
        lines = r.fig.axes[bi].get_lines()
        for line, m, metric in ((lines[0], 1, "L1"), (lines[1], 1, "theta_hat"), (lines[2], 0, "theta_rel")):
            for li in range(4):
                # one population for all three curves: both methods' S1 >= 1/2
                ok = (mm[1, bi, li, :, ix("S1")] >= 0.5) & (mm[0, bi, li, :, ix("S1")] >= 0.5)
                got = line.get_ydata()[li]
                if ok.any():
                    assert got == pytest.approx(mm[m, bi, li, ok, ix(metric)].mean())
                else:
                    assert np.isnan(got)
        assert list(lines[0].get_xdata()) == [0, 1, 14, 29]
    nonempty(r.paths)


def test_reduction_vs_budget_curves(outs, tmp_path):
    mm, _, names = h5mean(outs / "bound.h5")
    L = mm[..., names.index("L1")]
    r = F.reduction_vs_budget(open_ckv(outs / "bound.h5"), tmp_path)
    a1, a2 = r.fig.axes[:2]
    for k, (crit_i, base_i) in enumerate(((1, 0), (3, 2))):
        lc, lb = L[crit_i], L[base_i]
        rel = 100 * (1 - lc.mean(axis=(1, 2)) / lb.mean(axis=(1, 2)))
        np.testing.assert_allclose(a1.get_lines()[k].get_ydata(), rel)
        np.testing.assert_allclose(a2.get_lines()[k].get_ydata(), 100 * np.mean(lb > lc, axis=(1, 2)))
    nonempty(r.paths)


def test_kept_and_propagated(outs, tmp_path):
    with h5py.File(outs / "bound.h5", "r") as f:
        kc = f["records/0/kept_count"][()]
    r = F.kept_heatmap(open_ckv(outs / "bound.h5"), tmp_path, "adakv(snapkv)", "10%")
    np.testing.assert_array_equal(np.asarray(r.images[0].get_array()), kc[2, 0])
    nonempty(r.paths)
    with h5py.File(outs / "mask.h5", "r") as f:
        want = {n: f[f"records/0/runs/{n}/resid_l1"][()].mean(axis=1) for n in f["records/0/runs"]}
    r = F.propagated(open_ckv(outs / "mask.h5"), tmp_path)
    lines = r.fig.axes[0].get_lines()
    assert len(lines) == len(want)
    np.testing.assert_allclose(lines[0].get_ydata(), want["target"])
    np.testing.assert_allclose(lines[1].get_ydata(), want["placebo0"])
    nonempty(r.paths)


def test_table9_matches_file_and_ckv_json(outs):
    mm, _, names = h5mean(outs / "bound.h5")
    ix = names.index
    crit, base, rows = T.table9(open_ckv(outs / "bound.h5"), "criticalkv(snapkv)")
    ref = json.loads((outs / "bound.json").read_text())["table9"][0]
    assert ref["method"] == crit and ref["base"] == base
    for bi, (row, j) in enumerate(zip(rows, ref["budgets"])):
        ok = (mm[1, bi, ..., ix("S1")] >= 0.5) & (mm[0, bi, ..., ix("S1")] >= 0.5)
        assert row["heads"] == int(ok.sum()) == j["heads"]
        assert row["actual_L1"] == pytest.approx(mm[1, bi, ..., ix("L1")][ok].mean())
        assert row["our_bound_theta_hat"] == pytest.approx(mm[1, bi, ..., ix("theta_hat")][ok].mean())
        assert row["prev_bound_theta_rel"] == pytest.approx(mm[0, bi, ..., ix("theta_rel")][ok].mean())
        assert row["actual_L1"] == pytest.approx(j["actual_L1"], rel=1e-9)
        assert row["our_bound_theta_hat"] == pytest.approx(j["our_bound_theta_hat"], rel=1e-9)
        assert row["prev_bound_theta_rel"] == pytest.approx(j["prev_bound_theta_rel"], rel=1e-9)
        assert row["ratio"] == pytest.approx(j["ratio"], rel=1e-9)
        assert row["share_L_below_base"] == pytest.approx(j["fraction_heads_L_below_base"])
        # one record: the heads' means are the heads themselves
        assert row["share_head_means_L_below_base"] == pytest.approx(j["fraction_head_means_L_below_base"])
        assert row["share_head_means_L_below_base"] == pytest.approx(
            np.mean(mm[1, bi, ..., ix("L1")] < mm[0, bi, ..., ix("L1")]))
        assert row["share_S1_holds"] == pytest.approx(j["fraction_heads_s1_holds"])
    md = T.to_markdown(rows).splitlines()
    assert len(md) == 2 + len(rows)
    for line, row in zip(md[2:], rows):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == row["budget"]
        assert int(cells[2]) == row["heads"]
        assert float(cells[3]) == pytest.approx(row["actual_L1"], rel=1e-3)
        assert float(cells[4]) == pytest.approx(row["our_bound_theta_hat"], rel=1e-3)
        assert float(cells[6].rstrip("%")) == pytest.approx(100 * row["ratio"], abs=0.05)
    stats = T.head_stats(open_ckv(outs / "bound.h5"), "criticalkv(snapkv)", "20%")
    red = mm[0, 1, ..., ix("L1")] - mm[1, 1, ..., ix("L1")]             # [layer, head]
    assert [s["layer"] for s in stats] == [0, 1, 14, 29]
    for s, r in zip(stats, red):
        assert (s["mean_reduction"], s["min"], s["max"]) == pytest.approx((r.mean(), r.min(), r.max()))
        assert s["share_improved"] == pytest.approx(np.mean(r > 0))
    tex = T.to_latex(rows, caption="Table 9")
    assert tex.count(r"\\") == 1 + len(rows) and r"\begin{tabular}" in tex


def test_mass_pairs_match_file(outs, capsys):
    mm, _, names = h5mean(outs / "bound.h5")
    ix = names.index
    f = open_ckv(outs / "bound.h5")
    ci, bi_ = f.method_index("criticalkv(snapkv)"), f.method_index("snapkv")
    rows = [r for r in T.mass_pairs(f) if r["base"] == "snapkv"]
    assert [r["budget"] for r in rows] == f.budget_labels
    for b, row in enumerate(rows):
        c, p = mm[ci, b], mm[bi_, b]                                   # [layer, head, metric]
        extra, lost = (c[..., ix("L1")] - p[..., ix("L1")]).ravel(), (p[..., ix("S")] - c[..., ix("S")]).ravel()
        assert row["layers"] == "all (4)" and row["heads"] == extra.size  # no sliding layers
        assert row["share_crit_less_mass"] == pytest.approx(np.mean(lost > 0))
        assert float(row["corr"]) == pytest.approx(np.corrcoef(extra, lost)[0, 1], abs=0.005)
        lb, lc = (float(x.split()[0]) for x in row["l1"].split(" → "))
        assert (lb, lc) == pytest.approx((p[..., ix("L1")].mean(), c[..., ix("L1")].mean()), abs=0.005)
        sb, sc = (float(x) for x in row["kept_mass"].split(" → "))
        assert (sb, sc) == pytest.approx((p[..., ix("S")].mean(), c[..., ix("S")].mean()), abs=5e-5)
        assert row["c"] == pytest.approx(p[..., ix("C")].mean()) == pytest.approx(c[..., ix("C")].mean())
        rb, rc = (float(x) for x in row["renorm"].split(" → "))
        assert (rb, rc) == pytest.approx([((1 / x[..., ix("S")] - 1) * x[..., ix("C")]).mean() for x in (p, c)],
                                         abs=0.005)
        tb, tc = (float(x) for x in row["theta"].split(" → "))
        assert (tb, tc) == pytest.approx((p[..., ix("theta")].mean(), c[..., ix("theta")].mean()), abs=0.005)
    assert T.main([str(outs / "bound.h5"), "--mass"]) == 0
    assert "crit keeps less mass" in capsys.readouterr().out
    assert T.main([str(outs / "mask.h5"), "--mass"]) == 1
    assert "--mass reads a ckv bound output" in capsys.readouterr().err


def test_swap_pairs_match_files(outs, capsys):
    f, dump = open_ckv(outs / "bound_niah.h5"), open_ckv(outs / "dump_niah.h5")
    rows = [r for r in T.swap_pairs(f, dump) if r["base"] == "snapkv"]
    assert [r["budget"] for r in rows] == f.budget_labels and all(r["layers"] == "all (4)" for r in rows)
    ci, bi_ = f.method_index("criticalkv(snapkv)"), f.method_index("snapkv")
    with h5py.File(outs / "bound_niah.h5", "r") as hb, h5py.File(outs / "dump_niah.h5", "r") as hd:
        rid = list(hb["records"])[0]
        kept = hb[f"records/{rid}/kept_mask"][()].astype(bool)
        q0, c = int(hb[f"records/{rid}"].attrs["question_start"]), int(hb[f"records/{rid}"].attrs["context_end"])
        rows_d = hd[f"records/{rid}/attn_rows"][()]
        n_kv = kept.shape[3]
        for b, row in enumerate(rows):
            n, mb, mc = [], [], []
            for li, layer in enumerate(LAYERS.split(",")):
                attn = hd[f"records/{rid}/layers/{layer}/attn"][()].astype(np.float64)[:, rows_d >= q0, :c].mean(axis=1)
                group = attn.shape[0] // n_kv
                for g in range(n_kv):
                    a = attn[g * group:(g + 1) * group].mean(axis=0)
                    own_b, own_c = kept[bi_, b, li, g] & ~kept[ci, b, li, g], kept[ci, b, li, g] & ~kept[bi_, b, li, g]
                    n.append(own_b.sum()), mb.append(a[own_b].sum()), mc.append(a[own_c].sum())
            assert float(row["swapped"]) == pytest.approx(np.mean(n), abs=0.05)
            got = [float(x) for x in row["mass"].split(" → ")]
            assert got == pytest.approx([np.mean(mb), np.mean(mc)], abs=5e-5)
            assert np.mean(n) > 0  # the two selections differ somewhere, so the test can fail
    assert T.main([str(outs / "bound_niah.h5"), "--swaps", str(outs / "dump_niah.h5")]) == 0
    assert "crit's own" in capsys.readouterr().out
    assert T.main([str(outs / "bound_niah.h5"), "--swaps", str(outs / "bound.h5")]) == 1
    assert "--swaps reads" in capsys.readouterr().err


def test_report_and_cli(outs, tmp_path):
    path = R.write_report(tmp_path / "rep", outs / "bound.h5", outs / "check.h5", outs / "mask.h5",
                          outs / "dump.h5", (2, 4))
    text = path.read_text()
    imgs = [l for l in text.splitlines() if l.startswith("![")]
    assert len(imgs) >= 8 and any("attention_L2_H4" in l for l in imgs)
    for l in imgs:
        png = path.parent / l[l.index("(") + 1:-1]
        assert png.stat().st_size > 1000 and png.with_suffix(".pdf").stat().st_size > 1000
    for name in ("bound.h5", "check.h5", "mask.h5", "dump.h5"):
        cmd = open_ckv(outs / name).command_line
        assert text.count(f"Data from `{cmd}`") >= 1
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "analysis.figures", "reduction-heatmap",
                        str(outs / "bound.h5"), "-o", str(tmp_path / "cli"), "--budget", "40%"],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "cli" / "reduction_heatmap_criticalkv_snapkv_40.pdf").stat().st_size > 1000
    bad = tmp_path / "bad.h5"
    shutil.copy(outs / "bound.h5", bad)
    with h5py.File(bad, "r+") as f:
        f.attrs["schema_version"] = 7
    r = subprocess.run([sys.executable, "-m", "analysis.report", "--bound", str(bad), "-o",
                        str(tmp_path / "r2")], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 1 and "bad.h5" in r.stderr and "version 7" in r.stderr


def test_attention_raw_and_corrected(outs, tmp_path):
    d, mk = open_ckv(outs / "dump.h5"), open_ckv(outs / "mask_rec.h5")
    with h5py.File(outs / "dump.h5", "r") as f:
        g = f["records/code"]
        n, c = int(g.attrs["n_tokens"]), int(g.attrs["context_end"])
        rows = list(g["attn_rows"][()])
        A = g["layers/2/attn"][4, rows.index(n - 1), :n].astype(np.float64)
        spans = json.loads(g.attrs["spans"])
    with h5py.File(outs / "mask_rec.h5", "r") as f:
        ev = f["records/code/runs/target/evicted"][2, 4 // 3]         # head 4 -> KV head 1
    assert ev.sum() == spans["needle"][0][1] - spans["needle"][0][0]
    r = F.attention(d, tmp_path, 2, 4, mask=mk)
    keep = np.concatenate([1 - ev.astype(np.float64), np.ones(n - c)])
    S = (keep * A).sum()
    lines = r.fig.axes[0].get_lines()
    np.testing.assert_allclose(lines[0].get_ydata(), A)
    np.testing.assert_allclose(lines[1].get_ydata(), keep * A / S)
    np.testing.assert_allclose(lines[2].get_ydata(), keep * A)
    assert r.arrays["raw"].sum() == pytest.approx(1.0)
    labels = r.fig.axes[0].get_legend_handles_labels()[1]
    for name in ("needle", "distractor", "question", "sink"):
        assert any(l.startswith(name) for l in labels), labels
    nonempty(r.paths)
    # a mask of another prompt is refused for the overlay
    with pytest.raises(ValueError, match="tokens differ"):
        F.attention(d, tmp_path, 2, 4, mask=open_ckv(outs / "mask.h5"))
    d.close()


def fig5_expected(outs):
    """Figure 5's per-layer values straight from the three files: the kept count from the
    kvpress rule max(1, int(c · 0.2)) (BOUND.md), located in the bound's budgets and
    checked against the masks' evicted entries; then the per-layer means."""
    def attr_strs(a):
        return [x.decode() if isinstance(x, bytes) else x for x in a]
    out = {}
    with h5py.File(outs / "bound_niah.h5", "r") as f:
        (rid,) = list(f["records"])
        g = f[f"records/{rid}"]
        c, rows = int(g.attrs["context_end"]), g.attrs["eval_rows"][()]
        kept = max(1, int(c * 0.2))
        bi = list(g.attrs["budgets"]).index(kept)
        methods, names = attr_strs(f.attrs["methods"]), attr_strs(f.attrs["metrics"])
        mm = g["metrics_mean"][()][..., names.index("L1")]          # [method, budget, layer, head]
        lb = mm[methods.index("snapkv"), bi].mean(axis=1)
        lc = mm[methods.index("criticalkv(snapkv)"), bi].mean(axis=1)
        out.update(layers=g.attrs["layers"][()], iso=lb - lc, iso_rel=100 * (1 - lc / lb))
    resid = []
    for name in ("mask_base.h5", "mask_crit.h5"):
        with h5py.File(outs / name, "r") as f:
            g = f[f"records/{rid}"]
            assert int(g.attrs["context_end"]) == c
            np.testing.assert_array_equal(g["eval_rows"][()], rows)
            ev = g["runs/target/evicted"][()]                            # [layer, kv_head, pos<c]
            np.testing.assert_array_equal(c - ev.sum(axis=2).mean(axis=1), np.full(len(ev), kept))
            resid.append(g["runs/target/resid_l1"][()].mean(axis=1))     # [layer]
    out.update(prop=resid[0] - resid[1], prop_rel=100 * (1 - resid[1] / resid[0]), kept=kept)
    return out


def test_reduction_per_layer_draws_the_files(outs, tmp_path):
    want = fig5_expected(outs)
    b, mb, mc = (open_ckv(outs / n) for n in ("bound_niah.h5", "mask_base.h5", "mask_crit.h5"))
    r = F.reduction_per_layer(b, tmp_path, mb, mc)
    a_iso, a_prop, a_rel = r.fig.axes[:3]
    for ax, x, y in ((a_iso, want["layers"], want["iso"]), (a_prop, np.arange(30), want["prop"])):
        bars = ax.patches
        np.testing.assert_allclose([p.get_height() for p in bars], y, rtol=1e-12, atol=0)
        np.testing.assert_allclose([p.get_x() + p.get_width() / 2 for p in bars], x)
        # sign colours: blue where criticalkv perturbs less, red where more
        assert all((p.get_facecolor()[2] > p.get_facecolor()[0]) == (v > 0) for p, v in zip(bars, y))
    iso_line, prop_line = a_rel.get_lines()[:2]
    np.testing.assert_allclose(iso_line.get_xdata(), want["layers"])
    np.testing.assert_allclose(iso_line.get_ydata(), want["iso_rel"], rtol=1e-12)
    np.testing.assert_allclose(prop_line.get_ydata(), want["prop_rel"], rtol=1e-12)
    title = r.fig._suptitle.get_text()
    for part in ("criticalkv(snapkv) vs snapkv", "budget 20%", f"{want['kept']} kept per KV head",
                 "SmolLM2-135M-Instruct.Q4_1", "niah.jsonl", "L1 norm"):
        assert part in title, (part, title)
    assert r.source == [b.command_line, mb.command_line, mc.command_line]
    nonempty(r.paths)


def test_reduction_per_layer_refuses_mismatched_inputs(outs, tmp_path):
    b, mb, mc = (open_ckv(outs / n) for n in ("bound_niah.h5", "mask_base.h5", "mask_crit.h5"))
    with pytest.raises(ValueError, match="is not criticalkv"):
        F.reduction_per_layer(b, tmp_path, mc, mb)                   # pair swapped
    with pytest.raises(ValueError, match="no record in common"):
        F.reduction_per_layer(open_ckv(outs / "bound.h5"), tmp_path, mb, mc)
    other = tmp_path / "other_budget.h5"                             # bound without the budget
    shutil.copy(outs / "bound_niah.h5", other)
    with h5py.File(other, "r+") as f:
        g = f[f"records/{list(f['records'])[0]}"]
        g.attrs["budgets"] = g.attrs["budgets"] + 1
    with pytest.raises(ValueError, match=r"mask_base.h5: record .* keeps \d+ entries"):
        F.reduction_per_layer(open_ckv(other), tmp_path, mb, mc)
    other = tmp_path / "other_prompt.h5"                             # mask of another prompt
    shutil.copy(outs / "mask_crit.h5", other)
    with h5py.File(other, "r+") as f:
        g = f[f"records/{list(f['records'])[0]}"]
        g.attrs["context_end"] = int(g.attrs["context_end"]) - 1
    with pytest.raises(ValueError, match="other_prompt.h5: record .* is not the prompt"):
        F.reduction_per_layer(b, tmp_path, mb, open_ckv(other))


def test_report_has_figure5_with_its_commands(outs, tmp_path):
    path = R.write_report(tmp_path / "rep", bound=outs / "bound_niah.h5",
                          mask_pair=(outs / "mask_base.h5", outs / "mask_crit.h5"))
    text = path.read_text()
    assert "(Figure 5)" in text
    (line,) = [l for l in text.splitlines() if l.startswith("![reduction_layers_")]
    assert (path.parent / line[line.index("(") + 1:-1]).stat().st_size > 1000
    (caption,) = [l for l in text.splitlines() if "isolated (ckv bound" in l and "Data from" in l]
    for name in ("bound_niah.h5", "mask_base.h5", "mask_crit.h5"):
        assert f"`{open_ckv(outs / name).command_line}`" in caption
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "analysis.figures", "reduction-layers",
                        str(outs / "bound_niah.h5"), "--mask-pair", str(outs / "mask_base.h5"),
                        str(outs / "mask_crit.h5"), "-o", str(tmp_path / "cli")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "cli" / "reduction_layers_criticalkv_snapkv_20.png").stat().st_size > 1000
    r = subprocess.run([sys.executable, "-m", "analysis.figures", "reduction-layers",
                        str(outs / "bound_niah.h5"), "--mask-pair", str(outs / "mask_crit.h5"),
                        str(outs / "mask_base.h5"), "-o", str(tmp_path / "cli")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 1 and "mask_base.h5" in r.stderr and "criticalkv" in r.stderr


def test_most_evicted_head(outs):
    with h5py.File(outs / "dump.h5", "r") as f:
        g = f["records/code"]
        n = int(g.attrs["n_tokens"])
        row = list(g["attn_rows"][()]).index(n - 1)
        A = {int(l): g[f"layers/{l}/attn"][:, row, :].astype(np.float64) for l in g["layers"]}
    with h5py.File(outs / "mask_rec.h5", "r") as f:
        ev = f["records/code/runs/target/evicted"][()]
    S = {(l, h): 1 - (ev[l, h // 3] * a[h, :ev.shape[2]]).sum() for l, a in A.items() for h in range(9)}
    best = min(S, key=S.get)
    d = open_ckv(outs / "dump.h5")
    layer, head, s = F.most_evicted_head(d, open_ckv(outs / "mask_rec.h5"))
    d.close()
    assert (layer, head) == best and s == pytest.approx(S[best], rel=1e-12)
    assert layer == 2                                    # the only masked layer


def test_protocol_sweep_rows_match_file(outs):
    """analysis.paper: every nu_min reading's Table 9 row from the theta_rel_* columns, over
    the heads where both methods' S1 >= 1/2; the valid readings never fall below theta_hat."""
    from analysis import paper as P
    mm, mq, names = h5mean(outs / "bound.h5")
    ix = names.index
    f = open_ckv(outs / "bound.h5")
    rows = P.sweep_rows(f, ("10%", "20%"))
    assert len(rows) == 4 * len(f.base_pairs)
    np.testing.assert_allclose(mm[..., ix("theta_rel")], mm[..., ix("theta_rel_all")])  # the default reading
    for r in rows:
        assert (r["eval"], r["compress"]) == ("question", "context")
        ci, bi_ = f.method_index(r["method"]), f.method_index(r["base"])
        col = ix("theta_rel_" + r["nu_min"].replace("-", "_"))
        for b, label in enumerate(("10%", "20%")):
            x = r["budgets"][label]
            ok = (mm[ci, b, ..., ix("S1")] >= 0.5) & (mm[bi_, b, ..., ix("S1")] >= 0.5)
            assert x["heads"] == int(ok.sum())
            assert x["actual"] == pytest.approx(mm[ci, b, ..., ix("L1")][ok].mean())
            assert x["our"] == pytest.approx(mm[ci, b, ..., ix("theta_hat")][ok].mean())
            assert x["prev"] == pytest.approx(mm[bi_, b, ..., col][ok].mean())
            # docs/MATH.md §3: theta_hat <= theta_rel at every query where S1 >= 1/2 (up to
            # rounding) for the valid readings; the others fall below it somewhere
            q = mq[bi_, b]                                     # [layer, head, query, metric]
            holds = q[..., ix("S1")] >= 0.5
            slack = (q[..., col] - q[..., ix("theta_hat")])[holds]
            below = np.mean(slack < -1e-9 * q[..., ix("C")][holds])
            assert x["prev_below_our"] == pytest.approx(below)
            if r["is_bound"]:
                assert (slack >= -1e-6 * q[..., ix("C")][holds]).all(), r["nu_min"]
                assert x["prev_below_our"] == 0
    md = P.to_markdown(rows, ("10%", "20%"))
    assert md.count("\n") == 2 + 1 + len(rows) and "paper, Llama-3.1-8B" in md


def test_model_facts_match_file(outs):
    """analysis.paper.model_facts: the sink's share of the smallest nu and Figure 6's
    numbers, recomputed from the metric columns."""
    from analysis import paper as P
    mm, _, names = h5mean(outs / "bound.h5")
    ix = names.index
    f = open_ckv(outs / "bound.h5")
    facts = P.model_facts(f, "20%")
    for crit, base in f.base_pairs:
        x = facts["pairs"][f"{crit} vs {base}"]
        q = mm[f.method_index(base), 1]                                  # [layer, head, metric]
        sink = q[..., ix("theta_rel_all")] > q[..., ix("theta_rel_no_sink")] + 1e-9 * q[..., ix("C")]
        assert x["sink_is_nu_min"] == pytest.approx(sink.mean())
        assert x["nu_min_over_C"] == pytest.approx(q[..., ix("nu_min_over_C")].mean())
        lc, lb = mm[f.method_index(crit), :, ..., ix("L1")], mm[f.method_index(base), :, ..., ix("L1")]
        for i, lab in enumerate(f.budget_labels):
            v = x["figure6"][lab]
            assert v["relative_reduction"] == pytest.approx(1 - lc[i].mean() / lb[i].mean())
            assert v["head_means_lowered"] == pytest.approx(np.mean(lc[i] < lb[i]))
    assert "Figure 6" in P.facts_markdown(facts)

"""Reference test of ckv.hf (needs torch and transformers; skipped without them, as in CI):
transformers loads the default GGUF, ckv.hf records it through hooks, and its post-RoPE
q/k/v, W_O and recomputed attention rows equal ckv's own forward pass (Model.run) within
float32 tolerance, and so do ckv.bound's numbers on the two recordings."""
import os
from pathlib import Path

import numpy as np
import pytest

import ckv

torch = pytest.importorskip("torch", reason="torch not installed: the HF bridge's reference test is skipped")
transformers = pytest.importorskip("transformers", reason="transformers not installed")
import ckv.hf  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(os.environ.get("CKV_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")))
LAYERS = [0, 13, 29]
CONTEXT = ("The harbour town of Vell sits at the mouth of a slow brown river. The lighthouse on the southern "
           "cape was painted green in 1931 and has been green ever since. ") * 3
QUESTION = " Question: What colour is the lighthouse? Answer:"

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason="default model absent")


@pytest.fixture(scope="module")
def both():
    model = ckv.load(str(MODEL))
    ids, c = model.tokenize_record(CONTEXT, QUESTION)
    rows = list(range(c - 8, len(ids)))
    ours = model.run(ids, layers=LAYERS, attn_rows=rows, context_end=c, threads=2)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(MODEL.parent), gguf_file=MODEL.name,
                                                            dtype=torch.float32).eval()
    theirs = ckv.hf.record(hf, ids, layers=LAYERS, context_end=c, attn_rows=rows)
    return model, ours, theirs


def test_recordings_agree(both):
    model, ours, theirs = both
    for name in ("q", "k", "v", "attn"):
        a, b = getattr(ours, name), getattr(theirs, name)
        assert a.shape == b.shape, name
        scale = np.abs(a).max()
        np.testing.assert_allclose(b, a, rtol=0, atol=2e-4 * scale, err_msg=name)
    for layer in LAYERS:
        np.testing.assert_allclose(theirs.wo[layer], model.wo(layer), rtol=0, atol=1e-6)
    assert int(np.argmax(theirs.logits)) == int(np.argmax(ours.logits))


def test_bounds_agree(both):
    model, ours, theirs = both
    methods, budgets = ["snapkv", "criticalkv(snapkv)"], [0.2, 0.5]
    for layer in LAYERS:
        a = model.bound(ours, layer, methods, budgets, window=8)
        b = ckv.hf.bound(theirs, layer, methods, budgets, window=8, n_layer=model.config["n_layer"])
        agree = (a.kept_mask == b.kept_mask).mean()
        assert agree > 0.99, f"layer {layer}: kept masks agree on {agree:.3f} only"
        for name in ("L1", "theta", "theta_hat", "C", "S"):
            np.testing.assert_allclose(b.mean(name), a.mean(name), rtol=2e-2, atol=1e-4, err_msg=f"{layer} {name}")


def test_a_bridge_dump_is_analysed_by_ckv_bound_without_the_model(both, tmp_path):
    """The issue's proof of the bridge: the HF run's dump (ckv.hf.write_dump, W_O and config in
    /model) analysed by `ckv bound --dump` with no --model gives the numbers `ckv bound`
    gives on ckv's own dump of the same prompt, within float32 tolerance."""
    import subprocess

    model, ours, theirs = both
    binary = os.environ.get("CKV_BINARY", str(ROOT / "build" / "ckv"))
    hf_dump = ckv.hf.write_dump(theirs, tmp_path / "hf_dump.h5")
    import json

    record = tmp_path / "record.jsonl"  # tokenised as the fixture's ids, with the same context end
    record.write_text(json.dumps({"id": "0", "context": CONTEXT, "question": QUESTION}) + "\n")
    layers = ",".join(str(x) for x in LAYERS)

    def ckv_run(*args):
        r = subprocess.run([binary, "-q", *args], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        return r

    ckv_run("dump", "-m", str(MODEL), "-i", str(record), "--layers", layers, "--what", "q,k,v,wo",
            "--dtype", "f32", "-o", str(tmp_path / "ckv_dump.h5"))
    bound = ["bound", "--layers", layers, "--window", "8", "--budgets", "0.2,0.5", "--methods",
             "snapkv,criticalkv(snapkv),adakv(snapkv)"]
    # The bridge's dump needs no --model: ckv reads the HF model's config and W_O from it.
    ckv_run(*bound, "--dump", hf_dump, "-o", str(tmp_path / "hf"))
    ckv_run(*bound, "-m", str(MODEL), "--dump", str(tmp_path / "ckv_dump.h5"), "-o", str(tmp_path / "ckv"))
    assert len(ckv.table(ckv.open(hf_dump))) == 1  # ckv's reader reads the bridge's dump
    ours_dump = ckv.open(str(tmp_path / "ckv_dump.h5"))
    np.testing.assert_array_equal(ours_dump.h5["records/0/tokens"][()], theirs.tokens)
    ta, tb = (ckv.table(ckv.open(str(tmp_path / f"{name}.h5"))) for name in ("ckv", "hf"))
    assert len(ta) == len(tb) > 0
    keys = ["method", "budget", "layer", "head"]
    ta, tb = ta.sort_values(keys).reset_index(drop=True), tb.sort_values(keys).reset_index(drop=True)
    assert (ta[keys].values == tb[keys].values).all()
    for name in ("L1", "theta", "theta_hat", "C", "S"):
        if name in ta:
            np.testing.assert_allclose(tb[name].to_numpy(float), ta[name].to_numpy(float), rtol=2e-2, atol=1e-4,
                                       err_msg=name)

"""ckv.load and Model.run on the default model against `ckv dump` of the same record read
with h5py (the CLI and its file, not the package's reader), ckv.bound on the dumped arrays
against `ckv bound --dump` of that dump, attention rows against softmax(q k^T / sqrt(d))
recomputed from the recorded q and k, and the errors' messages against the CLI's.

Environment: CKV_BINARY (the ckv executable, default build/ckv), CKV_MODEL (the default
model; the tests skip when it is absent)."""
import json
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

import ckv

ROOT = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("CKV_BINARY", str(ROOT / "build" / "ckv"))
MODEL = os.environ.get("CKV_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
LAYERS = [0, 14, 29]
WINDOW = 16
METHODS = ["snapkv", "criticalkv(snapkv)", "h2o"]
CONTEXT = ("The harbour town of Vell sits at the mouth of a slow brown river. The ferry to the island of "
           "Ost leaves every hour from the northern pier. The lighthouse on the southern cape was painted "
           "green in 1931 and has been green ever since. ") * 2
QUESTION = " Question: What colour is the lighthouse? Answer:"

pytestmark = pytest.mark.skipif(not Path(MODEL).exists(), reason="default model absent")


def cli(*args):
    return subprocess.run([BINARY, "-q", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def model():
    return ckv.load(MODEL)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    jsonl = tmp / "in.jsonl"
    jsonl.write_text(json.dumps({"id": "vell", "context": CONTEXT, "question": QUESTION}) + "\n")
    dump = tmp / "dump.h5"
    r = cli("dump", "--model", MODEL, "-t", "2", "--input", str(jsonl), "-o", str(dump), "--what",
            "q,k,v,attn,nu,logits", "--layers", ",".join(map(str, LAYERS)), "--window", str(WINDOW),
            "--dtype", "f32")
    assert r.returncode == 0, r.stderr
    bound = tmp / "bound"
    r = cli("bound", "--model", MODEL, "-t", "2", "--dump", str(dump), "--layers", "14", "--methods",
            ",".join(METHODS), "--budgets", "0.2,0.5", "--window", str(WINDOW), "-o", str(bound))
    assert r.returncode == 0, r.stderr
    return dump, Path(str(bound) + ".h5")


@pytest.fixture(scope="module")
def recording(model):
    return model.run(CONTEXT, question=QUESTION, layers=LAYERS, window=WINDOW, threads=2)


def test_config_and_tokenizer(model):
    c = model.config
    assert (c["n_layer"], c["n_head"], c["n_kv_head"], c["d_head"], c["d_model"]) == (30, 9, 3, 64, 576)
    ids = model.encode("Hello world")
    assert model.decode(ids).endswith("Hello world")
    assert "<|im_start|>" in model.chat_template
    text = model.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_default_model_is_the_clis():
    assert Path(ckv.default_model_path()).resolve() == Path(MODEL).resolve() or "CKV_MODEL" not in os.environ


def test_run_equals_ckv_dump(recording, outputs):
    dump, _ = outputs
    with h5py.File(dump, "r") as f:
        g = f["records/vell"]
        np.testing.assert_array_equal(recording.tokens, g["tokens"][()])
        assert recording.context_end == g.attrs["context_end"]
        np.testing.assert_array_equal(recording.attn_rows, g["attn_rows"][()])
        for i, layer in enumerate(LAYERS):
            for name in ("q", "k", "v", "attn", "nu_l1", "nu_l2"):
                want = g[f"layers/{layer}/{name}"][()]
                got = getattr(recording, name)[i]
                assert got.shape == want.shape, name
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"layer {layer} {name}")
        np.testing.assert_allclose(recording.logits, g["logits_last"][()], rtol=1e-4, atol=1e-4)


def test_attention_rows_are_the_softmax_of_q_and_k(recording, model):
    group = model.config["n_head"] // model.config["n_kv_head"]
    d = model.config["d_head"]
    for i in range(len(LAYERS)):
        for h in (0, 4, 8):
            for r, p in enumerate(recording.attn_rows[::7]):
                r *= 7
                logits = recording.k[i, h // group, : p + 1].astype(np.float64) @ recording.q[i, h, p] / np.sqrt(d)
                a = np.exp(logits - logits.max())
                np.testing.assert_allclose(recording.attn[i, h, r, : p + 1], a / a.sum(), rtol=1e-3, atol=1e-6)
                assert not recording.attn[i, h, r, p + 1:].any()


def test_recording_names_and_no_copies(recording):
    assert recording["blocks.14.attn.hook_q"].shape == recording.q[1].shape
    np.testing.assert_array_equal(recording["blocks.29.attn.hook_pattern"], recording.attn[2])
    for name in ("q", "k", "v", "attn", "nu_l1"):
        assert not getattr(recording, name).flags.owndata, name
    with pytest.raises(KeyError):
        recording["blocks.3.attn.hook_q"]


def test_bound_equals_ckv_bound(model, outputs):
    dump, bound = outputs
    with h5py.File(dump, "r") as f:
        g = f["records/vell"]
        q, k, v = (g[f"layers/14/{x}"][()] for x in "qkv")
        c = int(g.attrs["context_end"])
    res = model.bound(ckv.Recording(tokens=None, layers=[14], context_end=c, attn_rows=None, q=q[None], k=k[None],
                                    v=v[None]), 14, METHODS, [0.2, 0.5], window=WINDOW, threads=2)
    with h5py.File(bound, "r") as f:
        g = f["records/vell"]
        names = [x.decode() if isinstance(x, bytes) else x for x in f.attrs["metrics"]]
        assert names == res.metric_names
        np.testing.assert_array_equal(g.attrs["budgets"], res.budgets)
        np.testing.assert_array_equal(g.attrs["eval_rows"], res.eval_rows)
        want = g["metrics"][()][:, :, 0]  # [method, budget, head, query, metric] of layer 14
        np.testing.assert_array_equal(g["kept_count"][()][:, :, 0], res.kept_count)
    np.testing.assert_allclose(res.metrics, want, rtol=1e-9, atol=1e-12)
    for m, method in enumerate(METHODS):
        mask = ckv.select(method, 0.2, q, k, v, model.wo(14), context_end=c, window=WINDOW)
        np.testing.assert_array_equal(mask, res.kept_mask[m, 0].astype(bool))


def test_open_reads_every_output(outputs):
    dump, bound = outputs
    with ckv.open(dump) as f:
        assert f.record_ids == ["vell"]
        assert f.array("vell", "q", 14).dtype == np.float32
    b = ckv.open(bound)
    assert b.kind == "bound" and b.methods == METHODS
    pd = pytest.importorskip("pandas", reason="pandas not installed: ckv.table untested")
    t = ckv.table(b)
    assert isinstance(t, pd.DataFrame) and len(t) == 3 * 2 * 1 * 9
    with pytest.raises(ckv.SchemaError):
        ckv.open(Path(__file__))


def test_errors_carry_the_clis_message(tmp_path, model):
    missing = tmp_path / "nope.gguf"
    r = cli("info", "--model", str(missing))
    assert r.returncode != 0 and r.stderr.startswith("ckv: error: ")
    with pytest.raises(ckv.Error) as e:
        ckv.load(missing)
    assert r.stderr.strip() == f"ckv: error: {e.value}"
    with pytest.raises(ckv.InputError, match="out of range|outside|vocab"):
        model.run([0, 1, 10 ** 6])
    with pytest.raises(ckv.UsageError, match="unknown item 'x'"):
        model.run("hi", record="q,x")


def test_eval_equals_ckv_eval(model, tmp_path):
    # Model.eval against `ckv eval` of the same record, read from its HDF5 file with h5py:
    # the same answers, scores, KL and per-head L at the first decoded token and along the answer.
    record = {"id": "vell", "context": CONTEXT, "question": QUESTION, "answers": ["green"], "task": "qa"}
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps(record) + "\n")
    methods, budgets = ["snapkv", "criticalkv(snapkv)"], [0.3]
    r = cli("eval", "--model", MODEL, "-t", "2", "-i", str(jsonl), "--methods", ",".join(methods), "--budgets", "0.3",
            "--window", str(WINDOW), "--max-new-tokens", "6", "--track-steps", "4", "-o", str(tmp_path / "ev"))
    assert r.returncode == 0, r.stderr
    got = model.eval(record, methods, budgets, window=WINDOW, max_new_tokens=6, track_steps=4, threads=2)
    with h5py.File(tmp_path / "ev.h5", "r") as f:
        g = f["records/vell"]
        assert got["n_tokens"] == g.attrs["n_tokens"] and got["context_end"] == g.attrs["context_end"]
        assert list(got["step_tokens"]) == list(g["step_tokens"][()])
        assert len(got["runs"]) == len(g["runs"]) == 3
        for k, run in enumerate(got["runs"]):
            rg = g[f"runs/{k}"]
            assert run["method"] == rg.attrs["method"]
            assert list(run["tokens"]) == list(rg["tokens"][()])
            assert run["text"] == rg.attrs["text"]
            assert run["scores"]["score"] == pytest.approx(json.loads(rg.attrs["scores"])["score"], abs=1e-12)
            assert run["kl"] == pytest.approx(rg.attrs["kl"], rel=1e-6, abs=1e-9)
            np.testing.assert_array_equal(run["kept"], rg["kept"][()])
            if k == 0:
                continue
            np.testing.assert_allclose(run["l1"], rg["l1"][()], rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(run["step_l1"], rg["step_l1"][()], rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(run["step_kl"], rg["step_kl"][()], rtol=1e-6, atol=1e-9)
    with pytest.raises(ckv.UsageError, match="track_steps|--track-steps"):
        model.eval(record, methods, budgets, max_new_tokens=2, track_steps=3)
    with pytest.raises(ckv.UsageError, match="unknown setting 'windw'"):
        model.eval(record, methods, budgets, windw=3)
    # A method that reads a file names the keyword of its path; a missing file is one error.
    with pytest.raises(ckv.UsageError, match=r"methods: headkv needs headkv_profile="):
        model.eval(record, ["headkv"], budgets)
    with pytest.raises(ckv.UsageError, match=r"methods: duoattention needs duo_pattern="):
        model.eval(record, ["duoattention"], budgets)
    with pytest.raises(ckv.IoError, match="absent_profile.json"):
        model.eval(record, ["headkv"], budgets, headkv_profile=str(tmp_path / "absent_profile.json"))


def test_each_layer_rotates_by_its_own_rope_frequencies():
    """Model.rope_inv_freq(layer, end), what Model.bound gives expectedattention: a Gemma 3
    sliding layer rotates by rope_local_base_freq, a full one by rope_theta (the tiny model's
    config.json), each theta^(-2i/d) in float32 as HF computes them."""
    m = ckv.load(str(ROOT / "tests" / "data" / "models" / "tiny_gemma3_kv"))
    d = m.config["d_head"]
    power = np.arange(0, d, 2, dtype=np.float64) / d
    np.testing.assert_allclose(m.rope_inv_freq(0, 16), (100.0 ** -power).astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(m.rope_inv_freq(1, 16), (10000.0 ** -power).astype(np.float32), rtol=1e-6)
    with pytest.raises(ckv.UsageError):
        m.rope_inv_freq(4, 16)

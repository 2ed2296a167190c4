"""ckv dump read back with h5py and numpy only (Debian's; no torch, no ckv code).

Checks, on a dump of the default model: every attention row sums to 1, is causal, and
equals softmax(q k^T / sqrt(d_head)) recomputed from the dumped q and k with the GQA
mapping (query head h uses KV head h // group); nu_l1 / nu_l2 equal the row norms of
v W_h recomputed from the dumped o_proj weights (`--what wo`, W_O in HF layout); every
dataset names its dimensions and is chunked one head per chunk; provenance is present.

Environment: CKV_BINARY (the ckv executable), CKV_MODEL (the default model; tests skip
when it is absent).
"""
import json
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("CKV_BINARY", str(ROOT / "build" / "ckv"))
MODEL = os.environ.get("CKV_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
LAYERS = [0, 14, 29]
WINDOW = 16

pytestmark = pytest.mark.skipif(not Path(MODEL).exists(), reason="default model absent")


def run_dump(tmp: Path, name: str, *flags: str) -> Path:
    records = [
        {"id": "paris", "context": "The Eiffel Tower stands in Paris, the capital of France. " * 3,
         "question": " Where is the Eiffel Tower?", "answer": "Paris",
         "spans": {"needle": [[4, 16]]}},
        {"id": "count", "context": "one two three four five six seven eight nine ten eleven twelve " * 2},
    ]
    jsonl = tmp / f"{name}.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp / f"{name}.h5"
    r = subprocess.run([BINARY, "-q", "dump", "--model", MODEL, "-t", "2", "--input", str(jsonl),
                        "-o", str(out), *flags], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.fixture(scope="module")
def dump32(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dump")
    out = run_dump(tmp, "f32", "--what", "q,k,v,attn,nu,wo,logits", "--layers",
                   ",".join(map(str, LAYERS)), "--window", str(WINDOW), "--dtype", "f32")
    with h5py.File(out, "r") as f:
        yield f


def softmax_rows(q, k, rows, d):
    """q: [r, d] at positions `rows`; k: [n, d] -> causal softmax [r, n] in float64."""
    logits = (q.astype(np.float64) @ k.astype(np.float64).T) / np.sqrt(d)
    n = k.shape[0]
    logits[np.arange(n)[None, :] > rows[:, None]] = -np.inf
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


def test_attention_rows_are_causal_softmax_of_dumped_q_k(dump32):
    m = dump32["model"].attrs
    group, d = int(m["n_head"]) // int(m["n_kv_head"]), int(m["d_head"])
    for rid, rec in dump32["records"].items():
        n, c = int(rec.attrs["n_tokens"]), int(rec.attrs["context_end"])
        rows = rec["attn_rows"][:]
        # Default rows: the last WINDOW context positions and every question position.
        assert rows.tolist() == list(range(c - WINDOW, n)), rid
        for layer in LAYERS:
            g = rec[f"layers/{layer}"]
            attn, q, k = g["attn"][:], g["q"][:], g["k"][:]
            assert attn.shape == (int(m["n_head"]), len(rows), n)
            np.testing.assert_allclose(attn.sum(axis=2), 1.0, atol=1e-5)
            future = np.arange(n)[None, :] > rows[:, None]
            assert np.all(attn[:, future] == 0), f"{rid} layer {layer}: attention to the future"
            for h in range(attn.shape[0]):
                ref = softmax_rows(q[h, rows], k[h // group], rows, d)
                np.testing.assert_allclose(attn[h], ref, atol=2e-5, err_msg=f"{rid} L{layer} h{h}")


def test_nu_equals_norms_of_v_times_o_proj(dump32):
    m = dump32["model"].attrs
    n_head, n_kv, d = int(m["n_head"]), int(m["n_kv_head"]), int(m["d_head"])
    for layer in LAYERS:
        w_o = dump32[f"model/layers/{layer}/W_O"][:].astype(np.float64)  # [d_model, n_head*d]
        assert w_o.shape == (int(m["d_model"]), n_head * d)
        for rid, rec in dump32["records"].items():
            g = rec[f"layers/{layer}"]
            v = g["v"][:].astype(np.float64)  # [n_kv_head, n, d]
            for h in range(n_head):
                p = v[h // (n_head // n_kv)] @ w_o[:, h * d:(h + 1) * d].T  # [n, d_model]
                np.testing.assert_allclose(g["nu_l1"][h], np.abs(p).sum(axis=1), rtol=1e-4,
                                           err_msg=f"{rid} L{layer} h{h}")
                np.testing.assert_allclose(g["nu_l2"][h], np.sqrt((p * p).sum(axis=1)), rtol=1e-4)


def test_layout_dims_chunks_and_provenance(dump32):
    a = dump32.attrs
    assert a["schema"] == "ckv.dump" and int(a["schema_version"]) == 1
    for key in ["ckv_version", "git_commit", "command_line", "model_path", "model_sha256",
                "dtype", "threads", "device", "input_file", "input_sha256", "created"]:
        assert key in a, key
    assert len(a["model_sha256"]) == 64 and a["dtype"] == "float32"
    assert list(dump32["model"].attrs["n_layer"].shape) == [] and dump32["model"].attrs["arch"] == "llama"
    rec = dump32["records/paris"]
    assert rec.attrs["complete"] and rec.attrs["answer"] == "Paris"
    assert json.loads(rec.attrs["spans"])["needle"][0][0] >= 0
    assert rec["logits_last"].shape == (int(dump32["model"].attrs["vocab"]),)

    def check(name, obj):
        if isinstance(obj, h5py.Dataset):
            dims = obj.attrs["dims"].split()
            assert len(dims) == obj.ndim, name
            if dims[0] in ("head", "kv_head"):
                assert obj.chunks[0] == 1 and obj.chunks[1:] == obj.shape[1:], name
    dump32.visititems(check)


def test_f16_compressed_dump(tmp_path, dump32):
    out = run_dump(tmp_path, "f16", "--what", "q,attn,nu", "--layers", "29", "--heads", "1,4",
                   "--compress", "4", "--window", str(WINDOW))
    with h5py.File(out, "r") as f:
        assert list(f.attrs["heads"]) == [1, 4] and list(f.attrs["kv_heads"]) == [0, 1]
        g = f["records/paris/layers/29"]
        assert g["q"].dtype == np.float16 and g["q"].compression == "gzip"
        ref = dump32["records/paris/layers/29"]
        np.testing.assert_allclose(g["q"][:], ref["q"][[1, 4]], rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(g["nu_l1"][:], ref["nu_l1"][[1, 4]], rtol=2e-3)
        np.testing.assert_allclose(g["attn"][:], ref["attn"][[1, 4]], atol=1e-3)

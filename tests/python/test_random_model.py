"""bench/make_random_model.py at small shapes, read back by ckv and by gguf-py (issue 12).

- ckv's W_O (`ckv dump --what wo`, float32) of the Q4_K and Q8_0 GGUFs equals gguf-py's
  dequantize of the stored blocks bit for bit: the Q4_K encoder writes blocks that both
  dequantisers read alike.
- The bf16 safetensors directory and the F32 GGUF hold the same weights (one seed): W_O
  of the bf16 model is the f32 one rounded to bf16, and the post-RoPE q of layer 0 (HF
  layout, the GGUF's llama q/k permutation undone by ckv) agree to bf16 precision.
- Q8_0 and Q4_K logits stay near the F32 ones, with the same argmax.
- A config with a sliding window shorter than the context loads, and `ckv info` names the
  window and the layers it covers (Mistral: every layer).

Needs numpy, h5py and gguf (skipped without them); CKV_BINARY is the ckv executable.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
h5py = pytest.importorskip("h5py")
gguf = pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("CKV_BINARY", str(ROOT / "build" / "ckv"))
SCRIPT = ROOT / "bench" / "make_random_model.py"
SMALL = ["num_hidden_layers=2", "hidden_size=512", "intermediate_size=768", "num_attention_heads=4",
         "num_key_value_heads=2", "head_dim=128", "vocab_size=300"]


def make(tmp, config, fmt, name, extra=()):
    out = tmp / name
    args = [sys.executable, str(SCRIPT), "--config", str(ROOT / "bench" / "configs" / config), "--format", fmt,
            "-o", str(out), "--seed", "7"]
    for item in SMALL + list(extra):
        args += ["--set", item]
    subprocess.run(args, check=True)
    return out


def dump(tmp, model, name):
    tokens = tmp / "tokens.txt"
    tokens.write_text(" ".join(str(i) for i in range(5, 45)))
    out = tmp / f"{name}.h5"
    subprocess.run([BINARY, "-q", "dump", "--model", str(model), "--tokens", str(tokens), "--what", "wo,q,logits",
                    "-o", str(out), "--force"], check=True)
    f = h5py.File(out, "r")
    rec = f["records"][next(iter(f["records"]))]
    return dict(wo=f["model/layers/0/W_O"][()], q=rec["layers/0/q"][()], logits=rec["logits_last"][()])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("random_model")
    out = {}
    for cfg in ("llama-3.1-8b.json", "qwen2.5-7b.json"):
        for fmt in ("f32", "q8_0", "q4_k", "bf16"):
            name = f"{cfg}.{fmt}" + ("" if fmt == "bf16" else ".gguf")
            path = make(tmp, cfg, fmt, name)
            out[(cfg, fmt)] = (path, dump(tmp, path, name))
    return out


@pytest.mark.parametrize("cfg", ["llama-3.1-8b.json", "qwen2.5-7b.json"])
@pytest.mark.parametrize("fmt", ["q8_0", "q4_k"])
def test_ckv_dequantises_like_gguf_py(models, cfg, fmt):
    path, got = models[(cfg, fmt)]
    reader = gguf.GGUFReader(str(path))
    t = {x.name: x for x in reader.tensors}["blk.0.attn_output.weight"]
    assert t.tensor_type.name == fmt.upper()
    ref = gguf.quants.dequantize(t.data, t.tensor_type)
    assert ref.shape == got["wo"].shape
    assert np.array_equal(ref.view(np.uint32), got["wo"].view(np.uint32))


@pytest.mark.parametrize("cfg", ["llama-3.1-8b.json", "qwen2.5-7b.json"])
def test_formats_hold_the_same_weights(models, cfg):
    f32 = models[(cfg, "f32")][1]
    bf16 = models[(cfg, "bf16")][1]
    u = f32["wo"].view(np.uint32)
    rounded = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    assert np.array_equal(bf16["wo"], rounded)
    q_err = np.abs(bf16["q"] - f32["q"]).max() / np.abs(f32["q"]).max()
    assert q_err < 2e-2, q_err  # bf16 weights; a wrong q/k permutation gives O(1)
    for fmt, tol in (("q8_0", 0.05), ("q4_k", 0.25)):
        lg = models[(cfg, fmt)][1]["logits"]
        err = np.abs(lg - f32["logits"]).max() / np.ptp(f32["logits"])
        assert err < tol, (fmt, err)
        assert lg.argmax() == f32["logits"].argmax(), fmt


def test_sliding_window_is_reported(tmp_path):
    model = make(tmp_path, "mistral-7b-v0.3.json", "bf16", "swa", ["sliding_window=64",
                                                                    "max_position_embeddings=4096"])
    r = subprocess.run([BINARY, "info", "--model", str(model)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "sliding window 64 on 2 of 2 layers" in r.stdout, r.stdout


def test_q4_k_codes_are_read_like_gguf_py(tmp_path):
    # --format q4_k_codes (codes drawn directly, for the 30B benchmarks): ckv's W_O equals
    # gguf-py's dequantisation bit for bit, the values have the std the script targets
    # (0.02 * sqrt(4096 / fan_in)) and a mean near 0, and the forward pass stays finite.
    path = make(tmp_path, "qwen3-30b-a3b.json", "q4_k_codes", "moe.gguf",
                ["num_experts=8", "num_experts_per_tok=2", "moe_intermediate_size=256"])
    got = dump(tmp_path, path, "moe")
    reader = gguf.GGUFReader(str(path))
    tensors = {x.name: x for x in reader.tensors}
    t = tensors["blk.0.attn_output.weight"]
    assert t.tensor_type.name == "Q4_K"
    assert tensors["blk.0.ffn_gate_exps.weight"].tensor_type.name == "Q4_K"
    ref = gguf.quants.dequantize(t.data, t.tensor_type)
    assert np.array_equal(ref.view(np.uint32), got["wo"].view(np.uint32))
    std = 0.02 * (4096 / ref.shape[1]) ** 0.5
    assert abs(ref.std() / std - 1) < 0.02, ref.std()
    assert abs(ref.mean()) < 0.02 * std, ref.mean()
    assert np.isfinite(got["logits"]).all() and np.isfinite(got["q"]).all()

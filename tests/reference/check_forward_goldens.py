#!/usr/bin/env python3
"""Sanity-check tests/data/golden/*.h5 against a second, independent forward pass:
plain numpy in float64 from the weight files themselves (safetensors read
directly; GGUF dequantised with gguf-py and un-permuted here; llama3 rope from
docs/MODELS.md's formula or from rope_freqs.weight; qwen3's q/k norms; Qwen3-MoE's and
Mixtral's experts token by token, their GGUFs unstacked by make_tiny_models.moe_from_gguf;
sliding windows as HF applies them, per layer). Gemma 3 and Phi-3 are not in this pass: their
goldens are skipped with a line saying so (HF transformers made them). Also: attention rows sum to 1,
entries after the query are exactly 0. Uses the C++ tests' tolerances (issue 2),
so a C++ failure against these goldens points at the C++ side.
Usage: check_forward_goldens.py [golden.h5 ...]   (default: all)
"""
import json
import math
import sys
from pathlib import Path

import h5py
import numpy as np
from safetensors import safe_open

import gguf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import ROOT, gguf_name, moe_from_gguf, unpermute_qk  # noqa: E402

DATA = ROOT / "tests" / "data"
TOL = {"q": 1e-4, "k": 1e-4, "v": 1e-4, "resid": 1e-4, "head_out": 1e-4}


def load_hf(path):
    cfg = json.loads((path / "config.json").read_text())
    files = sorted(path.glob("*.safetensors"))
    w = {}
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for k in st.keys():
                w[k] = st.get_tensor(k).float().numpy().astype(np.float64)
    rp = cfg.get("rope_parameters") or {}
    hp = dict(n_layer=cfg["num_hidden_layers"], n_head=cfg["num_attention_heads"],
              n_kv_head=cfg["num_key_value_heads"], eps=cfg["rms_norm_eps"],
              d_head=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
              theta=cfg.get("rope_theta", rp.get("rope_theta", 10000.0)),
              scaling=cfg.get("rope_scaling") or (rp if rp.get("rope_type") == "llama3" else None))
    hp.update(moe_hparams(cfg))
    hp["windows"] = windows(cfg, hp["n_layer"])
    return hp, w


def windows(cfg, n_layer):
    """Each layer's sliding window (0: full attention), as HF's modelling files apply it:
    layer_types when the config has them, Qwen2's use_sliding_window from max_window_layers
    on, else Mistral's sliding_window on every layer."""
    w = cfg.get("sliding_window") or 0
    if not w:
        return [0] * n_layer
    if cfg.get("layer_types"):
        return [w if t == "sliding_attention" else 0 for t in cfg["layer_types"]]
    if cfg["model_type"] == "qwen2":
        return [w if cfg.get("use_sliding_window") and l >= cfg.get("max_window_layers", n_layer) else 0
                for l in range(n_layer)]
    return [w] * n_layer


# Families this numpy pass does not implement: their goldens are checked against HF
# transformers only (tests/reference/make_forward_goldens.py), and this script says so.
NOT_HERE = {"gemma3": "Gemma 3's norms, GeGLU and local RoPE", "gemma3_text": "Gemma 3's norms, GeGLU and local RoPE",
            "phi3": "Phi-3's fused projections and LongRoPE"}


def moe_hparams(cfg):
    """Qwen3-MoE / Mixtral routing from config.json (docs/MODELS.md "Mixture of experts")."""
    if cfg["model_type"] not in ("qwen3_moe", "mixtral"):
        return {}
    mixtral = cfg["model_type"] == "mixtral"
    n = cfg.get("num_experts", cfg.get("num_local_experts"))
    step, only = cfg.get("decoder_sparse_step", 1), cfg.get("mlp_only_layers", [])
    return dict(top_k=cfg["num_experts_per_tok"], norm_topk=mixtral or cfg.get("norm_topk_prob", False),
                expert_layers=[l for l in range(cfg["num_hidden_layers"])
                               if n > 0 and l not in only and (l + 1) % step == 0],
                moe_prefix="block_sparse_moe" if mixtral else "mlp",
                moe_names=("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj"))


def load_gguf(path):
    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()
    if f"{arch}.expert_count" in r.fields:  # the MoE copies of HF directories
        return load_moe_gguf(path, r)
    f = lambda k: r.fields[f"{arch}.{k}"].contents()  # noqa: E731
    hp = dict(n_layer=f("block_count"), n_head=f("attention.head_count"),
              n_kv_head=f("attention.head_count_kv"), eps=f("attention.layer_norm_rms_epsilon"),
              d_head=f("rope.dimension_count"), theta=f("rope.freq_base"), scaling=None)
    names = {}
    for l in range(hp["n_layer"]):
        for sub in ("input_layernorm", "post_attention_layernorm"):
            names[gguf_name(f"model.layers.{l}.{sub}.weight")] = f"model.layers.{l}.{sub}.weight"
        for sub in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                    "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                    "self_attn.q_norm", "self_attn.k_norm"):
            hf = f"model.layers.{l}.{sub}.weight"
            names[gguf_name(hf)] = hf
    for hf in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
        names[gguf_name(hf)] = hf
    win = r.fields[f"{arch}.attention.sliding_window"].contents() if f"{arch}.attention.sliding_window" in r.fields else 0
    hp["windows"] = [int(win)] * hp["n_layer"]
    w = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        a = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)
        if t.name == "rope_freqs.weight":
            hp["rope_freqs"] = a
            continue
        if arch == "llama" and ".attn_q." in t.name:
            a = unpermute_qk(a, hp["n_head"])
        elif arch == "llama" and ".attn_k." in t.name:
            a = unpermute_qk(a, hp["n_kv_head"])
        w[names[t.name]] = a
    return hp, w


def load_moe_gguf(path, r):
    """tiny_qwen3moe.gguf / tiny_mixtral.gguf: hyperparameters from the HF directory of the
    same name, weights from the GGUF (dequantised, unstacked and un-permuted by
    make_tiny_models.moe_from_gguf)."""
    hp, hf_w = load_hf(path.with_suffix(""))
    spec = dict(arch=json.loads((path.with_suffix("") / "config.json").read_text())["model_type"],
                n_head=hp["n_head"], n_kv_head=hp["n_kv_head"])
    tensors = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).reshape(
        [int(x) for x in reversed(t.shape)]).astype(np.float64) for t in r.tensors}
    w = moe_from_gguf(spec, list(hf_w), tensors)
    assert sorted(w) == sorted(hf_w), f"{path}: tensors differ from the HF directory's"
    return hp, w


def inv_freq(hp):
    dh = hp["d_head"]
    inv = hp["theta"] ** (-np.arange(0, dh, 2, dtype=np.float64) / dh)
    if "rope_freqs" in hp:
        return inv / hp["rope_freqs"]
    s = hp["scaling"]
    if s:
        old, lo, hi, fac = (s["original_max_position_embeddings"], s["low_freq_factor"],
                            s["high_freq_factor"], s["factor"])
        wl = 2 * math.pi / inv
        sm = (old / wl - lo) / (hi - lo)
        smooth = (1 - sm) * inv / fac + sm * inv
        inv = np.where(wl > old / lo, inv / fac, np.where(wl < old / hi, inv, smooth))
    return inv


def rope(x, inv):  # x [heads, seq, d_head], HF rotate_half
    ang = np.arange(x.shape[1])[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))
    half = x.shape[2] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def moe(hp, w, p, xn):
    """Token by token: softmax of the router logits, the top_k experts, their weights
    renormalised when norm_topk, the weighted sum of their SiLU-gated MLPs."""
    gate_n, up_n, down_n = hp["moe_names"]
    out = np.zeros_like(xn)
    for t in range(xn.shape[0]):
        z = w[p + "gate.weight"] @ xn[t]
        prob = np.exp(z - z.max())
        prob /= prob.sum()
        top = np.argsort(-prob, kind="stable")[:hp["top_k"]]
        wt = prob[top] / (prob[top].sum() if hp["norm_topk"] else 1.0)
        for e, we in zip(top, wt):
            g = w[f"{p}experts.{e}.{gate_n}.weight"] @ xn[t]
            u = w[f"{p}experts.{e}.{up_n}.weight"] @ xn[t]
            out[t] += we * (w[f"{p}experts.{e}.{down_n}.weight"] @ (g / (1 + np.exp(-g)) * u))
    return out


def forward(hp, w, ids):
    """Yields (layer, dict) then ("logits", array); float64 throughout."""
    x = w["model.embed_tokens.weight"][ids]  # [seq, d_model]
    seq, H, G, dh = len(ids), hp["n_head"], hp["n_kv_head"], hp["d_head"]
    inv = inv_freq(hp)
    for l in range(hp["n_layer"]):
        p = f"model.layers.{l}."
        xn = rms(x, w[p + "input_layernorm.weight"], hp["eps"])

        def proj(name, heads):
            y = xn @ w[p + f"self_attn.{name}.weight"].T + w.get(p + f"self_attn.{name}.bias", 0)
            return y.reshape(seq, heads, dh).transpose(1, 0, 2)
        q, k = proj("q_proj", H), proj("k_proj", G)
        if p + "self_attn.q_norm.weight" in w:  # qwen3: RMSNorm of each head before RoPE
            q, k = rms(q, w[p + "self_attn.q_norm.weight"], hp["eps"]), rms(k, w[p + "self_attn.k_norm.weight"], hp["eps"])
        q, k, v = rope(q, inv), rope(k, inv), proj("v_proj", G)
        kv = np.repeat(np.arange(G), H // G)  # query head h uses KV head h / group
        logit = q @ k[kv].transpose(0, 2, 1) / math.sqrt(dh)
        allowed = np.tri(seq, dtype=bool)
        win = hp.get("windows", [0] * hp["n_layer"])[l]
        if win:  # HF: a query at p sees the keys (p - window, p]
            allowed &= ~np.tri(seq, k=-win, dtype=bool)
        logit = np.where(allowed, logit, -np.inf)
        a = np.exp(logit - logit.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = a @ v[kv]  # [n_head, seq, d_head]
        wo = w[p + "self_attn.o_proj.weight"]
        ho = np.stack([o[h] @ wo[:, h * dh:(h + 1) * dh].T for h in range(H)])
        x = x + ho.sum(0)
        xn = rms(x, w[p + "post_attention_layernorm.weight"], hp["eps"])
        if l in hp.get("expert_layers", []):
            x = x + moe(hp, w, p + hp["moe_prefix"] + ".", xn)
        else:
            g, u = xn @ w[p + "mlp.gate_proj.weight"].T, xn @ w[p + "mlp.up_proj.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
        yield l, dict(q=q, k=k, v=v, attn=a, head_out=ho, resid=x)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    yield "logits", rms(x, w["model.norm.weight"], hp["eps"]) @ head.T


def check_file(path, model_rel):
    mp = DATA / model_rel if not model_rel.startswith("models/SmolLM2") else ROOT / model_rel
    hp, w = load_gguf(mp) if mp.suffix == ".gguf" else load_hf(mp)
    worst = {}

    def note(key, val):
        worst[key] = max(worst.get(key, 0.0), float(val))
    with h5py.File(path, "r") as f:
        assert f.attrs["format_version"] == 1
        for pi in f["prompts"]:
            g = f["prompts"][pi]
            ids = g["tokens"][()]
            for l, ref in forward(hp, w, ids):
                if l == "logits":
                    rows = g["logits_rows"][()]
                    gold, mine = g["logits"][()], ref[rows]
                    note("logits", np.abs(gold - mine).max() / (mine.max() - mine.min()) / 1e-3)
                    assert (gold.argmax(-1) == mine.argmax(-1)).all(), f"{path} argmax"
                    continue
                lg = g[f"layers/{l}"]
                if "attn" in lg:
                    rows = lg["attn_rows"][()]
                    attn = lg["attn"][()]
                    note("attn_rowsum", np.abs(attn.sum(-1) - 1).max() / 1e-5)
                    assert (attn[:, np.arange(len(rows)), :] * (
                        np.arange(attn.shape[2])[None, None, :] > rows[None, :, None])).max() == 0
                    note("attn", np.abs(attn - ref["attn"][:, rows]).max() / 1e-5)
                    note("head_out", np.abs(lg["head_out"][()] - ref["head_out"][:, rows]).max()
                         / np.abs(ref["head_out"]).max() / 1e-4)
                for key in ("q", "k", "v", "resid"):
                    if key in lg:
                        note(key, np.abs(lg[key][()] - ref[key]).max()
                             / np.abs(ref[key]).max() / TOL[key])
                    elif key + "_norm" in lg:
                        n = np.linalg.norm(ref[key], axis=-1)
                        note(key + "_norm", np.abs(lg[key + "_norm"][()] - n).max()
                             / n.max() / TOL[key])
    bad = {k: v for k, v in worst.items() if v > 0.5}
    print(f"{path.name} vs {model_rel}: error / tolerance "
          + ", ".join(f"{k} {v:.2g}" for k, v in sorted(worst.items())))
    assert not bad, f"{path.name}: numpy forward disagrees with the golden: {bad}"


def main():
    files = [Path(a) for a in sys.argv[1:]] or sorted((DATA / "golden").glob("*.h5"))
    for path in files:
        with h5py.File(path, "r") as f:
            models = [f.attrs["model"]] + ([f.attrs["model_alt"]] if "model_alt" in f.attrs else [])
        for m in models:
            if m.startswith("models/SmolLM2") and not (ROOT / m).exists():
                print(f"skip {path.name}: {m} missing")
                continue
            hf_dir = (DATA / m).with_suffix("")  # a tiny model's HF directory (its GGUF's twin)
            config = hf_dir / "config.json"
            kind = json.loads(config.read_text())["model_type"] if config.exists() else ""
            if kind in NOT_HERE:
                print(f"skip {path.name} vs {m}: {NOT_HERE[kind]} are not in this numpy pass (HF's goldens only)")
                continue
            check_file(path, m)
    print("every golden checked agrees with the numpy forward pass")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Deterministic random-weight models from an HF config.json (issue 12, item 7).

Writes, from one config and one seed, the same weights as
  bf16  an HF directory: config.json + model.safetensors (BF16, streamed to disk)
  q8_0  a GGUF file, matrices Q8_0 (gguf-py's quantiser)
  q4_k  a GGUF file, matrices Q4_K (quantised here: gguf-py has no Q4_K quantiser)
  q4_k_m  a GGUF file in llama.cpp's Q4_K_M mix (Q4_K, Q6_K for some tensors): the Q8_0 file
        requantised by llama.cpp's own quantiser through llama-cpp-python (needs it; much
        faster than q4_k for 30B-sized models, and the type mix a released Q4_K_M has)
  q4_k_codes  a GGUF file, matrices Q4_K whose 4-bit codes are drawn directly (uniform codes,
        one scale per tensor giving the config's std; no float weights are made): a 30B file
        in minutes, for speed and memory benchmarks; the values differ from the other formats'
  f32   a GGUF file, everything F32 (small shapes only: a reference for the others)
Norms, biases and rope_freqs are F32 in GGUF. GGUF files follow llama.cpp's converter:
architecture `llama` for llama/mistral configs (q/k rows permuted as convert_hf_to_gguf
does), `qwen2` for qwen2 (q/k/v biases, no permutation), `qwen3` for qwen3 (per-head q/k
norms `attn_q_norm`/`attn_k_norm`, head_dim from the config), `qwen3moe` for qwen3_moe (the
router `ffn_gate_inp` in F32, each layer's experts stacked per projection as
`ffn_{gate,up,down}_exps` [n_expert, rows, cols]; GGUF only), llama3 rope scaling as the
`rope_freqs.weight` tensor. No vocabulary is written (`tokenizer.ggml.model` = "none", which
llama.cpp and ckv both load as a model without one): feed token ids (`"tokens"` records).

Every tensor comes from its own numpy PCG64 stream seeded by (seed, crc32(HF name)), so a
tensor does not depend on the others, on the format or on the layer-count override.
Matrices are N(0, std^2) with std = 0.02 * sqrt(4096 / fan_in) — a scale that keeps the
residual stream of a random model finite over 32 layers; norms are 1 + N(0, 0.02^2).

  make_random_model.py --config bench/configs/llama-3.1-8b.json --format q4_k \
      -o out/models/llama-3.1-8b.q4_k.gguf
  make_random_model.py --config CONFIG --format bf16 -o DIR [--set num_hidden_layers=2]
  make_random_model.py --self-check     # Q4_K/Q8_0 encoders against gguf-py's dequantiser

Outputs are written under a temporary name and renamed when complete. Files of the 7-8B
configs are 4-16 GB: write them to a git-ignored place (out/ or outside the repository).
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

QK_K = 256


# --------------------------------------------------------------------------------------
# Q4_K: f16 d; f16 dmin; u8 scales[12]; u8 qs[128] (docs/MODELS.md). Eight 32-element
# sub-blocks j with 6-bit scale sc_j and min m_j: x ~ d*sc_j*q - dmin*m_j, q in 0..15.
# The structure of ggml's quantize_row_q4_K_ref: a scale and a (non-positive) minimum per
# sub-block, both quantised to 6 bits against the super-block's largest, then the nibbles.
# ggml refines each sub-block's scale/min by a small search (make_qkx2_quants); this
# encoder takes the plain min/max fit, which is a valid (slightly less accurate) Q4_K.
# --------------------------------------------------------------------------------------
def quantize_q4_k(x):
    """x: float32 [n] with n % 256 == 0 -> uint8 [n/256, 144]."""
    blocks = x.reshape(-1, 8, 32).astype(np.float32)
    nb = blocks.shape[0]
    lo = np.minimum(blocks.min(axis=2), 0.0)              # [nb, 8] <= 0
    hi = blocks.max(axis=2)
    scale = (hi - lo) / 15.0                              # step of each sub-block
    minus = -lo                                           # >= 0
    max_scale = scale.max(axis=1)                         # [nb]
    max_min = minus.max(axis=1)
    d = (max_scale / 63.0).astype(np.float16)
    dmin = (max_min / 63.0).astype(np.float16)
    d32, dmin32 = d.astype(np.float32), dmin.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32[:, None] > 0, np.rint(scale / d32[:, None]), 0)
        mn = np.where(dmin32[:, None] > 0, np.rint(minus / dmin32[:, None]), 0)
    sc = np.clip(sc, 0, 63).astype(np.uint8)
    mn = np.clip(mn, 0, 63).astype(np.uint8)
    step = d32[:, None] * sc.astype(np.float32)           # [nb, 8], as the dequantiser forms it
    offs = dmin32[:, None] * mn.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step[:, :, None] > 0, np.rint((blocks + offs[:, :, None]) / step[:, :, None]), 0)
    q = np.clip(q, 0, 15).astype(np.uint8)                # [nb, 8, 32]
    # scales[12]: bytes 0..3 low 6 bits sc_0..3 (top 2 bits: sc_4..7 >> 4), bytes 4..7 the
    # same for the mins, bytes 8..11 low nibble sc_4..7 & 15, high nibble mn_4..7 & 15.
    packed = np.zeros((nb, 12), dtype=np.uint8)
    packed[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    # qs[128]: chunk c (0..3) of 32 bytes holds sub-block 2c in the low nibbles and 2c+1 in
    # the high nibbles.
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(nb, 128)
    out = np.empty((nb, 144), dtype=np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
    out[:, 2:4] = dmin.view(np.uint8).reshape(nb, 2)
    out[:, 4:16] = packed
    out[:, 16:144] = qs
    return out


def q4_k_codes(rng, rows, cols, std):
    """Q4_K rows [rows, cols/256 * 144] with uniform random codes q in 0..15 and every
    sub-block scale and min at 32: x = d*32*q - dmin*32, with d and dmin chosen so that x has
    mean 0 and standard deviation std (uniform q: mean 7.5, std sqrt(255/12))."""
    nb = rows * (cols // QK_K)
    d = np.float16(std / math.sqrt(255.0 / 12.0) / 32.0)
    dmin = np.float16(float(d) * 7.5)
    head = np.zeros(16, dtype=np.uint8)
    head[0:2] = np.array([d]).view(np.uint8)
    head[2:4] = np.array([dmin]).view(np.uint8)
    head[4:8] = head[8:12] = 32 | ((32 >> 4) << 6)  # sc_0..3 / mn_0..3 = 32, top bits of sc/mn_4..7
    head[12:16] = (32 & 15) | ((32 & 15) << 4)        # low nibbles of sc_4..7 and mn_4..7
    out = np.empty((nb, 144), dtype=np.uint8)
    out[:, :16] = head
    out[:, 16:] = rng.integers(0, 256, size=(nb, 128), dtype=np.uint8)
    return out.reshape(rows, -1)


def q4_k_expected(x):
    """What the Q4_K encoding of x must dequantise to (for the self-check): the grid value
    nearest to x within each sub-block's representable range."""
    import gguf
    return gguf.quants.dequantize(quantize_q4_k(x).reshape(-1), gguf.GGMLQuantizationType.Q4_K)


def self_check():
    import gguf
    T = gguf.GGMLQuantizationType
    rng = np.random.Generator(np.random.PCG64(1))
    for scale in (0.02, 1.0, 50.0):
        x = (rng.standard_normal(64 * QK_K, dtype=np.float32) * scale).astype(np.float32)
        x[:QK_K] = 0.0                       # an all-zero super-block
        x[QK_K:2 * QK_K] = abs(x[QK_K:2 * QK_K])  # an all-positive one
        enc = quantize_q4_k(x)
        y = gguf.quants.dequantize(enc.reshape(-1), T.Q4_K).reshape(-1)
        # Error bound of the min/max fit: half a step plus the 6-bit rounding of scale and
        # min (at most half of d and dmin times 15 and 1 respectively, per element).
        blocks = x.reshape(-1, 8, 32)
        step = (blocks.max(2) - np.minimum(blocks.min(2), 0)) / 15.0
        sup = step.max(1)
        bound = (step / 2 + sup[:, None] / 63 * 8 + (-np.minimum(blocks.min(2), 0)).max(1)[:, None] / 63)
        err = np.abs(y.reshape(-1, 8, 32) - blocks).max(2)
        assert np.all(err <= bound * 1.01 + 1e-7), f"Q4_K error {err.max()} above bound at scale {scale}"
        assert np.all(y[:QK_K] == 0)
        rel = np.abs(y - x).max() / np.abs(x).max()
        print(f"Q4_K scale {scale}: max abs err {np.abs(y - x).max():.3g}, rel to max {rel:.3g}")
        q8 = gguf.quants.quantize(x.reshape(-1, 256), T.Q8_0)
        y8 = gguf.quants.dequantize(q8, T.Q8_0).reshape(-1)
        print(f"Q8_0 scale {scale}: max abs err {np.abs(y8 - x).max():.3g}")
    for std in (0.02, 1.0):
        y = gguf.quants.dequantize(q4_k_codes(rng, 64, 2 * QK_K, std).reshape(-1), T.Q4_K)
        assert abs(y.mean()) < 0.02 * std and abs(y.std() / std - 1) < 0.01, (y.mean(), y.std())
        print(f"Q4_K codes std {std}: mean {y.mean():.3g}, std {y.std():.4g}")
    print("self-check ok")


# --------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------
def read_config(path, overrides):
    cfg = json.loads(Path(path).read_text())
    for item in overrides:
        key, _, value = item.partition("=")
        cfg[key] = json.loads(value)
    mt = cfg.get("model_type")
    if mt not in ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe"):
        sys.exit(f"make_random_model: model_type {mt!r} is not llama, mistral, qwen2, qwen3 or qwen3_moe")
    if mt == "qwen3_moe" and (cfg.get("decoder_sparse_step", 1) != 1 or cfg.get("mlp_only_layers")):
        sys.exit("make_random_model: qwen3_moe with dense layers (decoder_sparse_step, mlp_only_layers) has no GGUF form")
    if cfg.get("hidden_act", "silu") != "silu":
        sys.exit("make_random_model: hidden_act must be silu")
    return cfg


def dims(cfg):
    d_model = cfg["hidden_size"]
    n_head = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    d_head = cfg.get("head_dim") or d_model // n_head
    moe = cfg["model_type"] == "qwen3_moe"
    return dict(d_model=d_model, n_head=n_head, n_kv=n_kv, d_head=d_head, d_ff=cfg["intermediate_size"],
                vocab=cfg["vocab_size"], n_layer=cfg["num_hidden_layers"],
                bias=cfg["model_type"] == "qwen2", qk_norm=cfg["model_type"] in ("qwen3", "qwen3_moe"),
                n_expert=cfg["num_experts"] if moe else 0, top_k=cfg.get("num_experts_per_tok", 0) if moe else 0,
                d_ff_exp=cfg.get("moe_intermediate_size", 0) if moe else 0,
                tied=bool(cfg.get("tie_word_embeddings", False)))


def hf_tensors(cfg):
    """(HF name, shape) of every tensor, in HF order."""
    s = dims(cfg)
    q, kv = s["n_head"] * s["d_head"], s["n_kv"] * s["d_head"]
    out = [("model.embed_tokens.weight", (s["vocab"], s["d_model"]))]
    for l in range(s["n_layer"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (s["d_model"],)),
                (p + "self_attn.q_proj.weight", (q, s["d_model"])),
                (p + "self_attn.k_proj.weight", (kv, s["d_model"])),
                (p + "self_attn.v_proj.weight", (kv, s["d_model"]))]
        if s["bias"]:
            out += [(p + "self_attn.q_proj.bias", (q,)), (p + "self_attn.k_proj.bias", (kv,)),
                    (p + "self_attn.v_proj.bias", (kv,))]
        if s["qk_norm"]:
            out += [(p + "self_attn.q_norm.weight", (s["d_head"],)), (p + "self_attn.k_norm.weight", (s["d_head"],))]
        out += [(p + "self_attn.o_proj.weight", (s["d_model"], q)),
                (p + "post_attention_layernorm.weight", (s["d_model"],))]
        if s["n_expert"]:  # the router, then each projection of every expert as one stacked tensor
            e, f = s["n_expert"], s["d_ff_exp"]
            out += [(p + "mlp.gate.weight", (e, s["d_model"])),
                    (p + "mlp.experts.gate_proj", (e, f, s["d_model"])),
                    (p + "mlp.experts.up_proj", (e, f, s["d_model"])),
                    (p + "mlp.experts.down_proj", (e, s["d_model"], f))]
        else:
            out += [(p + "mlp.gate_proj.weight", (s["d_ff"], s["d_model"])),
                    (p + "mlp.up_proj.weight", (s["d_ff"], s["d_model"])),
                    (p + "mlp.down_proj.weight", (s["d_model"], s["d_ff"]))]
    out.append(("model.norm.weight", (s["d_model"],)))
    if not s["tied"]:
        out.append(("lm_head.weight", (s["vocab"], s["d_model"])))
    return out


def tensor_rng(seed, name):
    """The one random stream of a tensor: a function of (seed, HF name) alone."""
    return np.random.Generator(np.random.PCG64([seed, zlib.crc32(name.encode())]))


def matrix_std(name, cols):
    """Standard deviation of a matrix's values: 0.02 * sqrt(4096 / fan_in), the embeddings 1."""
    # embeddings of unit scale so the first RMSNorm sees ordinary inputs
    return 1.0 if name == "model.embed_tokens.weight" else 0.02 * math.sqrt(4096.0 / cols)


def tensor_chunks(seed, name, shape):
    """The float32 values of one tensor, in row chunks of at most 4M elements (the chunking
    depends on the shape only): a function of (seed, name, shape) alone."""
    rng = tensor_rng(seed, name)
    if len(shape) == 1:
        x = 0.02 * rng.standard_normal(shape, dtype=np.float32)
        if name.endswith("norm.weight") or "layernorm" in name:
            x += 1.0
        yield x.astype(np.float32)
        return
    # A stacked expert tensor [n_expert, rows, cols] comes as its n_expert * rows rows.
    total, cols = math.prod(shape[:-1]), shape[-1]
    std = matrix_std(name, cols)
    rows = max(1, (1 << 22) // cols)
    for begin in range(0, total, rows):
        x = rng.standard_normal((min(rows, total - begin), cols), dtype=np.float32)
        x *= np.float32(std)
        yield x


def make_tensor(seed, name, shape):
    return np.concatenate(list(tensor_chunks(seed, name, shape)), axis=0).reshape(shape)


# --------------------------------------------------------------------------------------
# bf16 safetensors, streamed (the 8B file does not fit in memory twice)
# --------------------------------------------------------------------------------------
def to_bf16(x):
    """float32 -> bf16 bits, round to nearest even (as torch does)."""
    u = x.view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def write_bf16_dir(cfg, seed, out_dir):
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tensors = hf_tensors(cfg)
    header, offset = {"__metadata__": {"format": "pt", "generator": "ckv make_random_model",
                                        "seed": str(seed)}}, 0
    for name, shape in tensors:
        n = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)  # data starts 8-byte aligned
    with open(tmp / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in tensors:
            for chunk in tensor_chunks(seed, name, shape):
                f.write(to_bf16(chunk).tobytes())
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)


# --------------------------------------------------------------------------------------
# GGUF
# --------------------------------------------------------------------------------------
def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, l, rest = hf.split(".", 3)
    sub = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
           "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
           "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
           "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
           "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
           "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
           "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
           "mlp.gate.weight": "ffn_gate_inp.weight", "mlp.experts.gate_proj": "ffn_gate_exps.weight",
           "mlp.experts.up_proj": "ffn_up_exps.weight", "mlp.experts.down_proj": "ffn_down_exps.weight"}
    return f"blk.{l}.{sub[rest]}"


def permute_qk(w, n_heads):
    """HF rows -> llama.cpp GGUF rows (convert_hf_to_gguf's LlamaModel.permute)."""
    shape = w.shape
    return (w.reshape(n_heads, 2, shape[0] // n_heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape))


def llama3_rope_factors(cfg, d_head):
    r, theta = cfg["rope_scaling"], cfg.get("rope_theta", 10000.0)
    old, lo, hi, fac = (r["original_max_position_embeddings"], r["low_freq_factor"],
                        r["high_freq_factor"], r["factor"])
    out = []
    for i in range(d_head // 2):
        wavelen = 2 * math.pi / theta ** (-2 * i / d_head)
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(fac)
        else:
            sm = (old / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - sm) / fac + sm))
    return np.array(out, dtype=np.float32)


def write_gguf(cfg, seed, path, fmt):
    import gguf
    T = gguf.GGMLQuantizationType
    s = dims(cfg)
    arch = {"qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3moe"}.get(cfg["model_type"], "llama")
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    w = gguf.GGUFWriter(str(tmp), arch)
    w.add_name(f"random {cfg['model_type']} seed {seed}")
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(s["d_model"])
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["d_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_kv"])
    w.add_key_length(s["d_head"])
    w.add_value_length(s["d_head"])
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-6))
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_rope_dimension_count(s["d_head"])
    w.add_vocab_size(s["vocab"])
    w.add_tokenizer_model("none")  # llama.cpp refuses a GGUF without the key
    if cfg.get("sliding_window") and arch == "llama":
        w.add_sliding_window(cfg["sliding_window"])
    if s["n_expert"]:
        w.add_expert_count(s["n_expert"])
        w.add_expert_used_count(s["top_k"])
        w.add_expert_feed_forward_length(s["d_ff_exp"])
    qtype = {"q4_k": T.Q4_K, "q4_k_codes": T.Q4_K, "q8_0": T.Q8_0, "f32": T.F32}[fmt]
    rope = cfg.get("rope_scaling") or {}
    plan = []  # (gguf name, HF name, shape, stored type)
    if rope.get("rope_type", rope.get("type")) == "llama3":
        plan.append(("rope_freqs.weight", None, (s["d_head"] // 2,), T.F32))
    for hf, shape in hf_tensors(cfg):
        # llama.cpp keeps the router unquantised (its quantiser skips ffn_gate_inp).
        router = hf.endswith("mlp.gate.weight")
        plan.append((gguf_name(hf), hf, shape, qtype if len(shape) >= 2 and not router else T.F32))
    def row_bytes(cols, t):
        return cols * 4 if t == T.F32 else gguf.quants.quant_shape_to_byte_shape((cols,), t)[-1]

    for name, hf, shape, t in plan:
        if t == T.F32:
            w.add_tensor_info(name, shape, np.dtype(np.float32), math.prod(shape) * 4)
        else:
            rb = row_bytes(shape[-1], t)
            w.add_tensor_info(name, (*shape[:-1], rb), np.dtype(np.uint8), math.prod(shape[:-1]) * rb, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, hf, shape, t in plan:
        if hf is None:
            w.write_tensor_data(llama3_rope_factors(cfg, s["d_head"]))
            continue
        if fmt == "q4_k_codes" and t == T.Q4_K:  # codes drawn directly, no float values
            rows_total, cols = math.prod(shape[:-1]), shape[-1]
            codes = q4_k_codes(tensor_rng(seed, hf), rows_total, cols, matrix_std(hf, cols))
            w.write_tensor_data(codes.reshape(*shape[:-1], -1))
            continue
        heads = None
        if arch == "llama" and (".q_proj." in hf or ".k_proj." in hf):
            heads = s["n_head"] if ".q_proj." in hf else s["n_kv"]
        if t == T.F32 or heads is not None:
            arr = make_tensor(seed, hf, shape)
            if heads is not None:
                arr = permute_qk(arr, heads)
            chunks = [arr]
        else:
            chunks = tensor_chunks(seed, hf, shape)
        if t == T.F32:
            w.write_tensor_data(np.ascontiguousarray(chunks[0], dtype=np.float32).reshape(shape))
            continue
        rows_total, cols = math.prod(shape[:-1]), shape[-1]
        out = np.empty((rows_total, row_bytes(cols, t)), dtype=np.uint8)
        begin = 0
        for chunk in chunks:  # quantised row chunk by row chunk: bounded memory
            for b in range(0, chunk.shape[0], max(1, (1 << 22) // cols)):
                part = chunk[b:b + max(1, (1 << 22) // cols)]
                if t == T.Q4_K:
                    q = quantize_q4_k(np.ascontiguousarray(part).reshape(-1)).reshape(part.shape[0], -1)
                else:
                    q = gguf.quants.quantize(np.ascontiguousarray(part), T.Q8_0)
                out[begin:begin + part.shape[0]] = q
                begin += part.shape[0]
        assert begin == rows_total
        w.write_tensor_data(out.reshape(*shape[:-1], -1))
        del out
    w.close()
    os.replace(tmp, path)


def requantize_q4_k_m(q8_path, path, threads):
    """llama.cpp's quantiser (llama-cpp-python's llama_model_quantize) from the Q8_0 file to
    its Q4_K_M mix, under a temporary name."""
    import llama_cpp
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.allow_requantize = True
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(str(q8_path).encode(), str(tmp).encode(), params)
    if rc != 0:
        sys.exit(f"make_random_model: llama_model_quantize returned {rc}")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="HF config.json")
    ap.add_argument("--format", choices=["bf16", "q4_k", "q4_k_codes", "q4_k_m", "q8_0", "f32"], help="what to write")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="q4_k_m: llama.cpp's quantiser threads")
    ap.add_argument("-o", "--output", help="GGUF file, or directory for bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="override a config field (e.g. num_hidden_layers=2)")
    ap.add_argument("--self-check", action="store_true", help="check the Q4_K/Q8_0 encoders and exit")
    a = ap.parse_args()
    if a.self_check:
        self_check()
        return
    if not (a.config and a.format and a.output):
        ap.error("--config, --format and -o are required")
    cfg = read_config(a.config, a.set)
    if a.format == "bf16":
        if cfg["model_type"] == "qwen3_moe":
            sys.exit("make_random_model: qwen3_moe is written as GGUF only")
        write_bf16_dir(cfg, a.seed, a.output)
    elif a.format == "q4_k_m":
        q8 = Path(a.output).with_name(Path(a.output).name + ".q8_0.gguf")
        write_gguf(cfg, a.seed, q8, "q8_0")
        requantize_q4_k_m(q8, a.output, a.threads)
        q8.unlink()
    else:
        write_gguf(cfg, a.seed, a.output, a.format)


if __name__ == "__main__":
    main()

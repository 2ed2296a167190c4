#!/usr/bin/env python3
"""Write the tiny random models under tests/data/models/ (seeded, deterministic).

HF directories (config.json + safetensors):
  tiny_llama_gqa/    llama, GQA 4/2, untied, default rope, f32, two shards + index
  tiny_llama3_rope/  llama, GQA 4/2, untied, rope_scaling llama3, f16
  tiny_qwen2_bias/   qwen2, GQA 4/2, nonzero q/k/v biases, tied, bf16,
                     config in the transformers-5 style (`rope_parameters`)
  tiny_llama_tied/   llama, n_kv_head == n_head, tied, explicit head_dim 8
                     (!= hidden/n_head), f32
  tiny_qwen3/        qwen3, GQA 4/2, head_dim 32 (!= hidden/n_head), q/k norms, tied, bf16
  tiny_phi3/         phi3, GQA 4/2, fused qkv_proj and gate_up_proj, LongRoPE (original
                     context 32, so the 66-token prompt takes the long factors) with
                     partial_rotary_factor 0.75 (12 of 16 dims), sliding_window 128, f16
  tiny_phi3_full_rotary/  phi3 with LongRoPE over all 16 dims, tied, f32 (the kvpress
                     golden's phi3: kvpress rotates over every dim)
  tiny_mistral_swa/  mistral (the llama graph), GQA 4/2, sliding_window 8 on every layer, f32
  tiny_qwen2_swa/   qwen2 with use_sliding_window, sliding_window 12 from layer
                     max_window_layers 1 on (layer 0 full), q/k/v biases, bf16
  tiny_gemma3/      gemma3_text, 3 layers (sliding, sliding, full: layer_types), window 10,
                     q/k norms, query_pre_attn_scalar 24 (!= head_dim 32), local rope base 100,
                     global 10000 with linear rope scaling 2, final logit soft-cap 10, tied, bf16
  tiny_gemma3_mm/   tiny_gemma3's weights as a Gemma3ForConditionalGeneration checkpoint
                     (text_config, model.language_model. names, a vision tensor)
  tiny_gemma3_kv/   gemma3_text, 4 layers (sliding, full, sliding, full), window 24, scale
                    1/sqrt(head_dim): kvpress's presses on Gemma 3 (make_kvpress_goldens.py)
  tiny_gemma3_6l/   gemma3_text, 6 layers (5 sliding, then a full one: the GGUF pattern),
                     window 8, query_pre_attn_scalar = head_dim 16, f32; also as GGUF
  tiny_qwen3moe/     qwen3_moe, 8 experts of width 32, 3 per token, norm_topk_prob, q/k norms,
                     head_dim 32, tied, bf16 (per-expert tensors, as hub checkpoints store them)
  tiny_qwen3moe_sparse/  qwen3_moe, 4 layers with decoder_sparse_step 2 and mlp_only_layers [3]
                     (experts in layer 1 only), 4 experts, 2 per token, no renormalisation, f16
  tiny_mixtral/      mixtral, 4 experts of width 64, 2 per token, untied, f32
GGUF files:
  tiny_qwen3.gguf, tiny_phi3.gguf  the same weights under llama.cpp's qwen3 / phi3 names
                         and metadata (phi3: attn_qkv, ffn_up holding gate and up,
                         rope_factors_short/long), matrices in F32, F16 and Q8_0 by tensor
  tiny_qwen3moe.gguf, tiny_mixtral.gguf  the same weights under llama.cpp's qwen3moe / llama
                         (mixtral: q/k permuted) names, experts stacked per projection
                         (ffn_{gate,up,down}_exps) and the router as ffn_gate_inp, F32/F16/Q8_0
  tiny_llama_quant.gguf  llama d_model 256, every supported ggml type on some tensor
  tiny_gemma3_6l.gguf    tiny_gemma3_6l/ under llama.cpp's gemma3 names and metadata (norm
                         weights stored as 1 + w, as convert_hf_to_gguf's Gemma3Model)
  tiny_llama3_rope.gguf  the exact weights of tiny_llama3_rope/ with llama3 rope
                         as `rope_freqs.weight` (transformers ignores that tensor,
                         so its reference is the golden of the safetensors model)

Weights are drawn with numpy from fixed seeds; larger-than-default gains make
attention peaked enough to test softmax. The HF configs use the hub style
(`rope_theta`, `rope_scaling`, `torch_dtype`) except qwen2 (see above).
"""
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

import gguf

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "data" / "models"

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}

# name -> hyperparameters. d_head = head_dim if given else d_model / n_head.
SPECS = {
    "tiny_llama_gqa": dict(arch="llama", vocab=256, d_model=64, n_layer=2, n_head=4,
                           n_kv_head=2, d_ff=128, theta=10000.0, eps=1e-5, tied=False,
                           dtype="float32", shards=2, seed=11),
    "tiny_llama3_rope": dict(arch="llama", vocab=384, d_model=64, n_layer=2, n_head=4,
                             n_kv_head=2, d_ff=128, theta=50.0, eps=1e-5, tied=False,
                             dtype="float16", rope_scaling=LLAMA3_ROPE, seed=12),
    "tiny_qwen2_bias": dict(arch="qwen2", vocab=320, d_model=64, n_layer=2, n_head=4,
                            n_kv_head=2, d_ff=128, theta=1000.0, eps=1e-6, tied=True,
                            dtype="bfloat16", seed=13),
    "tiny_llama_tied": dict(arch="llama", vocab=256, d_model=64, n_layer=2, n_head=4,
                            n_kv_head=4, head_dim=8, d_ff=128, theta=10000.0, eps=1e-5,
                            tied=True, dtype="float32", seed=14),
}
PHI3_ROPE = {"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
             "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 8.0]}
SPECS.update({
    "tiny_qwen3": dict(arch="qwen3", vocab=288, d_model=64, n_layer=2, n_head=4, n_kv_head=2,
                       head_dim=32, d_ff=128, theta=10000.0, eps=1e-6, tied=True,
                       dtype="bfloat16", seed=16),
    "tiny_phi3": dict(arch="phi3", vocab=320, d_model=64, n_layer=2, n_head=4, n_kv_head=2,
                      d_ff=128, theta=10000.0, eps=1e-5, tied=False, dtype="float16",
                      rope_scaling=PHI3_ROPE, partial_rotary=0.75, original_context=32,
                      sliding_window=128, seed=17),
    # kvpress's presses rotate over every head dim (and CriticalKV reads config.head_dim).
    "tiny_phi3_full_rotary": dict(arch="phi3", vocab=256, d_model=64, n_layer=2, n_head=4, head_dim=16,
                                  n_kv_head=2, d_ff=128, theta=10000.0, eps=1e-5, tied=True,
                                  dtype="float32", rope_scaling=dict(
                                      PHI3_ROPE, short_factor=[1.0, 1.1, 1.2, 1.4, 1.6, 1.8, 2.0, 2.5],
                                      long_factor=[1.0, 1.4, 2.0, 3.0, 4.0, 5.0, 6.5, 8.0]),
                                  partial_rotary=1.0, original_context=32, sliding_window=None,
                                  seed=18),
})
# Sliding-window attention (issue 27): windows shorter than the 21- and 66-token prompts.
WINDOW_SPECS = {
    "tiny_mistral_swa": dict(arch="mistral", vocab=256, d_model=64, n_layer=2, n_head=4, n_kv_head=2,
                             d_ff=128, theta=10000.0, eps=1e-5, tied=False, dtype="float32",
                             sliding_window=8, seed=21),
    "tiny_qwen2_swa": dict(arch="qwen2", vocab=320, d_model=64, n_layer=2, n_head=4, n_kv_head=2,
                           d_ff=128, theta=1000.0, eps=1e-6, tied=True, dtype="bfloat16",
                           sliding_window=12, max_window_layers=1, seed=22),
    "tiny_gemma3": dict(arch="gemma3", vocab=320, d_model=64, n_layer=3, n_head=4, n_kv_head=2,
                        head_dim=32, d_ff=128, theta=10000.0, local_theta=100.0, eps=1e-6, tied=True,
                        dtype="bfloat16", sliding_window=10, query_pre_attn_scalar=24,
                        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                        rope_scaling={"rope_type": "linear", "factor": 2.0}, softcap=10.0, seed=23),
    "tiny_gemma3_6l": dict(arch="gemma3", vocab=288, d_model=32, n_layer=6, n_head=2, n_kv_head=1,
                           head_dim=16, d_ff=64, theta=10000.0, local_theta=10000.0, eps=1e-6,
                           tied=True, dtype="float32", sliding_window=8, query_pre_attn_scalar=16,
                           layer_types=["sliding_attention"] * 5 + ["full_attention"],
                           rope_scaling=None, softcap=None, seed=24),
    # kvpress's presses on Gemma 3 (make_kvpress_goldens.py): the logit scale 1/sqrt(head_dim)
    # (query_pre_attn_scalar = head_dim, as Gemma 3 270M's), which ckv bound recomputes, and
    # two full-attention layers between sliding ones, window 24 shorter than the 60-token prompt.
    "tiny_gemma3_kv": dict(arch="gemma3", vocab=320, d_model=64, n_layer=4, n_head=4, n_kv_head=2,
                           head_dim=32, d_ff=128, theta=10000.0, local_theta=100.0, eps=1e-6, tied=True,
                           dtype="float32", sliding_window=24, query_pre_attn_scalar=32,
                           layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                        "full_attention"],
                           rope_scaling=None, softcap=None, seed=25),
}
# Mixtures of experts (moe: n_expert, top_k, d_ff_expert, norm_topk, and for qwen3_moe the
# dense layers' decoder_sparse_step / mlp_only_layers); the router gain spreads its logits
# so that no token's top-k sits on a near tie (make_forward_goldens.py checks the margin).
SPECS.update({
    "tiny_qwen3moe": dict(arch="qwen3_moe", vocab=288, d_model=64, n_layer=2, n_head=4, n_kv_head=2,
                          head_dim=32, d_ff=128, theta=10000.0, eps=1e-6, tied=True, dtype="bfloat16",
                          moe=dict(n_expert=8, top_k=3, d_ff_expert=32, norm_topk=True), seed=37),
    "tiny_qwen3moe_sparse": dict(arch="qwen3_moe", vocab=256, d_model=64, n_layer=4, n_head=4,
                                 n_kv_head=2, head_dim=16, d_ff=96, theta=10000.0, eps=1e-6, tied=False,
                                 dtype="float16", moe=dict(n_expert=4, top_k=2, d_ff_expert=32,
                                                           norm_topk=False, sparse_step=2,
                                                           mlp_only=[3]), seed=20),
    "tiny_mixtral": dict(arch="mixtral", vocab=272, d_model=64, n_layer=2, n_head=4, n_kv_head=2,
                         d_ff=64, theta=10000.0, eps=1e-5, tied=False, dtype="float32",
                         moe=dict(n_expert=4, top_k=2, d_ff_expert=64, norm_topk=True), seed=23),
})
MOE_GGUF = ("tiny_qwen3moe", "tiny_mixtral")  # the ones with a GGUF copy (llama.cpp's graphs
# have experts in every layer, so tiny_qwen3moe_sparse has none)
QUANT_SPEC = dict(arch="llama", vocab=272, d_model=256, n_layer=2, n_head=4, n_kv_head=2,
                  d_ff=256, theta=10000.0, eps=1e-5, tied=False, dtype="float32", seed=15)
T = gguf.GGMLQuantizationType
# The family GGUFs (tiny_qwen3.gguf, tiny_phi3.gguf): GGUF short name -> stored type; norms
# and rope factors F32. F32, F16 and Q8_0 on each kind of matrix in one layer or the other.
# GGUF tensor name -> stored type: every supported type at least once, K-quants and
# F16 on permuted Q/K rows. Norms are F32.
QUANT_TYPES = {
    "token_embd": T.Q4_1, "output": T.Q8_0,
    "blk.0.attn_q": T.Q4_K, "blk.0.attn_k": T.Q6_K, "blk.0.attn_v": T.F32,
    "blk.0.attn_output": T.Q4_1, "blk.0.ffn_gate": T.Q8_0, "blk.0.ffn_up": T.Q4_0,
    "blk.0.ffn_down": T.Q6_K,
    "blk.1.attn_q": T.Q8_0, "blk.1.attn_k": T.F16, "blk.1.attn_v": T.BF16,
    "blk.1.attn_output": T.Q6_K, "blk.1.ffn_gate": T.Q4_1, "blk.1.ffn_up": T.Q4_K,
    "blk.1.ffn_down": T.Q4_0,
}
FAMILY_GGUF_TYPES = {
    "token_embd": T.Q8_0, "output": T.F16,
    "blk.0.attn_q": T.Q8_0, "blk.0.attn_k": T.F16, "blk.0.attn_v": T.F32, "blk.0.attn_qkv": T.Q8_0,
    "blk.0.attn_output": T.F16, "blk.0.ffn_gate": T.F32, "blk.0.ffn_up": T.Q8_0,
    "blk.0.ffn_down": T.F16,
    "blk.1.attn_q": T.F16, "blk.1.attn_k": T.Q8_0, "blk.1.attn_v": T.Q8_0, "blk.1.attn_qkv": T.F16,
    "blk.1.attn_output": T.Q8_0, "blk.1.ffn_gate": T.Q8_0, "blk.1.ffn_up": T.F32,
    "blk.1.ffn_down": T.Q8_0,
}
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ST_DTYPE_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


def d_head(s):
    return s.get("head_dim", s["d_model"] // s["n_head"])


def hf_shapes(s):
    """HF parameter name -> (shape, kind) in the order HF checkpoints list them."""
    d, dh, ff = s["d_model"], d_head(s), s["d_ff"]
    q_out, kv_out = s["n_head"] * dh, s["n_kv_head"] * dh
    out = {"model.embed_tokens.weight": ((s["vocab"], d), "embed")}
    for l in range(s["n_layer"]):
        p = f"model.layers.{l}."
        out[p + "input_layernorm.weight"] = ((d,), "norm")
        if s["arch"] == "phi3":  # q, k, v rows in one matrix; q/k rows get the q/k gain
            out[p + "self_attn.qkv_proj.weight"] = ((q_out + 2 * kv_out, d), "qkv")
        else:
            out[p + "self_attn.q_proj.weight"] = ((q_out, d), "qk")
            out[p + "self_attn.k_proj.weight"] = ((kv_out, d), "qk")
            out[p + "self_attn.v_proj.weight"] = ((kv_out, d), "lin")
        if s["arch"] in ("qwen3", "qwen3_moe", "gemma3"):
            out[p + "self_attn.q_norm.weight"] = ((dh,), "qknorm")
            out[p + "self_attn.k_norm.weight"] = ((dh,), "qknorm")
        if s["arch"] == "qwen2":
            out[p + "self_attn.q_proj.bias"] = ((q_out,), "bias")
            out[p + "self_attn.k_proj.bias"] = ((kv_out,), "bias")
            out[p + "self_attn.v_proj.bias"] = ((kv_out,), "bias")
        out[p + "self_attn.o_proj.weight"] = ((d, q_out), "lin")
        out[p + "post_attention_layernorm.weight"] = ((d,), "norm")
        if s["arch"] == "gemma3":  # Gemma's four norms per layer
            out[p + "pre_feedforward_layernorm.weight"] = ((d,), "norm")
            out[p + "post_feedforward_layernorm.weight"] = ((d,), "norm")
        if moe_layer(s, l):
            out.update(moe_shapes(s, l))
            continue
        if s["arch"] == "phi3":  # gate rows, then up rows
            out[p + "mlp.gate_up_proj.weight"] = ((2 * ff, d), "lin")
        else:
            out[p + "mlp.gate_proj.weight"] = ((ff, d), "lin")
            out[p + "mlp.up_proj.weight"] = ((ff, d), "lin")
        out[p + "mlp.down_proj.weight"] = ((d, ff), "lin")
    out["model.norm.weight"] = ((d,), "norm")
    if not s["tied"]:
        out["lm_head.weight"] = ((s["vocab"], d), "lin")
    return out


def moe_layer(s, l):
    """HF Qwen3MoeDecoderLayer's rule (Mixtral: every layer)."""
    m = s.get("moe")
    return bool(m) and l not in m.get("mlp_only", []) and (l + 1) % m.get("sparse_step", 1) == 0


def moe_shapes(s, l):
    """The router and per-expert weights of layer l as hub checkpoints name them (transformers 5
    fuses them at load)."""
    m, d = s["moe"], s["d_model"]
    if s["arch"] == "mixtral":
        p, names = f"model.layers.{l}.block_sparse_moe.", ("w1", "w3", "w2")
    else:
        p, names = f"model.layers.{l}.mlp.", ("gate_proj", "up_proj", "down_proj")
    out = {p + "gate.weight": ((m["n_expert"], d), "router")}
    for e in range(m["n_expert"]):
        for n, shape in zip(names, ((m["d_ff_expert"], d), (m["d_ff_expert"], d), (d, m["d_ff_expert"]))):
            out[f"{p}experts.{e}.{n}.weight"] = (shape, "lin")
    return out


def random_weights(s):
    """f32 numpy weights, already rounded to the storage dtype."""
    rng = np.random.default_rng(s["seed"])
    w = {}
    for name, (shape, kind) in hf_shapes(s).items():
        # Gemma's norms multiply by 1 + w: the same gains, stored less one.
        shift = 1.0 if s["arch"] == "gemma3" else 0.0
        if kind == "norm":
            a = 1.0 - shift + 0.2 * rng.standard_normal(shape)
        elif kind == "qknorm":  # q/k of unit RMS times ~1.6: logits spread over a few units
            a = 1.6 - shift + 0.3 * rng.standard_normal(shape)
        elif kind == "bias":
            a = 0.5 * rng.standard_normal(shape)
        elif kind == "embed":
            a = (0.5 if s["tied"] else 1.0) * rng.standard_normal(shape)
        else:  # q/k get gain 1.5 so that attention logits spread over a few units
            gain = {"qk": 1.5, "router": 3.0}.get(kind, 1.0)
            a = gain / math.sqrt(shape[1]) * rng.standard_normal(shape)
            if kind == "qkv":  # the q and k rows of a fused projection
                qk_rows = (s["n_head"] + s["n_kv_head"]) * d_head(s)
                a[:qk_rows] *= 1.5
        t = torch.from_numpy(a.astype(np.float32)).to(TORCH_DTYPES[s["dtype"]])
        w[name] = t.to(torch.float32).numpy()
    return w


HF_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
              "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM",
              "mistral": "MistralForCausalLM", "gemma3": "Gemma3ForCausalLM",
              "qwen3_moe": "Qwen3MoeForCausalLM", "mixtral": "MixtralForCausalLM"}


def window_config(s):
    """config.json of a WINDOW_SPECS model, in the hub style of its family."""
    arch = s["arch"]
    c = {"architectures": [HF_CLASSES[arch]],
         "model_type": "gemma3_text" if arch == "gemma3" else arch, "vocab_size": s["vocab"],
         "hidden_size": s["d_model"], "intermediate_size": s["d_ff"],
         "num_hidden_layers": s["n_layer"], "num_attention_heads": s["n_head"],
         "num_key_value_heads": s["n_kv_head"], "max_position_embeddings": 256,
         "rms_norm_eps": s["eps"], "tie_word_embeddings": s["tied"], "bos_token_id": 1,
         "eos_token_id": 2, "attention_dropout": 0.0, "rope_theta": s["theta"],
         "sliding_window": s["sliding_window"], "torch_dtype": s["dtype"]}
    if "head_dim" in s:
        c["head_dim"] = s["head_dim"]
    if arch == "mistral":
        c.update(hidden_act="silu")
    elif arch == "qwen2":
        c.update(hidden_act="silu", use_sliding_window=True,
                 max_window_layers=s["max_window_layers"])
    else:  # gemma3
        c.update(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=s["query_pre_attn_scalar"],
                 rope_local_base_freq=s["local_theta"], rope_scaling=s["rope_scaling"],
                 layer_types=s["layer_types"], final_logit_softcapping=s["softcap"],
                 attn_logit_softcapping=None, attention_bias=False, pad_token_id=0)
    return c


def hf_config(s):
    arch = s["arch"]
    if arch in ("mistral", "gemma3") or "max_window_layers" in s:
        return window_config(s)
    c = {"architectures": [HF_CLASSES[arch]],
         "model_type": arch, "vocab_size": s["vocab"], "hidden_size": s["d_model"],
         "intermediate_size": s["d_ff"], "num_hidden_layers": s["n_layer"],
         "num_attention_heads": s["n_head"], "num_key_value_heads": s["n_kv_head"],
         "hidden_act": "silu", "max_position_embeddings": 256, "rms_norm_eps": s["eps"],
         "tie_word_embeddings": s["tied"], "bos_token_id": 1, "eos_token_id": 2,
         "attention_dropout": 0.0}
    if "head_dim" in s:
        c["head_dim"] = s["head_dim"]
    if arch == "llama":
        c.update(attention_bias=False, mlp_bias=False, rope_theta=s["theta"],
                 rope_scaling=s.get("rope_scaling"), torch_dtype=s["dtype"])
    elif arch == "qwen3":  # the transformers-5 spelling
        c.update(rope_parameters={"rope_type": "default", "rope_theta": s["theta"]},
                 attention_bias=False, use_sliding_window=False, sliding_window=None,
                 max_window_layers=s["n_layer"], dtype=s["dtype"])
    elif arch == "phi3":  # the hub spelling of Phi-3/Phi-4-mini (rope_scaling, top-level
        # partial_rotary_factor and original_max_position_embeddings)
        c.update(rope_theta=s["theta"], rope_scaling=s["rope_scaling"],
                 partial_rotary_factor=s["partial_rotary"],
                 original_max_position_embeddings=s["original_context"],
                 sliding_window=s["sliding_window"], resid_pdrop=0.0, embd_pdrop=0.0, pad_token_id=2,
                 torch_dtype=s["dtype"])
    elif arch in ("qwen3_moe", "mixtral"):
        c.update(moe_config(s))
    else:  # the transformers-5 spelling, as save_pretrained writes it today
        c.update(rope_parameters={"rope_type": "default", "rope_theta": s["theta"]},
                 use_sliding_window=False, sliding_window=None,
                 max_window_layers=s["n_layer"], dtype=s["dtype"])
    return c


def moe_config(s):
    """The hub spelling of Qwen3-30B-A3B's and Mixtral-8x7B's config.json."""
    m = s["moe"]
    c = dict(rope_theta=s["theta"], rope_scaling=None, sliding_window=None, num_experts_per_tok=m["top_k"],
             router_aux_loss_coef=0.001, output_router_logits=False, torch_dtype=s["dtype"])
    if s["arch"] == "mixtral":
        c.update(num_local_experts=m["n_expert"], router_jitter_noise=0.0)
    else:
        c.update(num_experts=m["n_expert"], moe_intermediate_size=m["d_ff_expert"],
                 norm_topk_prob=m["norm_topk"], decoder_sparse_step=m.get("sparse_step", 1),
                 mlp_only_layers=m.get("mlp_only", []), attention_bias=False, use_sliding_window=False,
                 max_window_layers=s["n_layer"])
    return c


def write_hf(name, s, w):
    out = MODELS / name
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.safetensors*"):
        old.unlink()
    (out / "config.json").write_text(json.dumps(hf_config(s), indent=2) + "\n")
    tensors = {k: torch.from_numpy(v).to(TORCH_DTYPES[s["dtype"]]).contiguous()
               for k, v in w.items()}
    meta = {"format": "pt"}
    n = s.get("shards", 1)
    if n == 1:
        save_file(tensors, str(out / "model.safetensors"), metadata=meta)
        return
    names = list(tensors)
    per = math.ceil(len(names) / n)
    weight_map, total = {}, 0
    for i in range(n):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        part = {k: tensors[k] for k in names[i * per:(i + 1) * per]}
        save_file(part, str(out / fname), metadata=meta)
        for k, t in part.items():
            weight_map[k] = fname
            total += t.numel() * ST_DTYPE_SIZE[s["dtype"]]
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


# ---------------------------------------------------------------- GGUF


def permute_qk(w, n_heads):
    """HF rows -> llama.cpp GGUF rows (convert_hf_to_gguf's LlamaModel.permute):
    GGUF row h*d_head + 2i + j holds HF row h*d_head + j*d_head/2 + i."""
    rows = w.shape[0]
    return (w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute_qk(w, n_heads):
    rows = w.shape[0]
    return (w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_name(hf):
    table = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
             "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf in table:
        return table[hf]
    parts = hf.split(".")
    l, rest = parts[2], ".".join(parts[3:])
    sub = {"input_layernorm.weight": "attn_norm.weight",
           "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
           "self_attn.v_proj.weight": "attn_v.weight",
           "self_attn.o_proj.weight": "attn_output.weight",
           "post_attention_layernorm.weight": "ffn_norm.weight",
           "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
           "mlp.down_proj.weight": "ffn_down.weight",
           "self_attn.q_norm.weight": "attn_q_norm.weight",
           "self_attn.k_norm.weight": "attn_k_norm.weight",
           "self_attn.qkv_proj.weight": "attn_qkv.weight",
           "mlp.gate_up_proj.weight": "ffn_up.weight"}  # llama.cpp's name for phi3's fused one
    return f"blk.{l}.{sub[rest]}"


GEMMA3_GGUF_NAMES = {"post_attention_layernorm.weight": "post_attention_norm.weight",
                     "pre_feedforward_layernorm.weight": "ffn_norm.weight",
                     "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}


def gemma3_gguf_name(hf):
    """llama.cpp's gemma3 names (its post_attention_layernorm is not llama's ffn_norm)."""
    parts = hf.split(".")
    if len(parts) > 3 and ".".join(parts[3:]) in GEMMA3_GGUF_NAMES:
        return f"blk.{parts[2]}.{GEMMA3_GGUF_NAMES['.'.join(parts[3:])]}"
    return gguf_name(hf)


def gemma3_gguf(name, s, w):
    """tiny_gemma3_6l.gguf: convert_hf_to_gguf's Gemma3Model layout (no q/k permutation, norm
    weights + 1, sliding_window key; llama.cpp fixes the pattern at 6 and the local base at
    10000), matrices typed by FAMILY_GGUF_TYPES."""
    path = MODELS / f"{name}.gguf"
    writer = gguf.GGUFWriter(str(path), "gemma3")
    gguf_header(writer, s, path.stem)
    writer.add_key_length(d_head(s))
    writer.add_value_length(d_head(s))
    writer.add_sliding_window(s["sliding_window"])
    for hname, arr in w.items():
        gname = gemma3_gguf_name(hname)
        if hname.endswith("norm.weight"):
            writer.add_tensor(gname, (arr + 1.0).astype(np.float32))
            continue
        qtype = FAMILY_GGUF_TYPES.get(gname.rsplit(".", 1)[0], T.F32)
        data = encode(arr, qtype)
        if qtype in (T.F32, T.F16):
            writer.add_tensor(gname, data)
        else:
            writer.add_tensor(gname, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def gemma3_multimodal(name, s, w):
    """tiny_gemma3_mm/: tiny_gemma3's exact weights in the layout transformers >= 4.52 saves a
    Gemma3ForConditionalGeneration (model_type gemma3, the text model's config as text_config,
    language-model tensors under model.language_model.), plus one vision-tower tensor that ckv
    must not read. (Not loadable by transformers: its vision config is a stub.)"""
    out = MODELS / "tiny_gemma3_mm"
    out.mkdir(parents=True, exist_ok=True)
    text = window_config(s)
    for key in ("architectures", "torch_dtype", "bos_token_id", "eos_token_id", "pad_token_id",
                "attention_dropout"):
        text.pop(key, None)
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
           "text_config": text, "vision_config": {"model_type": "siglip_vision_model"},
           "torch_dtype": s["dtype"]}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tensors = {("model.language_model." + k[len("model."):]): torch.from_numpy(v).to(TORCH_DTYPES[s["dtype"]])
               for k, v in w.items()}
    tensors["model.vision_tower.vision_model.post_layernorm.weight"] = torch.ones(8, dtype=TORCH_DTYPES[s["dtype"]])
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


def window_models():
    for name, s in WINDOW_SPECS.items():
        w = random_weights(s)
        write_hf(name, s, w)
        if name == "tiny_gemma3_6l":
            gemma3_gguf(name, s, w)
        if name == "tiny_gemma3":
            gemma3_multimodal(name, s, w)


def random_kquant(rng, qtype, rows, cols, std):
    """Random valid Q4_K / Q6_K blocks (gguf-py cannot quantise these) whose
    dequantised values have roughly standard deviation `std` and mean ~0."""
    nb = rows * cols // 256
    if qtype == T.Q4_K:  # f16 d, f16 dmin, u8 scales[12], u8 qs[128]
        blk = rng.integers(0, 256, size=(nb, 144), dtype=np.uint8)
        d = (std / 216.0 * rng.uniform(0.5, 1.5, nb)).astype(np.float16)
        dmin = (d.astype(np.float32) * 7.5 * rng.uniform(0.8, 1.2, nb)).astype(np.float16)
        blk[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
        blk[:, 2:4] = dmin.view(np.uint8).reshape(nb, 2)
    else:  # Q6_K: u8 ql[128], u8 qh[64], i8 scales[16], f16 d (last)
        blk = rng.integers(0, 256, size=(nb, 210), dtype=np.uint8)
        blk[:, 192:208] = rng.integers(-32, 33, size=(nb, 16)).astype(np.int8).view(np.uint8)
        d = (std / 350.0 * rng.uniform(0.5, 1.5, nb)).astype(np.float16)
        blk[:, 208:210] = d.view(np.uint8).reshape(nb, 2)
    return blk.reshape(rows, -1)


def encode(arr, qtype):
    """f32 array -> bytes as gguf-py stores them (F32/F16 keep their numpy dtype)."""
    if qtype == T.F32:
        return arr.astype(np.float32)
    if qtype == T.F16:
        return arr.astype(np.float16)
    return gguf.quants.quantize(arr.astype(np.float32), qtype)


# A few BPE merges so the vocabulary is a complete gpt2 tokenizer (llama.cpp and
# ckv refuse a gpt2 vocabulary without tokenizer.ggml.merges).
MERGES = [("Ġ", "t"), ("h", "e"), ("i", "n"), ("e", "r"), ("a", "n"), ("Ġ", "a"), ("o", "n"),
          ("r", "e"), ("Ġt", "he"), ("Ġ", "s"), ("e", "n"), ("a", "t"), ("o", "r"), ("e", "s"),
          ("Ġ", "w"), ("i", "s")]


def byte_vocab(w, vocab):
    """A minimal gpt2-style vocabulary: the 256 byte tokens (GPT-2 byte-to-unicode
    order by byte value), the MERGES results, then `<extra_i>` fillers."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_tok = {b: chr(c) for b, c in zip(bs, cs)}
    tokens = [byte_tok[b] for b in range(256)] + [a + b for a, b in MERGES]
    assert len(tokens) <= vocab
    tokens += [f"<extra_{i}>" for i in range(vocab - len(tokens))]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges([f"{a} {b}" for a, b in MERGES])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def gguf_header(w, s, name):
    w.add_name(name)
    w.add_context_length(256)  # max_position_embeddings of every tiny model
    w.add_embedding_length(s["d_model"])
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["d_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_kv_head"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_rope_freq_base(s["theta"])
    if s["arch"] != "phi3":  # phi3's is its rotary dims (family_gguf)
        w.add_rope_dimension_count(d_head(s))
    w.add_vocab_size(s["vocab"])
    byte_vocab(w, s["vocab"])


def llama3_rope_factors(s):
    """Per-frequency divisor of the angle, as llama.cpp's converter writes it in
    rope_freqs.weight (docs/MODELS.md, RoPE)."""
    r, dh = s["rope_scaling"], d_head(s)
    old, lo, hi, fac = (r["original_max_position_embeddings"], r["low_freq_factor"],
                        r["high_freq_factor"], r["factor"])
    out, regions = [], []
    for i in range(dh // 2):
        wavelen = 2 * math.pi / s["theta"] ** (-2 * i / dh)
        if wavelen < old / hi:
            region, f = "high", 1.0
        elif wavelen > old / lo:
            region, f = "low", fac
        else:
            sm = (old / wavelen - lo) / (hi - lo)
            region, f = "smooth", 1.0 / ((1 - sm) / fac + sm)
        out.append(f)
        regions.append(region)
    return np.array(out, dtype=np.float32), regions


def write_gguf(path, s, tensors):
    """tensors: list of (gguf name, stored array, ggml type or None for F32/F16)."""
    w = gguf.GGUFWriter(str(path), "llama")
    gguf_header(w, s, path.stem)
    for name, arr, qtype in tensors:
        if qtype in (None, T.F32, T.F16):
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def family_gguf(name, s, w):
    """The weights of an HF tiny model under llama.cpp's names and metadata for its arch
    (convert_hf_to_gguf's Qwen3Model / Phi3MiniModel: no q/k permutation; phi3 keeps the
    fused attn_qkv and ffn_up, and LongRoPE as rope_factors_short/long tensors with
    rope.scaling.attn_factor and original_context_length), matrices typed by
    FAMILY_GGUF_TYPES."""
    path = MODELS / f"{name}.gguf"
    writer = gguf.GGUFWriter(str(path), s["arch"])
    gguf_header(writer, s, path.stem)
    dh = d_head(s)
    if s["arch"] == "qwen3":
        writer.add_key_length(dh)
        writer.add_value_length(dh)
    tensors = []
    if s["arch"] == "phi3":
        r = s["rope_scaling"]
        scale = 256 / s["original_context"]
        writer.add_rope_dimension_count(int(dh * s["partial_rotary"]))
        writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(s["original_context"])))
        writer.add_rope_scaling_orig_ctx_len(s["original_context"])
        writer.add_sliding_window(s["sliding_window"])
        tensors += [("rope_factors_long.weight", np.array(r["long_factor"], np.float32), T.F32),
                    ("rope_factors_short.weight", np.array(r["short_factor"], np.float32), T.F32)]
    for hname, arr in w.items():
        gname = gguf_name(hname)
        qtype = FAMILY_GGUF_TYPES.get(gname.rsplit(".", 1)[0], T.F32) if arr.ndim == 2 else T.F32
        tensors.append((gname, encode(arr, qtype), qtype))
    for gname, data, qtype in tensors:
        if qtype in (T.F32, T.F16):
            writer.add_tensor(gname, data)
        else:
            writer.add_tensor(gname, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# The MoE GGUFs: stored type by GGUF tensor name (without ".weight"); every expert kind and
# the router in F32, F16 and Q8_0 across the two layers, the rest as FAMILY_GGUF_TYPES.
MOE_GGUF_TYPES = dict(FAMILY_GGUF_TYPES, **{
    "blk.0.ffn_gate_inp": T.F32, "blk.0.ffn_gate_exps": T.Q8_0, "blk.0.ffn_up_exps": T.F16,
    "blk.0.ffn_down_exps": T.F32,
    "blk.1.ffn_gate_inp": T.Q8_0, "blk.1.ffn_gate_exps": T.F32, "blk.1.ffn_up_exps": T.Q8_0,
    "blk.1.ffn_down_exps": T.F16,
})
MOE_GGUF_ARCH = {"qwen3_moe": "qwen3moe", "mixtral": "llama"}
EXPERT_PROJ = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps",
               "w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps"}


def moe_to_gguf(s, w):
    """HF weights -> llama.cpp's tensors of the MoE model: the router as ffn_gate_inp, each
    layer's experts stacked per projection ([n_expert, rows, cols]), mixtral's q/k rows
    permuted as for llama (convert_hf_to_gguf's MixtralModel / Qwen3MoeModel)."""
    out, stacks = {}, {}
    for hname, arr in w.items():
        parts = hname.split(".")
        if "experts" in parts:  # model.layers.L.<block>.experts.E.<proj>.weight
            l, e, proj = int(parts[2]), int(parts[5]), parts[6]
            stacks.setdefault(f"blk.{l}.{EXPERT_PROJ[proj]}.weight", {})[e] = arr
            continue
        if parts[-2] == "gate" and parts[-3] in ("mlp", "block_sparse_moe"):
            out[f"blk.{parts[2]}.ffn_gate_inp.weight"] = arr
            continue
        gname = gguf_name(hname)
        heads = {"attn_q": s["n_head"], "attn_k": s["n_kv_head"]}.get(gname.split(".")[-2])
        out[gname] = permute_qk(arr, heads) if heads and s["arch"] == "mixtral" else arr
    for gname, by_expert in stacks.items():
        out[gname] = np.stack([by_expert[e] for e in range(len(by_expert))])
    return out


def moe_from_gguf(s, hf_names, tensors):
    """The inverse of moe_to_gguf on (dequantised) GGUF tensors: HF name -> array, for the
    HF names of the model (hf_names)."""
    out = {}
    for hname in hf_names:
        parts = hname.split(".")
        if "experts" in parts:
            l, e, proj = int(parts[2]), int(parts[5]), parts[6]
            out[hname] = tensors[f"blk.{l}.{EXPERT_PROJ[proj]}.weight"][e]
        elif parts[-2] == "gate" and parts[-3] in ("mlp", "block_sparse_moe"):
            out[hname] = tensors[f"blk.{parts[2]}.ffn_gate_inp.weight"]
        elif gguf_name(hname) in tensors:
            gname = gguf_name(hname)
            heads = {"attn_q": s["n_head"], "attn_k": s["n_kv_head"]}.get(gname.split(".")[-2])
            arr = tensors[gname]
            out[hname] = unpermute_qk(arr, heads) if heads and s["arch"] == "mixtral" else arr
    return out


def moe_gguf(name, s, w):
    """tests/data/models/<name>.gguf: the MoE model under llama.cpp's arch, names and
    metadata (expert_count, expert_used_count; qwen3moe also expert_feed_forward_length and
    key/value lengths), matrices typed by MOE_GGUF_TYPES."""
    path = MODELS / f"{name}.gguf"
    m = s["moe"]
    writer = gguf.GGUFWriter(str(path), MOE_GGUF_ARCH[s["arch"]])
    gguf_header(writer, s, path.stem)
    writer.add_expert_count(m["n_expert"])
    writer.add_expert_used_count(m["top_k"])
    if s["arch"] == "qwen3_moe":
        writer.add_key_length(d_head(s))
        writer.add_value_length(d_head(s))
        writer.add_expert_feed_forward_length(m["d_ff_expert"])
    for gname, arr in moe_to_gguf(s, w).items():
        qtype = MOE_GGUF_TYPES.get(gname.rsplit(".", 1)[0], T.F32) if arr.ndim >= 2 else T.F32
        data = encode(arr, qtype)
        if qtype in (T.F32, T.F16):
            writer.add_tensor(gname, data)
        else:
            writer.add_tensor(gname, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def quant_model():
    s = QUANT_SPEC
    rng = np.random.default_rng(s["seed"])
    hf = random_weights(s)
    out = []
    for hname, arr in hf.items():
        name = gguf_name(hname)
        base = name.rsplit(".", 1)[0]
        qtype = QUANT_TYPES.get(base, T.F32)
        heads = {"attn_q": s["n_head"], "attn_k": s["n_kv_head"]}.get(base.split(".")[-1])
        if qtype in (T.Q4_K, T.Q6_K):
            gain = 1.5 if heads else 1.0
            data = random_kquant(rng, qtype, arr.shape[0], arr.shape[1],
                                 gain / math.sqrt(arr.shape[1]))
        else:
            data = encode(permute_qk(arr, heads) if heads else arr, qtype)
        out.append((name, data, qtype))
    write_gguf(MODELS / "tiny_llama_quant.gguf", s, out)


def rope_gguf(w):
    s = SPECS["tiny_llama3_rope"]
    factors, regions = llama3_rope_factors(s)
    counts = {r: regions.count(r) for r in ("high", "smooth", "low")}
    assert all(counts.values()), f"llama3 rope must hit every region, got {counts}"
    print(f"tiny_llama3_rope: rope regions per frequency {regions}")
    out = [("rope_freqs.weight", factors, T.F32)]
    for hname, arr in w.items():
        base = gguf_name(hname).rsplit(".", 1)[0].split(".")[-1]
        heads = {"attn_q": s["n_head"], "attn_k": s["n_kv_head"]}.get(base)
        if arr.ndim == 2:
            out.append((gguf_name(hname), encode(permute_qk(arr, heads) if heads else arr,
                                                 T.F16), T.F16))
        else:
            out.append((gguf_name(hname), arr.astype(np.float32), T.F32))
    write_gguf(MODELS / "tiny_llama3_rope.gguf", s, out)


def main():
    MODELS.mkdir(parents=True, exist_ok=True)
    if sys.argv[1:] == ["--window-only"]:  # the sliding-window and Gemma 3 models alone
        window_models()
        return
    if sys.argv[1:2] == ["--only"]:  # one WINDOW_SPECS model, the others untouched
        for name in sys.argv[2:]:
            write_hf(name, WINDOW_SPECS[name], random_weights(WINDOW_SPECS[name]))
        return
    for name, s in SPECS.items():
        w = random_weights(s)
        write_hf(name, s, w)
        if name == "tiny_llama3_rope":
            rope_gguf(w)
        if s["arch"] in ("qwen3", "phi3") and name != "tiny_phi3_full_rotary":
            family_gguf(name, s, w)
        if name in MOE_GGUF:
            moe_gguf(name, s, w)
    quant_model()
    window_models()
    for p in sorted(MODELS.rglob("*")):
        if p.is_file():
            print(f"{p.relative_to(ROOT)}  {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()

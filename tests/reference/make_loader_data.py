#!/usr/bin/env python3
"""Reference files for the loader tests (tests/test_safetensors.cpp, test_gguf.cpp,
test_model_loader.cpp), all under tests/data/loaders/ (format_version 1):

- roundtrip.safetensors + roundtrip.expected.json: tensors of each dtype written by the
  safetensors package, with their float32 bit patterns as torch converts them.
- tiny_llama/ (HF save_pretrained: config.json with llama3 rope, model.safetensors, GQA,
  attention_bias, untied) and tiny_llama.gguf: the same weights written with gguf-py, Q/K
  rows permuted as llama.cpp's converter does, plus rope_freqs.weight.
- tiny_qwen2/ (bf16, sharded with model.safetensors.index.json, tied, q/k/v bias) and
  tiny_qwen2.gguf (qwen2: no permutation, no output.weight).
- bad_arch.gguf (architecture 'gpt2') and unsupported_type.gguf (an IQ4_XS tensor).
- default_model_expected.json: what the gguf package reads from the default model's
  header, and slices of layer-0/last-layer q_proj/k_proj as transformers' GGUF loader
  dequantises and un-permutes them (skipped when the model file is absent).
"""
import json
import math
import os
import shutil
from importlib import metadata

import numpy as np
import torch
import gguf
from safetensors.torch import save_file

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "loaders")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
FORMAT_VERSION = 1
GENERATOR = "tests/reference/make_loader_data.py"


def f32_bits(t):
    return t.detach().to(torch.float32).contiguous().view(torch.int32).flatten().tolist()


def roundtrip():
    torch.manual_seed(1)
    tensors = {
        "a.f32": torch.randn(3, 5, dtype=torch.float32),
        "b.f16": torch.randn(4, 2, 3).to(torch.float16),
        "c.bf16": torch.randn(7).to(torch.bfloat16),
        "d.scalar": torch.tensor(2.5, dtype=torch.float32),
        "e.empty": torch.zeros(0, 4, dtype=torch.float16),
    }
    meta = {"format": "pt", "note": "ckv round trip"}
    save_file(tensors, os.path.join(OUT, "roundtrip.safetensors"), metadata=meta)
    expected = {"format_version": FORMAT_VERSION, "generator": GENERATOR,
                "safetensors_version": metadata.version("safetensors"), "metadata": meta,
                "tensors": {n: {"dtype": str(t.dtype).replace("torch.", ""),
                                "shape": list(t.shape), "f32_bits": f32_bits(t)}
                            for n, t in tensors.items()}}
    with open(os.path.join(OUT, "roundtrip.expected.json"), "w") as f:
        json.dump(expected, f)


def llama_cpp_permute(w, n_head):
    """llama.cpp convert_hf_to_gguf's LlamaModel.permute for q (n_head) and k (n_kv_head):
    each head's rows [first half, second half] become interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def check_permutation_against_transformers(w, n_head):
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor
    back = LlamaTensorProcessor(config={})._reverse_permute_weights(llama_cpp_permute(w, n_head), n_head, n_head)
    assert np.array_equal(back, w), "permutation is not the inverse of transformers' reverse permute"


def llama3_rope_factors(cfg):
    """The divisors llama.cpp's converter stores in rope_freqs.weight (docs/MODELS.md RoPE)."""
    rp = cfg.rope_parameters
    base, dim = rp["rope_theta"], cfg.head_dim
    factor, low, high = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    old = rp["original_max_position_embeddings"]
    out = []
    for i in range(0, dim, 2):
        freq = 1.0 / (base ** (i / dim))
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def randomise(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)


HF_TO_GGUF = {
    "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf):
    if hf in HF_TO_GGUF:
        return HF_TO_GGUF[hf]
    parts = hf.split(".")  # model.layers.N.rest
    return f"blk.{parts[2]}." + HF_TO_GGUF[".".join(parts[3:])]


def write_gguf(path, arch, cfg, state, permute, extra=()):
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(cfg.vocab_size)
    for name, t in state.items():
        a = t.detach().to(torch.float32).numpy()
        if permute and (".q_proj." in name or ".k_proj." in name):
            heads = cfg.num_attention_heads if ".q_proj." in name else cfg.num_key_value_heads
            check_permutation_against_transformers(a, heads)
            a = llama_cpp_permute(a, heads)
        w.add_tensor(gguf_name(name), np.ascontiguousarray(a))
    for name, a in extra:
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, intermediate_size=32, vocab_size=32,
                      max_position_embeddings=256, rms_norm_eps=1e-5,
                      tie_word_embeddings=False,
                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                       "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 64})
    model = LlamaForCausalLM(cfg)
    randomise(model, 2)
    d = os.path.join(OUT, "tiny_llama")
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    state = model.state_dict()
    rope = llama3_rope_factors(cfg)
    # HF llama's attention_bias also biases o_proj; llama.cpp's biases are separate tensors.
    # The GGUF gets q/k/v biases (permuted like their weights) and the HF-layout biases go to
    # tiny_llama_biases.safetensors for comparison.
    rng = np.random.default_rng(4)
    biases, extra = {}, [("rope_freqs.weight", rope)]
    for layer in range(cfg.num_hidden_layers):
        for proj, heads in (("q", cfg.num_attention_heads), ("k", cfg.num_key_value_heads),
                            ("v", cfg.num_key_value_heads)):
            b = rng.standard_normal(heads * cfg.head_dim).astype(np.float32)
            biases[f"model.layers.{layer}.self_attn.{proj}_proj.bias"] = torch.from_numpy(b)
            if proj != "v":
                check_permutation_against_transformers(b, heads)
                b = llama_cpp_permute(b, heads)
            extra.append((f"blk.{layer}.attn_{proj}.bias", np.ascontiguousarray(b)))
    save_file(biases, os.path.join(OUT, "tiny_llama_biases.safetensors"))
    write_gguf(os.path.join(OUT, "tiny_llama.gguf"), "llama", cfg, state, permute=True,
               extra=extra)
    return {"rope_freqs": rope.tolist()}


def tiny_qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=1, intermediate_size=32, vocab_size=32,
                      max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    randomise(model, 3)
    d = os.path.join(OUT, "tiny_qwen2")
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, max_shard_size="20KB")
    assert os.path.exists(os.path.join(d, "model.safetensors.index.json")), "expected shards"
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    write_gguf(os.path.join(OUT, "tiny_qwen2.gguf"), "qwen2", cfg, state, permute=False)


def bad_files():
    w = gguf.GGUFWriter(os.path.join(OUT, "bad_arch.gguf"), "gpt2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()

    w = gguf.GGUFWriter(os.path.join(OUT, "unsupported_type.gguf"), "llama")
    w.add_tensor("blk.0.attn_q.weight", np.zeros((1, 136), dtype=np.uint8),
                 raw_shape=(1, 136), raw_dtype=gguf.GGMLQuantizationType.IQ4_XS)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def default_model():
    if not os.path.exists(MODEL):
        print("default model absent: default_model_expected.json not regenerated")
        return
    r = gguf.GGUFReader(MODEL)
    arch = r.fields["general.architecture"].contents()
    def val(key):
        f = r.fields.get(key)
        return None if f is None else f.contents()
    counts = {}
    for t in r.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    expected = {
        "format_version": FORMAT_VERSION, "generator": GENERATOR,
        "gguf_version": metadata.version("gguf"),
        "file": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
        "architecture": arch,
        "n_layer": val(f"{arch}.block_count"), "d_model": val(f"{arch}.embedding_length"),
        "d_ff": val(f"{arch}.feed_forward_length"), "context_length": val(f"{arch}.context_length"),
        "n_head": val(f"{arch}.attention.head_count"),
        "n_kv_head": val(f"{arch}.attention.head_count_kv"),
        "rms_eps": val(f"{arch}.attention.layer_norm_rms_epsilon"),
        "rope_theta": val(f"{arch}.rope.freq_base"), "vocab": val(f"{arch}.vocab_size"),
        "tied_embeddings": not any(t.name == "output.weight" for t in r.tensors),
        "tensor_count": len(r.tensors), "dtype_counts": counts,
        "token_count": len(r.fields["tokenizer.ggml.tokens"].data),
        "tokenizer_model": val("tokenizer.ggml.model"),
    }
    expected["d_head"] = expected["d_model"] // expected["n_head"]
    # transformers dequantises (gguf.quants) and reverses llama.cpp's Q/K permutation.
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(MODEL),
                                                 gguf_file=os.path.basename(MODEL),
                                                 dtype=torch.float32)
    sd = model.state_dict()
    last = expected["n_layer"] - 1
    cols = [0, 1, 300]
    slices = {}
    for layer in (0, last):
        for proj in ("q_proj", "k_proj"):
            w = sd[f"model.layers.{layer}.self_attn.{proj}.weight"]
            slices[f"{layer}.{proj}"] = {"columns": cols, "f32_bits": f32_bits(w[:, cols])}
    expected["transformers_version"] = metadata.version("transformers")
    expected["hf_slices"] = slices
    with open(os.path.join(OUT, "default_model_expected.json"), "w") as f:
        json.dump(expected, f)


def main():
    os.makedirs(OUT, exist_ok=True)
    roundtrip()
    extra = tiny_llama()
    tiny_qwen2()
    bad_files()
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump({"format_version": FORMAT_VERSION, "generator": GENERATOR,
                   "torch_version": torch.__version__,
                   "transformers_version": metadata.version("transformers"),
                   "gguf_version": metadata.version("gguf"),
                   "tiny_llama_rope_freqs": extra["rope_freqs"]}, f, indent=1)
    default_model()


if __name__ == "__main__":
    main()

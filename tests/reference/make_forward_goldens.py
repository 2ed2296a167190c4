#!/usr/bin/env python3
"""Run HF transformers (float32, eager attention) on the tiny models and on the
default model and write tests/data/golden/*.h5 in the layout of README.md.

Capture points (all from transformers itself, never from ckv):
  q, k, v   the arguments of `eager_attention_forward` (q/k post-RoPE, k/v before
            repeat_kv), wrapped in the modeling module; attn is its softmax output.
  head_out  forward pre-hook on o_proj: its input split per head times the matching
            column slice of o_proj.weight (no bias).
  resid     forward hook on each decoder layer (its output residual stream).
The family GGUFs (tiny_qwen3.gguf, tiny_phi3.gguf) are run by HF on the model of their HF
directory with every weight replaced by gguf-py's dequantisation of the GGUF tensor (names
mapped back by make_tiny_models.gguf_name); transformers' own GGUF loader is not used there
because it ignores qwen3's attention.key_length and phi3's rope factor tensors. The MoE GGUFs
(tiny_qwen3moe.gguf, tiny_mixtral.gguf) the same way, their stacked experts unstacked by
make_tiny_models.moe_from_gguf into a temporary hub-style checkpoint.
Usage: make_forward_goldens.py [--only NAME ...] [--skip-default]
"""
import argparse
import sys
from pathlib import Path

import h5py
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.mixtral import modeling_mixtral
from transformers.models.phi3 import modeling_phi3
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3
from transformers.models.qwen3_moe import modeling_qwen3_moe


sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import (MODELS, MOE_GGUF, QUANT_SPEC, ROOT, SPECS, WINDOW_SPECS, d_head,  # noqa: E402
                              gemma3_gguf_name, gguf_name, moe_from_gguf)

GOLDEN = ROOT / "tests" / "data" / "golden"
DEFAULT_GGUF = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
FORMAT_VERSION = 1
DEFAULT_PROMPTS = [
    "The capital of France is",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "def add(a, b):\n    return a + b  # 42 ✓",
]
DEFAULT_FULL_LAYERS = (0, 1, 15, 29)


class Capture:
    """Records per-layer tensors of one forward pass of batch size 1."""

    def __init__(self, model):
        self.model = model
        self.layers = {}
        self.handles = []
        inner = model.model
        for l, layer in enumerate(inner.layers):
            attn = layer.self_attn
            self.handles.append(attn.o_proj.register_forward_pre_hook(self._o_hook(l)))
            self.handles.append(layer.register_forward_hook(self._resid_hook(l)))
        self.originals = {m: m.eager_attention_forward
                          for m in (modeling_llama, modeling_qwen2, modeling_qwen3, modeling_phi3,
                                    modeling_mistral, modeling_gemma3, modeling_qwen3_moe, modeling_mixtral)}
        for mod, orig in self.originals.items():
            mod.eager_attention_forward = self._wrap(orig)

    def rec(self, l):
        return self.layers.setdefault(l, {})

    def _wrap(self, orig):
        def eager(module, query, key, value, attention_mask, *args, **kw):
            # (gemma3's takes dropout before scaling: the arguments pass through as given)
            out, weights = orig(module, query, key, value, attention_mask, *args, **kw)
            r = self.rec(module.layer_idx)
            r["q"] = query[0].detach().clone()   # [n_head, seq, d_head]
            r["k"] = key[0].detach().clone()     # [n_kv_head, seq, d_head]
            r["v"] = value[0].detach().clone()   # [n_kv_head, seq, d_head]
            r["attn"] = weights[0].detach().clone()  # [n_head, seq, seq]
            return out, weights
        return eager

    def _o_hook(self, l):
        def hook(mod, args):
            self.rec(l)["o_in"] = args[0][0].detach().clone()  # [seq, n_head*d_head]
        return hook

    def _resid_hook(self, l):
        def hook(mod, args, out):
            h = out[0] if isinstance(out, tuple) else out
            self.rec(l)["resid"] = h[0].detach().clone()  # [seq, d_model]
        return hook

    def close(self):
        for h in self.handles:
            h.remove()
        for mod, orig in self.originals.items():
            mod.eager_attention_forward = orig

    def run(self, ids):
        self.layers = {}
        with torch.no_grad():
            out = self.model(torch.tensor([ids]), use_cache=False, output_attentions=True)
        n = len(self.model.model.layers)
        assert sorted(self.layers) == list(range(n)), "eager attention was not captured"
        for l, a in enumerate(out.attentions):  # the wrapper saw what HF returns
            assert torch.equal(a[0], self.layers[l]["attn"])
        return self.layers, out.logits[0].detach()  # logits [seq, vocab]


def head_out(o_in, o_weight, rows, n_head):
    """[n_head, r, d_model]: head h's attention output times its o_proj slice."""
    dh = o_in.shape[1] // n_head
    return torch.stack([o_in[rows, h * dh:(h + 1) * dh] @ o_weight[:, h * dh:(h + 1) * dh].T
                        for h in range(n_head)])


def load(path, gguf_file=None, dtype=torch.float32, **extra):
    kw = dict(dtype=dtype, attn_implementation="eager", **extra)
    if gguf_file:
        kw["gguf_file"] = gguf_file
    m = AutoModelForCausalLM.from_pretrained(str(path), **kw)
    return m.eval()


def load_gguf_weights(path, gguf_path, dtype=torch.float32):
    """The HF model of directory `path` with its weights replaced by gguf-py's dequantised
    tensors of `gguf_path` (every HF weight must be found there)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    m = load(path, dtype=dtype)
    gemma = m.config.model_type == "gemma3_text"
    by_gguf = {(gemma3_gguf_name if gemma else gguf_name)(k): k for k in m.state_dict()}
    state = {}
    for t in GGUFReader(str(gguf_path)).tensors:
        if t.name.startswith("rope_factors"):
            continue
        arr = dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
        if gemma and t.name.endswith("norm.weight"):  # GGUF stores Gemma's 1 + w
            arr = arr - np.float32(1.0)
        state[by_gguf[t.name]] = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).to(dtype)
    missing = set(m.state_dict()) - set(state)
    if m.config.tie_word_embeddings:
        missing.discard("lm_head.weight")
    assert not missing, f"{gguf_path}: no GGUF tensor for {sorted(missing)}"
    m.load_state_dict(state, strict=False)
    if m.config.tie_word_embeddings:
        m.tie_weights()
    assert torch.equal(m.model.embed_tokens.weight, state["model.embed_tokens.weight"])
    return m.eval()


# MoE models run transformers' own per-expert loop (the modeling file's Experts.forward): its
# default grouped_mm has no float64.
MOE_EAGER = dict(experts_implementation="eager")


def load_moe_gguf_weights(path, gguf_path, spec, dtype=torch.float32):
    """The HF model of directory `path` with its weights replaced by gguf-py's dequantised
    tensors of the MoE GGUF `gguf_path`, unstacked into hub-style per-expert tensors
    (make_tiny_models.moe_from_gguf) in a temporary checkpoint that transformers loads as it
    loads the committed one (transformers 5 fuses experts at load)."""
    import json
    import tempfile
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        hf_names = list(f.keys())
    tensors = {t.name: dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)])
               for t in GGUFReader(str(gguf_path)).tensors}
    state = moe_from_gguf(spec, hf_names, tensors)
    assert sorted(state) == sorted(hf_names), f"{gguf_path}: no GGUF tensor for {set(hf_names) - set(state)}"
    with tempfile.TemporaryDirectory() as tmp:
        config = json.loads((path / "config.json").read_text())
        config["torch_dtype"] = "float32"
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        save_file({k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in state.items()},
                  str(Path(tmp) / "model.safetensors"), metadata={"format": "pt"})
        return load(Path(tmp), dtype=dtype, **MOE_EAGER)


def routing_margin(model, prompts):
    """The smallest gap, over every token of every expert layer, between the k-th and the
    (k+1)-th largest router logit (float64, from each router's input and weight): a golden
    whose top-k sits on a near tie would test rounding, not routing."""
    top_k = model.config.num_experts_per_tok
    n_expert = getattr(model.config, "num_experts", None) or model.config.num_local_experts
    seen, handles = [], []
    for layer in model.model.layers:
        for name, mod in layer.named_modules():
            w = getattr(mod, "weight", None)
            if name.endswith("gate") and isinstance(w, torch.Tensor) and w.shape == (n_expert, model.config.hidden_size):
                handles.append(mod.register_forward_pre_hook(lambda m, args: seen.append(
                    (args[0].detach().reshape(-1, args[0].shape[-1]).double(), m.weight.detach().double()))))
    assert handles, "no router found"
    with torch.no_grad():
        for _, ids, _ in prompts:
            model(torch.tensor([ids]), use_cache=False)
    for h in handles:
        h.remove()
    worst = 1.0
    for x, w in seen:
        z = (x @ w.T).sort(dim=-1, descending=True).values
        worst = min(worst, float((z[:, top_k - 1] - z[:, top_k]).min()))
    return worst


def set_attrs(obj, attrs):
    """Strings as variable-length UTF-8, integers as int64, arrays as given."""
    for k, v in attrs.items():
        if isinstance(v, str):
            obj.attrs.create(k, v, dtype=h5py.string_dtype("utf-8"))
        elif isinstance(v, (bool, int)):
            obj.attrs[k] = np.int64(v)
        else:
            obj.attrs[k] = v


def ds(g, name, arr):
    # Contiguous, uncompressed: gzip (+shuffle) saved under 1% on these random
    # floats, and the C++ reader then needs no filters.
    g.create_dataset(name, data=np.ascontiguousarray(arr))


def f32(t):
    return t.to(torch.float32).numpy()


def write_golden(path, model, model_attr, prompts, full_layers=None, attn_rows=None,
                 logits_rows=None, extra_attrs=None):
    """prompts: list of (text, ids). full_layers None = all layers full.
    attn_rows / logits_rows: callables seq -> list of rows (None = all)."""
    cfg = model.config
    n_head = cfg.num_attention_heads
    cap = Capture(model)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    # v108 object headers (compact groups: a third smaller), readable by HDF5 >= 1.8.
    with h5py.File(path, "w", libver=("v108", "v110")) as f:
        set_attrs(f, dict(format_version=FORMAT_VERSION,
                       generator="tests/reference/make_forward_goldens.py",
                       transformers_version=transformers.__version__,
                       torch_version=torch.__version__, gguf_version=_gguf_version(),
                       model=model_attr, dtype="float32", arch=cfg.model_type,
                       n_layer=cfg.num_hidden_layers, n_head=n_head,
                       n_kv_head=cfg.num_key_value_heads,
                       d_head=getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head,
                       d_model=cfg.hidden_size, d_ff=cfg.intermediate_size,
                       vocab=cfg.vocab_size))
        set_attrs(f, extra_attrs or {})
        for i, (text, ids, pattrs) in enumerate(prompts):
            layers, logits = cap.run(ids)
            seq = len(ids)
            g = f.create_group(f"prompts/{i}")
            set_attrs(g, dict(text=text, **pattrs))
            g.create_dataset("tokens", data=np.array(ids, dtype=np.int32))
            rows = attn_rows(seq) if attn_rows else list(range(seq))
            lrows = logits_rows(seq) if logits_rows else list(range(seq))
            for l, r in layers.items():
                lg = g.create_group(f"layers/{l}")
                if full_layers is None or l in full_layers:
                    for key in ("q", "k", "v"):
                        ds(lg, key, f32(r[key]))
                    lg.create_dataset("attn_rows", data=np.array(rows, dtype=np.int32))
                    ds(lg, "attn", f32(r["attn"][:, rows, :]))
                    ow = model.model.layers[l].self_attn.o_proj.weight.detach()
                    ds(lg, "head_out", f32(head_out(r["o_in"], ow, rows, n_head)))
                    ds(lg, "resid", f32(r["resid"]))
                else:
                    for key in ("q", "k", "v"):
                        ds(lg, key + "_norm", f32(r[key].norm(dim=-1)))
                    ds(lg, "resid_norm", f32(r["resid"].norm(dim=-1)))
            g.create_dataset("logits_rows", data=np.array(lrows, dtype=np.int32))
            ds(g, "logits", f32(logits[lrows]))
    cap.close()
    print(f"wrote {path.relative_to(ROOT)}  {path.stat().st_size} bytes")


def _gguf_version():
    from importlib.metadata import version
    return version("gguf")


def compare_f64(model_f32, model_f64, prompts):
    """How far float32 HF is from float64 HF, in units of the test tolerances
    (issue 2): must be far below 1 or the goldens could not be met by any f32 code."""
    worst = {}
    c32 = Capture(model_f32)
    res32 = [c32.run(ids) for _, ids, _ in prompts]
    c32.close()
    c64 = Capture(model_f64)
    res64 = [c64.run(ids) for _, ids, _ in prompts]
    c64.close()
    for (l32, lo32), (l64, lo64) in zip(res32, res64):
        for l in l32:
            for key in ("q", "k", "v"):
                ref = l64[l][key]
                e = (l32[l][key].double() - ref).abs().max() / ref.abs().max() / 1e-4
                worst[key] = max(worst.get(key, 0), float(e))
            e = (l32[l]["attn"].double() - l64[l]["attn"]).abs().max() / 1e-5
            worst["attn"] = max(worst.get("attn", 0), float(e))
        rng = lo64.max() - lo64.min()
        worst["logits"] = max(worst.get("logits", 0),
                              float((lo32.double() - lo64).abs().max() / rng / 1e-3))
        assert torch.equal(lo32.argmax(-1), lo64.argmax(-1)), "f32/f64 argmax differ"
    return worst


def tiny_prompts(vocab, seed, lengths):
    rng = np.random.default_rng(seed)
    return [("", [int(x) for x in rng.integers(0, vocab, n)], {}) for n in lengths]


def long_rows(seq):
    """Query rows for attn/head_out/logits: all rows of short prompts; around
    the 16-, 32- and 64-row block edges (and the first and last rows) of long
    ones (q/k/v/resid stay complete, so every row is still checked)."""
    if seq <= 24:
        return list(range(seq))
    edges = [0, 1, 15, 16, 31, 32, 33, 47, 48, 63, 64, 65, seq - 2, seq - 1]
    return sorted({r for r in edges if r < seq})


def tiny_goldens(only):
    runs = [(name, MODELS / name, None, f"models/{name}", s, [7, 21, 66])
            for name, s in SPECS.items()]
    # d_model 256: two prompts keep the file small; the small models cover > 64 rows.
    runs.append(("tiny_llama_quant", MODELS, "tiny_llama_quant.gguf",
                 "models/tiny_llama_quant.gguf", QUANT_SPEC, [9, 40]))
    for name, s in SPECS.items():
        if (s["arch"] in ("qwen3", "phi3") and name != "tiny_phi3_full_rotary") or name in MOE_GGUF:
            runs.append((name + "_gguf", MODELS / name, MODELS / f"{name}.gguf",
                         f"models/{name}.gguf", s, [7, 21, 66]))
    runs += window_runs()
    for name, path, gfile, attr, spec, lengths in runs:
        if only and name not in only:
            continue
        prompts = tiny_prompts(spec["vocab"], 1000 + spec["seed"], lengths)
        if isinstance(gfile, Path) and "moe" in spec:
            m = load_moe_gguf_weights(path, gfile, spec)
            m64 = load_moe_gguf_weights(path, gfile, spec, torch.float64)
        elif isinstance(gfile, Path):  # a family GGUF: HF on gguf-py's dequantised weights
            m, m64 = load_gguf_weights(path, gfile), load_gguf_weights(path, gfile, torch.float64)
        else:
            extra = MOE_EAGER if "moe" in spec else {}
            m, m64 = load(path, gfile, **extra), load(path, gfile, torch.float64, **extra)
        w = compare_f64(m, m64, prompts)
        print(f"{name}: f32 vs f64 error / tolerance: "
              + ", ".join(f"{k} {v:.3g}" for k, v in w.items()))
        assert max(w.values()) < 0.3, f"{name}: float32 reference too far from float64"
        if "moe" in spec:
            margin = routing_margin(m64, prompts)
            print(f"{name}: smallest gap between the k-th and (k+1)-th router logit {margin:.3g}")
            assert margin > 1e-3, f"{name}: a token's top-k experts sit on a near tie"
        extra = {}
        if name == "tiny_llama3_rope":  # the GGUF copy must give the same numbers
            extra["model_alt"] = "models/tiny_llama3_rope.gguf"
        if name == "tiny_gemma3":  # and the multimodal repackaging of the same weights
            extra["model_alt"] = "models/tiny_gemma3_mm"
        write_golden(GOLDEN / f"{name}.h5", m, attr, prompts, attn_rows=long_rows,
                     logits_rows=long_rows, extra_attrs=extra)


def window_runs():
    """The sliding-window and Gemma 3 models (issue 27): windows of 8-12 keys, shorter than
    the 21- and 66-token prompts."""
    runs = [(name, MODELS / name, None, f"models/{name}", s, [7, 21, 66])
            for name, s in WINDOW_SPECS.items()]
    s = WINDOW_SPECS["tiny_gemma3_6l"]
    runs.append(("tiny_gemma3_6l_gguf", MODELS / "tiny_gemma3_6l", MODELS / "tiny_gemma3_6l.gguf",
                 "models/tiny_gemma3_6l.gguf", s, [7, 21, 66]))
    return runs


def default_tokens(text):
    """llama.cpp's tokenizer decides (issue 2); transformers' only as a fallback."""
    try:
        from llama_cpp import Llama
        tok = Llama(model_path=str(DEFAULT_GGUF), vocab_only=True, verbose=False)
        return tok.tokenize(text.encode(), add_bos=False, special=True), "llama.cpp"
    except ImportError:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(str(DEFAULT_GGUF.parent), gguf_file=DEFAULT_GGUF.name)
        return tok(text, add_special_tokens=False)["input_ids"], "transformers"


def default_golden():
    if not DEFAULT_GGUF.exists():
        print(f"skip default model: {DEFAULT_GGUF} missing")
        return
    prompts = []
    for text in DEFAULT_PROMPTS:
        ids, src = default_tokens(text)
        prompts.append((text, ids, {"tokenizer": src}))
    m = load(DEFAULT_GGUF.parent, DEFAULT_GGUF.name)
    write_golden(GOLDEN / "smollm2_default.h5", m,
                 "models/SmolLM2-135M-Instruct.Q4_1.gguf", prompts,
                 full_layers=DEFAULT_FULL_LAYERS,
                 attn_rows=lambda seq: sorted({0, seq // 2, seq - 1}),
                 logits_rows=lambda seq: [seq - 1],
                 extra_attrs={"full_layers": np.array(DEFAULT_FULL_LAYERS, dtype=np.int32)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--skip-default", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    tiny_goldens(set(a.only))
    if not a.skip_default and (not a.only or "smollm2_default" in a.only):
        default_golden()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden selections of ExpectedAttention for tests/test_methods_golden.cpp.

Writes tests/data/kvpress/expected_attention_v1.h5 (format_version 1). The reference is
kvpress 0.5.5's ExpectedAttentionPress (kvpress/presses/expected_attention_press.py), run
unmodified on CPU float64 tensors through a stand-in attention module:

* module.q_proj is the identity and hidden_states carry the PRE-RoPE queries, so
  get_prerope_query_states returns them (kvpress's own projection is q_proj(hidden));
  the pre-RoPE queries are recovered here from the post-RoPE ones ckv records by the
  inverse rotation x = x' cos - rotate_half(x') sin, with cos/sin from transformers'
  LlamaRotaryEmbedding of the model's config (llama3 scaling included) at [0, c);
* module.rotary_emb is that LlamaRotaryEmbedding, so apply_avg_rope averages the model's
  own rotation over [c, c + n_future_positions);
* keys and values are the post-RoPE k and the v of the context [0, c).

The kept sets are torch.topk of ExpectedAttentionPress.score (ScorerPress.compress),
of CriticalKVPress(ExpectedAttentionPress).score (its o_proj the model's W_O) and the
complement of AdaKVPress(ExpectedAttentionPress).compress's masked_key_indices.

Cases: a synthetic GQA case (random post-RoPE q/k/v, theta 1e4, d 16) under several
press settings, and two real models on a text no other test uses: the default model
(SmolLM2-135M-Instruct Q4_1, its config read by transformers from the GGUF; layers 0, 15,
29) and tiny_llama3_rope (llama3 RoPE scaling; both layers), their q/k/v/W_O recorded by
`ckv dump` (f16).

Layout:
    /               attrs: format_version, generator, kvpress_version, torch_version,
                           transformers_version
    /cases/<name>/  attrs: c, n, budgets (int64, kept per KV head), fractions, source
        inv_freq    float64 [d/2] the rotary embedding's inverse frequencies (transformers)
        layers/<l>/q [n_head, n, d] post-RoPE, k, v [n_kv_head, n, d] (float32 or float16),
                    nu_l1 float64 [n_head, c] (L1 norm of V W_h, torch)
        layers/<l>/kept/<label> uint8 [budget, n_kv_head, c] (1 = kept), label:
            "<method>|<settings>" with method expectedattention, adakv(expectedattention)
            or criticalkv(expectedattention) and settings a comma-separated list of
            future=T,sinks=S,cov=0|1,vnorm=0|1,eps=E (the press's fields)
"""
import tempfile
from pathlib import Path

import h5py
import numpy as np

from ckv_dump import dump_layers  # noqa: E402 (tests/reference/)
import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/data/kvpress/expected_attention_v1.h5"
TEXT = (
    "At the edge of the salt marsh near Quillby stands a tide mill that has ground oats since "
    "the reign of a forgotten duke. Its wheel turns only when the sea falls, so the miller keeps "
    "a chalk board of the tides by the door and sleeps in short shifts through the spring. The "
    "village choir rehearses in the granary on Thursdays; their conductor, a retired surveyor "
    "named Priya Okonkwo, insists on tuning forks rather than a piano. Last winter a storm "
    "lifted two slates from the roof and a heron nested in the gap until March. The mill's "
    "flour is sold in brown paper bags stamped with a blue anchor, and the baker in the next "
    "town swears it makes the lightest scones on the coast. "
)
GZIP = dict(compression="gzip", compression_opts=6, shuffle=True)
DEFAULT = dict(future=512, sinks=4, cov=1, vnorm=1, eps=0.0)


def label(method, s):
    return f"{method}|future={s['future']},sinks={s['sinks']},cov={s['cov']},vnorm={s['vnorm']},eps={s['eps']:g}"


class FakeModule(torch.nn.Module):
    def __init__(self, config, wo):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
        self.config = config
        self.config._attn_implementation = "sdpa"
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.q_proj = torch.nn.Identity()  # hidden_states carry the pre-RoPE queries
        self.rotary_emb = LlamaRotaryEmbedding(config)
        n = config.num_attention_heads * config.head_dim
        self.o_proj = torch.nn.Linear(n, wo.shape[0], bias=False, dtype=torch.float64)
        with torch.no_grad():
            self.o_proj.weight.copy_(torch.from_numpy(wo.astype(np.float64)))


def unrotate(module, q, c):
    """Pre-RoPE queries [n_head, c, d] from post-RoPE q (float64)."""
    x = torch.from_numpy(q[:, :c].astype(np.float64))
    cos, sin = module.rotary_emb(x, torch.arange(c).unsqueeze(0))
    cos, sin = cos[0], sin[0]  # [c, d], float32 values in float64
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos - rot * sin


def kept_sets(config, q, k, v, wo, c, fractions, settings, methods):
    """{label: [mask per budget]} from the kvpress presses."""
    from kvpress import AdaKVPress, CriticalKVPress, ExpectedAttentionPress
    n_head, _, d = q.shape
    n_kv = k.shape[0]
    module = FakeModule(config, wo)
    pre = unrotate(module, q, c)  # [n_head, c, d]
    hidden = pre.permute(1, 0, 2).reshape(1, c, n_head * d)
    keys = torch.from_numpy(k[None, :, :c].astype(np.float64))
    values = torch.from_numpy(v[None, :, :c].astype(np.float64))
    out = {}
    for s in settings:
        for fr in fractions:
            cr = 1 - fr
            n_kept = max(1, int(c * (1 - cr)))
            for method in methods:
                ea = ExpectedAttentionPress(compression_ratio=cr, n_future_positions=s["future"], n_sink=s["sinks"],
                                            use_covariance=bool(s["cov"]), use_vnorm=bool(s["vnorm"]),
                                            epsilon=s["eps"])
                m = np.zeros((n_kv, c), np.uint8)
                if method == "adakv(expectedattention)":
                    press = AdaKVPress(ea, alpha_safeguard=0.2)
                    press.compress(module, hidden, keys, values, None, {})
                    m[:] = 1
                    _, heads, seqs = module.masked_key_indices
                    m[heads.numpy(), seqs.numpy()] = 0
                    del module.masked_key_indices
                else:
                    press = ea if method == "expectedattention" else CriticalKVPress(ea, epsilon=1e-4,
                                                                                     first_stage_ratio=0.5)
                    scores = press.score(module, hidden, keys, values, None, {})
                    idx = scores.topk(n_kept, dim=-1).indices[0].numpy()  # ScorerPress.compress
                    for g in range(n_kv):
                        m[g, idx[g]] = 1
                out.setdefault(label(method, s), []).append(m)
    return out


def nu_l1(q, v, wo, c):
    n_head, _, d = q.shape
    group = n_head // v.shape[0]
    nu = np.zeros((n_head, c))
    for h in range(n_head):
        w_h = wo[:, h * d:(h + 1) * d].T.astype(np.float64)
        nu[h] = torch.norm(torch.from_numpy(v[h // group, :c].astype(np.float64) @ w_h), p=1, dim=-1).numpy()
    return nu


def write_case(f, name, config, layers, c, n, fractions, source, settings, methods):
    """layers: {layer: (q, k, v, wo)}."""
    for fr in fractions:
        # kvpress's n_kept = int(c * (1 - compression_ratio)) and ckv's budget must agree exactly
        # (0.2 would not: 1 - (1 - 0.2) < 0.2), and so must CriticalKV's stage 1.
        b = int(c * (1 - (1 - fr)))
        assert b == round(c * fr) and int((1 - (1 - fr)) * c * 0.5) == int(b * 0.5), (c, fr)
    g = f.create_group(f"cases/{name}")
    g.attrs["c"], g.attrs["n"], g.attrs["source"] = c, n, source
    g.attrs["budgets"] = np.array([max(1, int(c * (1 - (1 - fr)))) for fr in fractions], np.int64)
    g.attrs["fractions"] = np.array(fractions, np.float64)
    module = FakeModule(config, next(iter(layers.values()))[3])
    g["inv_freq"] = module.rotary_emb.inv_freq.numpy().astype(np.float64)
    for l, (q, k, v, wo) in sorted(layers.items()):
        lg = g.create_group(f"layers/{l}")
        for key, val in (("q", q), ("k", k), ("v", v)):
            lg.create_dataset(key, data=val, **GZIP)
        lg.create_dataset("nu_l1", data=nu_l1(q, v, wo, c), **GZIP)
        for lab, masks in kept_sets(config, q, k, v, wo, c, fractions, settings, methods).items():
            lg[f"kept/{lab}"] = np.stack(masks)


def llama_config(n_head, n_kv, d, d_model, theta, rope_scaling=None, n_layer=2):
    from transformers import LlamaConfig
    params = {"rope_type": "default", "rope_theta": theta} if rope_scaling is None else rope_scaling
    return LlamaConfig(hidden_size=d_model, num_attention_heads=n_head, num_key_value_heads=n_kv, head_dim=d,
                       num_hidden_layers=n_layer, rope_parameters=params, max_position_embeddings=8192)


def dumped(model, layers, tokens_or_text, workdir, name):
    return dump_layers(model, layers, tokens_or_text, workdir, name, ("q", "k", "v", "wo"))


def main():
    import kvpress
    import transformers
    from transformers import AutoConfig
    OUT.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261130)
    methods = ["expectedattention", "adakv(expectedattention)", "criticalkv(expectedattention)"]
    tmp = OUT.with_suffix(".h5.tmp")
    with h5py.File(tmp, "w", libver=("v108", "v110")) as f, tempfile.TemporaryDirectory() as work:
        f.attrs["format_version"] = 1
        f.attrs["generator"] = "tests/reference/make_expected_attention_goldens.py"
        f.attrs["kvpress_version"] = str(getattr(kvpress, "__version__", "0.5.5"))
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["transformers_version"] = str(transformers.__version__)
        # Synthetic GQA 4/2, d 16: random post-RoPE q (peaked), k, v; every press setting.
        n_head, n_kv, d, d_model, c = 4, 2, 16, 32, 300
        syn = {}
        for l, peak in ((0, 1.0), (1, 2.5)):
            q = (rng.standard_normal((n_head, c + 10, d)) * peak).astype(np.float32)
            k = rng.standard_normal((n_kv, c + 10, d)).astype(np.float32)
            v = (rng.standard_normal((n_kv, c + 10, d)) * rng.uniform(0.2, 3, (1, c + 10, 1))).astype(np.float32)
            wo = (rng.standard_normal((d_model, n_head * d)) / np.sqrt(d)).astype(np.float32)
            syn[l] = (q, k, v, wo)
        settings = [DEFAULT, dict(DEFAULT, cov=0), dict(DEFAULT, vnorm=0),
                    dict(future=64, sinks=2, cov=1, vnorm=1, eps=0.01), dict(DEFAULT, sinks=0)]
        write_case(f, "synthetic_gqa", llama_config(n_head, n_kv, d, d_model, 10000.0), syn, c, c + 10,
                   [0.25, 0.4, 0.6], "synthetic", settings, methods)
        # tiny_llama3_rope: llama3-scaled RoPE (theta 50), bytes of TEXT.
        tiny = ROOT / "tests/data/models/tiny_llama3_rope"
        tconf = AutoConfig.from_pretrained(tiny)
        toks = list(TEXT.encode("ascii"))[:230]
        write_case(f, "tiny_llama3_rope", tconf, dumped(str(tiny), [0, 1], toks, work, "tiny"), 220, 230,
                   [0.25, 0.3, 0.5], "models/tiny_llama3_rope, bytes of TEXT", [DEFAULT], methods)
        # The default model, its config as transformers reads the GGUF.
        gguf = ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
        dconf = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
        layers = dumped(str(gguf), [0, 15, 29], TEXT, work, "default")
        n = next(iter(layers.values()))[0].shape[1]
        c = (n - 8) // 10 * 10
        write_case(f, "default_model", dconf, layers, c, n, [0.3, 0.4, 0.6],
                   "models/SmolLM2-135M-Instruct.Q4_1.gguf, TEXT (ckv tokenizer)", [DEFAULT], methods)
    tmp.replace(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

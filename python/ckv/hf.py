"""ckv.hf: record what ckv's analysis needs from any HF transformers causal LM, on any device
(docs/PYTHON.md "HF models"): post-RoPE q, k, v of each layer, its W_O (o_proj.weight) and
the attention rows asked for, recomputed from q and k so the model's own attention
implementation (SDPA, flash) can stay on. The result is a ckv.Recording; `bound(rec, layer,
...)` runs ckv.bound on it with the layer's W_O. Needs torch and transformers (not
dependencies of ckv).

    from transformers import AutoModelForCausalLM
    import ckv.hf
    hf = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32).to("cuda")
    rec = ckv.hf.record(hf, input_ids, context_end=c)
    res = ckv.hf.bound(rec, 14, ["snapkv", "criticalkv(snapkv)"], [0.2])

`write_dump(rec, path)` stores the recording in ckv's dump schema (docs/DUMP.md), with each
recorded layer's W_O and the model's config in /model, so that `ckv bound --dump path` and
`ckv check --dump path` analyse an HF model that ckv itself does not load, with no --model.

The hooks wrap each decoder layer's attention module (`model.model.layers[i].self_attn`, as
llama, qwen2, qwen3 and mistral name it): a forward pre-hook takes the module's input hidden
states and rotary (cos, sin), and applies the module's own projections, q/k norms (qwen3)
and its modelling file's apply_rotary_pos_emb, once more, outside the model's computation.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from .analysis import BoundResult
from .analysis import bound as _bound
from .model import Recording


@dataclass
class HfRecording(Recording):
    """A Recording of an HF model plus wo: {layer: W_O [d_model, n_head*d_head] float32} and
    model: the /model attributes of ckv's dump schema (docs/DUMP.md) read off the HF model."""
    wo: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)


def _layers_of(model):
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no model.layers (a decoder of llama's layout is needed)")
    return layers


def _rope_of(cfg, d_head):
    """(rope_theta, rope_scaling, rope_local_theta, rope_dim) from an HF text config, as
    transformers 5 (rope_parameters, per layer type for Gemma 3) or 4 (rope_theta,
    rope_scaling, rope_local_base_freq) spells them, in ckv's names (docs/MODELS.md "RoPE")."""
    params = dict(getattr(cfg, "rope_parameters", None) or {})
    local = None
    if "full_attention" in params:
        local = params.get("sliding_attention")
        params = dict(params["full_attention"])
    legacy = getattr(cfg, "rope_scaling", None) or {}
    scaling = {**legacy, **params}
    theta = float(scaling.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))
    kind = scaling.get("rope_type", scaling.get("type", "default")) or "default"
    out = {"type": kind}
    for ours, theirs in (("factor", "factor"), ("low_freq_factor", "low_freq_factor"),
                         ("high_freq_factor", "high_freq_factor"), ("attention_factor", "attention_factor")):
        if scaling.get(theirs) is not None:
            out[ours] = float(scaling[theirs])
    original = scaling.get("original_max_position_embeddings",
                           getattr(cfg, "original_max_position_embeddings", None))
    if original is not None:
        out["original_max_position"] = int(original)
    for key in ("short_factor", "long_factor"):
        if scaling.get(key) is not None:
            out[key] = [float(x) for x in scaling[key]]
    if kind == "longrope" and "attention_factor" not in out and original:
        # HF's default: sqrt(1 + ln(max / original) / ln(original)) when the context is extended.
        ratio = getattr(cfg, "max_position_embeddings", original) / original
        out["attention_factor"] = 1.0 if ratio <= 1 else float(np.sqrt(1 + np.log(ratio) / np.log(original)))
    local_theta = float((local or {}).get("rope_theta", getattr(cfg, "rope_local_base_freq", 0.0)) or 0.0)
    rope_dim = int(d_head * float(getattr(cfg, "partial_rotary_factor", 1.0) or 1.0))
    return theta, out, local_theta, rope_dim


def _model_attrs(model, attention, n_layer, scaling):
    """/model of ckv's dump schema (docs/DUMP.md) from an HF causal LM."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    d_head = int(attention.head_dim)
    theta, rope_scaling, local_theta, rope_dim = _rope_of(cfg, d_head)
    types = getattr(cfg, "layer_types", None)
    window = int(getattr(cfg, "sliding_window", None) or 0)
    if types is not None:
        sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
    else:
        sliding = list(range(n_layer)) if window and getattr(cfg, "use_sliding_window", True) else []
    standard = d_head ** -0.5
    return {
        "path": str(getattr(cfg, "_name_or_path", "") or type(model).__name__), "format": "hf-bridge",
        "arch": str(getattr(cfg, "model_type", "")), "n_layer": n_layer,
        "n_head": int(cfg.num_attention_heads),
        "n_kv_head": int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads),
        "d_head": d_head, "d_model": int(cfg.hidden_size), "d_ff": int(getattr(cfg, "intermediate_size", 0) or 0),
        "vocab": int(cfg.vocab_size), "context_length": int(getattr(cfg, "max_position_embeddings", 0) or 0),
        "rms_eps": float(getattr(cfg, "rms_norm_eps", None) or getattr(cfg, "layer_norm_eps", None) or 1e-6),
        "rope_theta": theta, "rope_scaling": rope_scaling, "rope_local_theta": local_theta, "rope_dim": rope_dim,
        "attn_scale": 0.0 if abs(scaling / standard - 1) < 1e-6 else float(scaling),
        "attention_bias": attention.q_proj.bias is not None,
        "tied_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
        "sliding_window": window if sliding else 0, "sliding_layers": sliding if window else [],
        "weight_dtypes": {str(next(model.parameters()).dtype).replace("torch.", ""): 1},
    }


def record(model, input_ids, layers: Optional[Sequence[int]] = None, context_end: Optional[int] = None,
           attn_rows: Sequence[int] = (), logits: bool = True) -> HfRecording:
    """One forward pass of `model` (an HF causal LM, any device, in eval mode) over
    input_ids ([pos] or [1, pos]), recording post-RoPE q [layer, head, pos, d_head], k and v
    [layer, kv_head, pos, d_head] as float32 numpy, each recorded layer's W_O and, for
    `attn_rows`, softmax(q k^T * scaling) rows [layer, head, row, pos] (causal)."""
    import torch

    ids = torch.as_tensor(np.asarray(input_ids)).reshape(1, -1).to(next(model.parameters()).device)
    n = ids.shape[1]
    all_layers = _layers_of(model)
    wanted = list(range(len(all_layers))) if layers is None else sorted(set(int(x) for x in layers))
    captured = {}
    handles = []

    def hook_for(index):
        def hook(module, args, kwargs):
            hidden = kwargs.get("hidden_states", args[0] if args else None)
            cos, sin = kwargs["position_embeddings"]
            d = module.head_dim
            shape = (*hidden.shape[:-1], -1, d)
            q = module.q_proj(hidden).view(shape)
            k = module.k_proj(hidden).view(shape)
            v = module.v_proj(hidden).view(shape)
            if hasattr(module, "q_norm"):
                q, k = module.q_norm(q), module.k_norm(k)
            q, k, v = (x.transpose(1, 2) for x in (q, k, v))
            rope = sys.modules[type(module).__module__].apply_rotary_pos_emb
            q, k = rope(q, k, cos, sin)
            captured[index] = tuple(x[0].detach().float().cpu().numpy() for x in (q, k, v)) + (
                float(getattr(module, "scaling", d ** -0.5)),)
        return hook

    try:
        for i in wanted:
            handles.append(all_layers[i].self_attn.register_forward_pre_hook(hook_for(i), with_kwargs=True))
        with torch.no_grad():
            out = model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    q = np.stack([captured[i][0] for i in wanted])
    k = np.stack([captured[i][1] for i in wanted])
    v = np.stack([captured[i][2] for i in wanted])
    rows = np.asarray(list(attn_rows), dtype=np.int32)
    attn = None
    if len(rows):
        group = q.shape[1] // k.shape[1]
        attn = np.zeros((len(wanted), q.shape[1], len(rows), n), np.float32)
        for li, i in enumerate(wanted):
            scaling = captured[i][3]
            for h in range(q.shape[1]):
                logits_ = (q[li, h, rows].astype(np.float64) @ k[li, h // group].astype(np.float64).T) * scaling
                logits_[np.arange(n)[None, :] > rows[:, None]] = -np.inf
                e = np.exp(logits_ - logits_.max(axis=1, keepdims=True))
                attn[li, h] = e / e.sum(axis=1, keepdims=True)
    wo = {i: all_layers[i].self_attn.o_proj.weight.detach().float().cpu().numpy() for i in wanted}
    attrs = _model_attrs(model, all_layers[wanted[0]].self_attn, len(all_layers), captured[wanted[0]][3])
    return HfRecording(model=attrs, tokens=ids[0].cpu().numpy().astype(np.int32), layers=wanted,
                       context_end=n if context_end is None else int(context_end), attn_rows=rows, q=q, k=k, v=v,
                       attn=attn, logits=out.logits[0, -1].float().cpu().numpy() if logits else None, wo=wo)


def _describe(ds, dims, text, unit=None):
    ds.attrs["dims"] = dims
    ds.attrs["description"] = text
    if unit:
        ds.attrs["unit"] = unit


def write_dump(rec: HfRecording, path, record_id: str = "0", model_sha256: Optional[str] = None,
               force: bool = False) -> str:
    """Writes `rec` as a ckv dump (schema ckv.dump version 1, docs/DUMP.md): one record of
    tokens, post-RoPE q/k/v of every recorded layer (float32), the attention rows and the
    last logits when recorded, and /model with the HF model's config and each layer's W_O,
    so that `ckv bound --dump path` and `ckv check --dump path` need no --model. The file is
    written beside its name and renamed when complete. `model_sha256` names the model in the
    outputs' provenance; by default the sha256 of the config attributes and the W_O bytes.
    Needs h5py. Returns the path."""
    import datetime
    import getpass
    import hashlib
    import json
    import os
    import shlex
    import socket

    import h5py

    from . import __version__

    path = os.fspath(path)
    if os.path.exists(path) and not force:
        raise FileExistsError(f"{path}: output exists (force=True replaces it)")
    if not rec.model or not rec.wo:
        raise ValueError("write_dump: the recording has no model attributes or W_O (make it with ckv.hf.record)")
    m = rec.model
    layers = list(rec.layers)
    n = int(len(rec.tokens))
    if model_sha256 is None:
        h = hashlib.sha256(json.dumps(m, sort_keys=True).encode())
        for layer in layers:
            h.update(np.ascontiguousarray(rec.wo[layer], np.float32).tobytes())
        model_sha256 = h.hexdigest()
    heads = list(range(m["n_head"]))
    what = ["q", "k", "v", "wo"] + (["attn"] if rec.attn is not None else []) + (
        ["logits"] if rec.logits is not None else [])
    strings = h5py.string_dtype()
    partial = os.path.join(os.path.dirname(path) or ".", "." + os.path.basename(path) + ".partial")
    with h5py.File(partial, "w") as f:
        a = f.attrs
        a["schema"], a["schema_version"] = "ckv.dump", 1
        a["ckv_version"], a["git_commit"] = __version__, ""
        a["command_line"] = shlex.join(["python", "-c", "ckv.hf.write_dump(...)"])
        a["hostname"], a["user"] = socket.gethostname(), getpass.getuser()
        a["created"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        a["threads"], a["device"] = 0, "hf-bridge"
        a["model_path"], a["model_sha256"], a["model_format"] = m["path"], model_sha256, m["format"]
        if m["sliding_layers"]:
            a["sliding_window"], a["sliding_layers"] = m["sliding_window"], json.dumps(m["sliding_layers"])
        token_text = " ".join(str(int(t)) for t in rec.tokens)
        a["input_file"], a["input_sha256"] = "", hashlib.sha256(token_text.encode()).hexdigest()
        a["chat"] = False
        a["shard"], a["shard_index"], a["shard_count"], a["input_records"] = "0/1", 0, 1, 1
        a["dtype"], a["compression"], a["window"] = "float32", 0, 0
        a.create("what", what, dtype=strings)
        a["layers"] = np.asarray(layers, np.int64)
        a["heads"] = np.asarray(heads, np.int64)
        a["kv_heads"] = np.arange(m["n_kv_head"], dtype=np.int64)
        a["attn_rows"] = "given" if rec.attn is not None else "none"
        a["settings"] = json.dumps({"what": what, "layers": layers, "heads": heads, "dtype": "float32",
                                    "source": "ckv.hf"})
        g = f.create_group("model")
        for key, value in m.items():
            g.attrs[key] = json.dumps(value) if isinstance(value, (dict, list)) else value
        for layer in layers:
            wo = np.ascontiguousarray(rec.wo[layer], np.float32)
            _describe(g.create_dataset(f"layers/{layer}/W_O", data=wo), "d_model head_d_head",
                      "the layer's attention output projection W_O (float32), HF o_proj.weight")
        r = f.create_group(f"records/{record_id}")
        r.attrs["index"], r.attrs["id"] = 0, record_id
        r.attrs["context"] = ""
        r.attrs["n_tokens"], r.attrs["context_end"] = n, int(rec.context_end)
        r.attrs["spans"] = "{}"
        _describe(r.create_dataset("tokens", data=np.asarray(rec.tokens, np.int32)), "pos", "the prompt's token ids")
        if rec.attn is not None:
            _describe(r.create_dataset("attn_rows", data=np.asarray(rec.attn_rows, np.int32)), "row",
                      "query positions of the attention rows")
        if rec.logits is not None:
            _describe(r.create_dataset("logits_last", data=np.asarray(rec.logits, np.float32)), "vocab",
                      "next-token logits at the last position", "logit")
        for i, layer in enumerate(layers):
            lg = r.create_group(f"layers/{layer}")
            for name, x, dims, text in (("q", rec.q[i], "head pos d_head", "post-RoPE queries"),
                                        ("k", rec.k[i], "kv_head pos d_head", "post-RoPE keys"),
                                        ("v", rec.v[i], "kv_head pos d_head", "values")):
                x = np.ascontiguousarray(x, np.float32)
                _describe(lg.create_dataset(name, data=x, chunks=(1, *x.shape[1:])), dims, text)
            if rec.attn is not None:
                _describe(lg.create_dataset("attn", data=np.ascontiguousarray(rec.attn[i], np.float32)),
                          "head row pos", "softmax attention rows (causal)", "probability")
        f.flush()
        r.attrs["complete"] = True
    os.replace(partial, path)
    return path


def bound(rec: HfRecording, layer: int, methods: Sequence[str], budgets: Sequence, **params) -> BoundResult:
    """ckv.bound on one layer of an HF recording, with that layer's W_O."""
    s = rec.slot(layer)
    return _bound(rec.q[s], rec.k[s], rec.v[s], rec.wo[layer], context_end=rec.context_end, methods=methods,
                  budgets=budgets, layer=layer, **params)

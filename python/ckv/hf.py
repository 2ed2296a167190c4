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
    """A Recording of an HF model plus wo: {layer: W_O [d_model, n_head*d_head] float32}."""
    wo: dict = field(default_factory=dict)


def _layers_of(model):
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no model.layers (a decoder of llama's layout is needed)")
    return layers


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
    return HfRecording(tokens=ids[0].cpu().numpy().astype(np.int32), layers=wanted,
                       context_end=n if context_end is None else int(context_end), attn_rows=rows, q=q, k=k, v=v,
                       attn=attn, logits=out.logits[0, -1].float().cpu().numpy() if logits else None, wo=wo)


def bound(rec: HfRecording, layer: int, methods: Sequence[str], budgets: Sequence, **params) -> BoundResult:
    """ckv.bound on one layer of an HF recording, with that layer's W_O."""
    s = rec.slot(layer)
    return _bound(rec.q[s], rec.k[s], rec.v[s], rec.wo[layer], context_end=rec.context_end, methods=methods,
                  budgets=budgets, layer=layer, **params)

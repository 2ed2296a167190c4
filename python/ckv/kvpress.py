"""ckv.kvpress: kept sets computed by ckv applied inside kvpress (docs/PYTHON.md "kvpress"),
so that ckv's selections (the oracle, criticalkv(...), defensivekv, ...) are scored with
kvpress's own pipeline and evaluation. Needs torch and kvpress (not dependencies of ckv).

    press = ckv.kvpress.KeptSetPress(kept={layer: kept_mask [n_kv_head, c]})
    with press(hf_model):
        hf_model(context_ids, past_key_values=cache)      # the cache keeps ckv's entries
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from kvpress import BasePress


def kept_positions(mask) -> np.ndarray:
    """A kept mask [n_kv_head, c] (ckv.select, BoundResult.kept_mask[m, b]) as positions
    [n_kv_head, b], increasing; every KV head must keep the same count (kvpress's caches
    hold one length per layer)."""
    mask = np.asarray(mask).astype(bool)
    counts = mask.sum(axis=1)
    if len(set(counts.tolist())) != 1:
        raise ValueError(f"KV heads keep different counts {counts.tolist()}: a kvpress cache holds one length")
    return np.stack([np.flatnonzero(row) for row in mask])


@dataclass
class KeptSetPress(BasePress):
    """Keeps, at the prefill of each layer, the cache entries ckv chose: kept maps a layer
    index to a kept mask [n_kv_head, c] or to positions [n_kv_head, b]. Layers not in kept
    are left whole. The prefill must be the c tokens the kept sets were computed on."""
    kept: dict = field(default_factory=dict)

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        import torch

        sel = self.kept.get(module.layer_idx)
        if sel is None:
            return keys, values
        sel = np.asarray(sel)
        if sel.dtype == bool or (sel.dtype == np.uint8 and sel.shape[-1] == keys.shape[2]):
            sel = kept_positions(sel)
        if sel.shape[0] != keys.shape[1]:
            raise ValueError(f"layer {module.layer_idx}: {sel.shape[0]} KV heads of kept sets, the cache has "
                             f"{keys.shape[1]}")
        if sel.size and sel.max() >= keys.shape[2]:
            raise ValueError(f"layer {module.layer_idx}: position {sel.max()} past the prefill of {keys.shape[2]}")
        idx = torch.as_tensor(sel, device=keys.device, dtype=torch.long)
        idx = idx[None, :, :, None].expand(keys.shape[0], -1, -1, keys.shape[3])
        return keys.gather(2, idx).contiguous(), values.gather(2, idx).contiguous()

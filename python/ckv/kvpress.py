"""ckv.kvpress: kvpress and ckv in both directions (docs/PYTHON.md "kvpress"). Needs torch
and kvpress (not dependencies of ckv).

Kept sets computed by ckv applied inside kvpress, so that ckv's selections (the oracle,
criticalkv(...), defensivekv, ...) are scored with kvpress's own pipeline and evaluation:

    press = ckv.kvpress.KeptSetPress(kept={layer: kept_mask [n_kv_head, c]})
    with press(hf_model):
        hf_model(context_ids, past_key_values=cache)      # the cache keeps ckv's entries

And the kept sets of any kvpress press, recorded during its prefill and written as a ckv
selection file, which `ckv bound --methods file`, `ckv mask --method file` and `ckv eval
--methods file` read (docs/MASK.md "selection file"):

    kept = ckv.kvpress.kept_sets(kvpress.SnapKVPress(compression_ratio=0.8), hf_model, context_ids)
    ckv.kvpress.write_selection("snapkv.json", kept, c=len(context_ids))
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


def _kept_of_compressed(keys, compressed) -> np.ndarray:
    """Which rows of keys [1, n_kv_head, n, d] the press kept in compressed [1, n_kv_head, b, d]:
    a mask [n_kv_head, n], found by matching each kept key to the identical input key (a
    press that prunes gathers rows; it does not change them)."""
    import torch

    if compressed.shape[2] == keys.shape[2]:
        return np.ones((keys.shape[1], keys.shape[2]), bool)
    mask = np.zeros((keys.shape[1], keys.shape[2]), bool)
    for g in range(keys.shape[1]):
        k, kc = keys[0, g].float(), compressed[0, g].float()
        best = torch.cdist(kc, k).argmin(dim=1)  # [b] the nearest input key of each kept key
        if not torch.equal(k[best], kc):  # exactly the same row: a gathered key
            raise ValueError("the press changed the kept keys (a merging press?): its kept sets are not positions")
        mask[g, best.cpu().numpy()] = True
        if int(mask[g].sum()) != kc.shape[0]:
            raise ValueError(f"KV head {g}: two kept keys match one input key; the kept set is ambiguous")
    return mask


@dataclass
class _RecordingPress(BasePress):
    """Runs `press` unchanged and records, per layer, which prefill entries its cache keeps:
    rows of the compressed keys (pruning presses) less the entries it masks
    (module.masked_key_indices: AdaKV and the other head-wise presses)."""
    press: BasePress = None
    kept: dict = field(default_factory=dict)

    def post_init_from_model(self, model):
        self.press.post_init_from_model(model)

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        module.masked_key_indices = None
        ck, cv = self.press.compress(module, hidden_states, keys, values, attentions, kwargs)
        mask = _kept_of_compressed(keys, ck)
        masked = getattr(module, "masked_key_indices", None)
        if masked is not None:
            if ck.shape[2] != keys.shape[2]:
                raise ValueError("the press both prunes and masks: not a kept set per head")
            b, h, s = (t.cpu().numpy() for t in masked)
            mask[h[b == 0], s[b == 0]] = False
        self.kept[module.layer_idx] = mask
        return ck, cv


def kept_sets(press, model, context_ids) -> dict:
    """The kept sets of a kvpress press: {layer: bool [n_kv_head, c]}, recorded while the
    press compresses the prefill of context_ids (c tokens, batch of one) on the HF model
    `model`, as kvpress's pipeline runs it. Layers the press leaves whole keep every entry."""
    import torch
    import transformers

    rec = _RecordingPress(press=press)
    ids = torch.as_tensor(np.asarray(context_ids).reshape(1, -1))
    with torch.no_grad(), rec(model):
        model.model(input_ids=ids.to(model.device), past_key_values=transformers.DynamicCache())
    return rec.kept


def write_selection(path, kept: dict, c: int):
    """Writes kept sets {layer: bool [n_kv_head, c] or positions [n_kv_head, b]} as a ckv
    selection file (format ckv.selection, version 1: per layer one list of kept context
    positions per KV head)."""
    import json

    layers = {}
    for layer, sel in sorted(kept.items()):
        sel = np.asarray(sel)
        if sel.dtype == bool:
            if sel.shape[-1] != c:
                raise ValueError(f"layer {layer}: a kept mask of {sel.shape[-1]} entries for c = {c}")
            rows = [np.flatnonzero(r).tolist() for r in sel]
        else:
            rows = [sorted(int(p) for p in r) for r in sel]
        if any(p < 0 or p >= c for r in rows for p in r):
            raise ValueError(f"layer {layer}: a kept position outside [0, {c})")
        layers[str(int(layer))] = {"kept": rows}
    with open(path, "w") as f:
        json.dump({"format": "ckv.selection", "format_version": 1, "c": int(c), "layers": layers}, f)

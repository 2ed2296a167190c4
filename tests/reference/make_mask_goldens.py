#!/usr/bin/env python3
"""Run HF transformers (float32, eager attention) with ckv mask's eviction protocol
(docs/MATH.md §6) expressed as additive attention masks, and write
tests/data/mask/hf_masks_v1.h5 (layout in tests/reference/README.md).

The protocol: for every layer and KV head, query rows >= c get -inf on that head's
evicted context keys (< c); nothing else changes. Here it becomes a 4-D additive mask
(causal -inf above the diagonal plus the evictions), built independently of ckv:
  * the same for every layer and KV head: the model's `attention_mask` argument,
    shape [1, 1, seq, seq] (transformers passes a 4-D mask through unchanged);
  * the same in every layer, different per KV head: the argument with shape
    [1, n_head, seq, seq] (each query head gets its KV group's mask; eager attention
    broadcasts it onto the [1, n_head, seq, seq] logits);
  * different per layer: the argument holds the plain causal mask and a forward
    pre-hook on that layer's self_attn swaps in the layer's own [1, n_head, seq, seq].
The wrapper around `eager_attention_forward` (make_forward_goldens.Capture) checks that
each layer's attention received exactly the intended mask and that the evicted entries
got probability 0. Usage: make_mask_goldens.py
"""
import sys
from pathlib import Path

import h5py
import numpy as np
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_forward_goldens import Capture, ds, f32, load, set_attrs  # noqa: E402
from make_tiny_models import MODELS, ROOT, SPECS  # noqa: E402

OUT = ROOT / "tests" / "data" / "mask" / "hf_masks_v1.h5"
FORMAT_VERSION = 1
SEQ, C = 24, 16  # prompt length and context end: rows 16..23 are the evaluation rows
RUNS = ["tiny_llama_gqa", "tiny_qwen2_bias"]


def span_positions(text):
    """ckv's --spans syntax ("1-4,10-14,7": half-open ranges, single positions)."""
    out = set()
    for item in text.split(","):
        a, _, b = item.partition("-")
        out.update(range(int(a), int(b)) if b else {int(a)})
    return sorted(out)


def cases(n_layer, n_kv, seed):
    """[(name, via, kept [n_layer, n_kv, C] int32 (1 kept, 0 evicted), spans or None)]."""
    def kept_from(evicted):  # evicted: (l, g) -> positions
        k = np.ones((n_layer, n_kv, C), dtype=np.int32)
        for (l, g), pos in evicted.items():
            k[l, g, pos] = 0
        return k

    all_lg = [(l, g) for l in range(n_layer) for g in range(n_kv)]
    out = []
    spans = "3-9"
    out.append(("span_all_layers", "argument[1,1,q,k]",
                kept_from({lg: span_positions(spans) for lg in all_lg}),
                dict(spans=spans, layers=list(range(n_layer)), kv_heads=list(range(n_kv)))))
    spans = "1-4,10-14"  # layer 0 only: propagates into layer 1 through the residual stream
    out.append(("span_layer0_only", "hook",
                kept_from({(0, g): span_positions(spans) for g in range(n_kv)}),
                dict(spans=spans, layers=[0], kv_heads=list(range(n_kv)))))
    per_head = {0: [0, 1, 2, 3], 1: [5, 6, 8, 11, 12, 13, 15]}  # sinks vs scattered
    out.append(("per_kv_head", "argument[1,n_head,q,k]",
                kept_from({(l, g): per_head[g % 2] for l, g in all_lg}), None))
    # Different in every (layer, KV head): from keeping one position to evicting none.
    rng = np.random.default_rng(seed)
    sizes = [C - 1, 6, 0, 11] + [5] * (n_layer * n_kv)
    ev = {lg: sorted(int(x) for x in rng.choice(C, size=sizes[i], replace=False))
          for i, lg in enumerate(all_lg)}
    out.append(("per_layer_kv_head", "hook", kept_from(ev), None))
    return out


def additive(kept_lg, n_head, n_kv, dtype):
    """[1, n_head, SEQ, SEQ] causal + eviction mask of one layer from kept [n_kv, C]."""
    m = torch.full((SEQ, SEQ), float("-inf"), dtype=dtype).triu(1)
    m = m.expand(n_head, SEQ, SEQ).clone()
    group = n_head // n_kv
    for h in range(n_head):
        evicted = np.flatnonzero(kept_lg[h // group] == 0)
        m[h, C:, evicted] = float("-inf")  # query rows >= c only
    return m.unsqueeze(0)


class MaskedCapture(Capture):
    """Capture (q/k/v/attn/resid per layer) that also keeps the mask eager attention got."""

    def _wrap(self, orig):
        inner = super()._wrap(orig)

        def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
            self.rec(module.layer_idx)["mask"] = attention_mask.detach().clone()
            return inner(module, query, key, value, attention_mask, scaling, dropout, **kw)
        return eager

    def run_masked(self, ids, kept, via):
        """kept [n_layer, n_kv, C]; returns (layers, logits [SEQ, vocab])."""
        cfg = self.model.config
        n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        dtype = self.model.dtype
        per_layer = [additive(kept[l], n_head, n_kv, dtype) for l in range(len(kept))]
        causal = additive(np.ones_like(kept[0]), 1, 1, dtype)  # [1, 1, SEQ, SEQ]
        hooks = []
        if via == "argument[1,1,q,k]":
            assert all(torch.equal(m, per_layer[0]) for m in per_layer)
            assert all(torch.equal(per_layer[0][0, h], per_layer[0][0, 0]) for h in range(n_head))
            arg, expect = per_layer[0][:, :1], [per_layer[0][:, :1]] * len(kept)
        elif via == "argument[1,n_head,q,k]":
            assert all(torch.equal(m, per_layer[0]) for m in per_layer)
            arg, expect = per_layer[0], per_layer
        else:  # hook: swap the layer's own mask in where it differs from the causal one
            arg, expect = causal, []
            for l, layer in enumerate(self.model.model.layers):
                if (kept[l] == 1).all():
                    expect.append(causal)
                    continue
                expect.append(per_layer[l])
                hooks.append(layer.self_attn.register_forward_pre_hook(
                    lambda mod, args, kw, m=per_layer[l]: (args, {**kw, "attention_mask": m}),
                    with_kwargs=True))
        self.layers = {}
        try:
            with torch.no_grad():
                out = self.model(torch.tensor([ids]), attention_mask=arg, use_cache=False,
                                 output_attentions=True)
        finally:
            for h in hooks:
                h.remove()
        group = n_head // n_kv
        for l, r in self.layers.items():
            assert torch.equal(r["mask"], expect[l]), f"layer {l}: eager attention got another mask"
            assert torch.equal(out.attentions[l][0], r["attn"])
            for h in range(n_head):  # rows >= c: evicted keys get exactly 0, kept ones not
                keep = torch.from_numpy(kept[l, h // group] == 1)
                assert (r["attn"][h, C:, :C][:, ~keep] == 0).all()
                assert (r["attn"][h, C:, :C][:, keep] > 0).all()
        return self.layers, out.logits[0].detach()


def errors(a, b):
    """Worst error / tolerance of run a against reference run b (issue 2's tolerances):
    resid 1e-4 x max |ref|, attn 1e-5 absolute (rows >= c), logits 1e-3 x row range."""
    (la, lo_a), (lb, lo_b) = a, b
    w = {"resid": 0.0, "attn": 0.0}
    for l in lb:
        ref = lb[l]["resid"].double()
        w["resid"] = max(w["resid"], float((la[l]["resid"].double() - ref).abs().max() / ref.abs().max() / 1e-4))
        w["attn"] = max(w["attn"], float((la[l]["attn"][:, C:].double() - lb[l]["attn"][:, C:].double()).abs().max() / 1e-5))
    rng = (lo_b.max(-1).values - lo_b.min(-1).values).double()
    w["logits"] = float(((lo_a.double() - lo_b.double()).abs().max(-1).values / rng / 1e-3).max())
    return w


def main():
    torch.manual_seed(0)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(OUT, "w", libver=("v108", "v110")) as f:
        set_attrs(f, dict(format_version=FORMAT_VERSION, generator="tests/reference/make_mask_goldens.py",
                          transformers_version=transformers.__version__,
                          torch_version=torch.__version__, dtype="float32", c=C))
        for name in RUNS:
            s = SPECS[name]
            ids = [int(x) for x in np.random.default_rng(2000 + s["seed"]).integers(0, s["vocab"], SEQ)]
            m32 = load(MODELS / name)
            m64 = load(MODELS / name, dtype=torch.float64)
            cfg = m32.config
            all_cases = cases(cfg.num_hidden_layers, cfg.num_key_value_heads, s["seed"])
            no_mask = np.ones((cfg.num_hidden_layers, cfg.num_key_value_heads, C), dtype=np.int32)
            runs = {}
            for dtype, model in (("f32", m32), ("f64", m64)):  # one Capture patched at a time
                cap = MaskedCapture(model)
                runs[dtype, "none"] = cap.run_masked(ids, no_mask, "argument[1,1,q,k]")
                for case, via, kept, _ in all_cases:
                    runs[dtype, case] = cap.run_masked(ids, kept, via)
                cap.close()
            g = f.create_group(name)
            set_attrs(g, dict(model=f"models/{name}", n_layer=cfg.num_hidden_layers,
                              n_head=cfg.num_attention_heads, n_kv_head=cfg.num_key_value_heads,
                              vocab=cfg.vocab_size, d_model=cfg.hidden_size))
            g.create_dataset("tokens", data=np.array(ids, dtype=np.int32))
            g.create_dataset("eval_rows", data=np.arange(C, SEQ, dtype=np.int32))
            for case, via, kept, spans in all_cases:
                layers, logits = runs["f32", case]
                w64 = errors(runs["f32", case], runs["f64", case])
                assert max(w64.values()) < 0.3, f"{name}/{case}: float32 reference too far from float64"
                # The case must be visible: ignoring the mask would fail the test.
                gap = errors(runs["f32", "none"], runs["f32", case])
                assert gap["logits"] > 10 and gap["attn"] > 10, f"{name}/{case}: mask changes too little"
                print(f"{name}/{case}: f32 vs f64 error / tolerance "
                      + ", ".join(f"{k} {v:.3g}" for k, v in w64.items())
                      + "; unmasked vs masked " + ", ".join(f"{k} {v:.3g}" for k, v in gap.items()))
                cg = g.create_group(f"cases/{case}")
                set_attrs(cg, dict(via=via))
                cg.create_dataset("kept", data=kept)
                if spans:  # the same eviction as ckv mask --spans/--layers/--heads
                    set_attrs(cg, dict(spans=spans["spans"]))
                    cg.create_dataset("span_layers", data=np.array(spans["layers"], dtype=np.int32))
                    cg.create_dataset("span_kv_heads", data=np.array(spans["kv_heads"], dtype=np.int32))
                ds(cg, "logits", f32(logits))
                for l, r in layers.items():
                    ds(cg, f"layers/{l}/attn", f32(r["attn"][:, C:, :]))
                    ds(cg, f"layers/{l}/resid", f32(r["resid"]))
    print(f"wrote {OUT.relative_to(ROOT)}  {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden selections of the key-only scorers for tests/test_bound_golden.cpp.

Writes tests/data/kvpress/scorers_v1.h5 (format_version 1): kvpress 0.5.5's KnormPress
(ckv `knorm`) and KeyDiffPress (ckv `keydiff`), alone and inside CriticalKVPress,
AdaKVPress and CriticalAdaKVPress, run by kvpress itself inside HF transformers' prefill
of tiny models (the same harness as families_v1.h5: make_kvpress_goldens.model_kept_sets,
float32, sdpa, a DynamicCache prefill of `tokens` inside `with press(model)`; the kept set
of each layer read back from the compressed cache, or from module.masked_key_indices for
AdaKV). The reference is independent of ckv: kvpress scores the keys the HF model put in
its cache; ckv scores the keys of its own forward pass.

Layout (the layout of families_v1.h5's model cases):
    /               attrs: format_version, generator, kvpress_version, torch_version
    /model_cases/<name>/  attrs: model (path under tests/data/), c, window, kernel, alpha,
                           eps, alpha_safe, budgets (int64, kept per KV head), layers
                           (int64: the layers compared; Gemma 3: its full-attention ones)
        tokens int32 [c]
        kept/<method>/<b> int32 [len(layers), n_kv_head, c]   1 = kept
Only budgets where a float64 run of the same model keeps the same sets are written (no
near-ties a float32 implementation could flip).
"""
import sys
from pathlib import Path

import h5py
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_kvpress_goldens as kg  # noqa: E402 (stubs datasets/fire, imports kvpress)
from kvpress import AdaKVPress, CriticalAdaKVPress, CriticalKVPress, KeyDiffPress, KnormPress  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/data/kvpress/scorers_v1.h5"
ALPHA, EPS, ALPHA_SAFE = 0.5, 1e-4, 0.2


def presses(cr):
    return {
        "knorm": (lambda: KnormPress(compression_ratio=cr), False),
        "keydiff": (lambda: KeyDiffPress(compression_ratio=cr), False),
        "criticalkv(knorm)": (lambda: CriticalKVPress(KnormPress(compression_ratio=cr), EPS, ALPHA), False),
        "adakv(keydiff)": (lambda: AdaKVPress(KeyDiffPress(compression_ratio=cr), ALPHA_SAFE), True),
        "criticalkv(adakv(knorm))": (lambda: CriticalAdaKVPress(KnormPress(compression_ratio=cr), ALPHA_SAFE, EPS,
                                                                ALPHA), True),
    }


def write_model_case(f, name, c, fractions, seed):
    from transformers import AutoModelForCausalLM
    path = ROOT / "tests/data/models" / name
    models = [AutoModelForCausalLM.from_pretrained(str(path), dtype=dt, attn_implementation="sdpa").eval()
              for dt in (torch.float32, torch.float64)]
    ids = [int(x) for x in np.random.default_rng(seed).integers(0, models[0].config.vocab_size, c)]
    g = f.create_group(f"model_cases/{name}")
    g.attrs["model"] = f"models/{name}"
    # window/kernel: unused by these presses; ckv's test reads them for its request.
    for key, val in dict(c=c, window=16, kernel=5, alpha=ALPHA, eps=EPS, alpha_safe=ALPHA_SAFE).items():
        g.attrs[key] = val
    g["tokens"] = np.array(ids, np.int32)
    written, layers = [], None
    for fr in fractions:
        b, cr = max(1, int(c * fr)), 1 - fr
        runs = {label: [kg.model_kept_sets(m, ids, make, masked) for m in models]
                for label, (make, masked) in presses(cr).items()}
        layers = next(iter(runs.values()))[0][1]
        if any(not np.array_equal(r[0][0], r[1][0]) for r in runs.values()):
            print(f"{name}: budget {b} skipped (float32 and float64 kvpress disagree: a near-tie)")
            continue
        for label, r in runs.items():
            g[f"kept/{label}/{b}"] = r[0][0]
        written.append(b)
    assert written, f"{name}: no budget without near-ties"
    g.attrs["budgets"] = np.array(written, np.int64)
    g.attrs["layers"] = np.array(layers, np.int64)
    print(f"{name}: kept sets of {len(presses(0.5))} presses at budgets {written} of {c}")


def main():
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(OUT, "w", libver=("v108", "v110")) as f:
        f.attrs["format_version"] = 1
        f.attrs["generator"] = "tests/reference/make_scorer_goldens.py"
        f.attrs["kvpress_version"] = str(getattr(kg.kvpress, "__version__", "0.5.5"))
        f.attrs["torch_version"] = str(torch.__version__)
        write_model_case(f, "tiny_llama_gqa", 60, [0.3, 0.5, 0.7], 3031)  # GQA, llama RoPE
        write_model_case(f, "tiny_qwen3", 60, [0.3, 0.5, 0.7], 3032)      # q/k norms
        write_model_case(f, "tiny_gemma3_kv", 60, [0.3, 0.5, 0.7], 3033)  # full-attention layers
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

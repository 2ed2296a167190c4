#!/usr/bin/env python3
"""Golden selections of OBCache on SnapKV's window for tests/test_methods_golden.cpp.

Writes tests/data/kvpress/obcache_v1.h5 (format_version 1). OBCache (Gu et al., "OBCache:
Optimal Brain KV Cache Pruning for Efficient Long-Context LLM Inference", arXiv
2510.07651) has no code runnable here; this is a NumPy implementation, written loop by
loop from the Optimal-Brain-Damage scores (docs/BOUND.md "OBCache" gives the source and
the derivation). For query head h, window row r (position p in [c - w, c)) with logits
z_rj = q_r.k_j / sqrt(d) over j <= p, A_r = softmax(z_r), o_r = sum_j A_rj v_j, and a
prefix key i < c - w, the squared output perturbation of pruning token i, summed over r:

    value  A_ri^2 |v_i|^2
    key    (A_ri z_ri)^2 |v_i - o_r|^2
    joint  value + key + 2 A_ri^2 z_ri (|v_i|^2 - v_i . o_r)

then SnapKV's treatment (ckv's snapkv pipeline): pooled over the prefix per query head
(max: -inf padding; avg: zero padding divided by the kernel), the group mean over the KV
head's query heads, the window scored max + 1; the top b per KV head kept (ties: the lower
position).

Cases: synthetic GQA 4/2 (window 16, max pool 7), MHA 3/3 (window 8, avg pool 5), the tiny
GQA model tests/data/models/tiny_llama_gqa (4/2 heads, both layers, on the first 230 bytes of
TEXT as token ids; window 32, max pool 7) and the default model's layers 0, 15, 29 (q/k/v
by `ckv dump`, f16; window 32, max pool 7), on a text no other test uses; the three scores;
three budgets each.

Layout:
    /               attrs: format_version, generator
    /cases/<name>/  attrs: c, n, window, kernel, pool ("max"|"avg"), budgets, source
        layers/<l>/q [n_head, n, d], k, v [n_kv_head, n, d]
        layers/<l>/kept/<score> uint8 [budget, n_kv_head, c], score joint|key|value
"""
import tempfile
from pathlib import Path

import h5py
import numpy as np

from ckv_dump import dump_layers  # noqa: E402 (tests/reference/)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/data/kvpress/obcache_v1.h5"
TEXT = (
    "On the plateau above Karsvik the observatory dome opens only on nights without wind, and "
    "the caretaker records each opening in a ledger bound in grey cloth. The telescope was "
    "ground in 1911 by a lens maker from Lund whose initials, E. M. H., are scratched beside "
    "the eyepiece. Reindeer graze on the slope below and sometimes knock over the rain gauge. "
    "In the cold winter of 1987 the dome froze shut for six weeks, and the astronomer on duty, "
    "Sigrid Halvorsen, measured the comet from the roof with a borrowed theodolite instead. "
)
GZIP = dict(compression="gzip", compression_opts=6, shuffle=True)


def head_scores(q, k, v, c, w, kind):
    """[c - w] summed saliency of one query head's window rows on the prefix."""
    d = q.shape[1]
    prefix = c - w
    s = np.zeros(prefix)
    for p in range(prefix, c):
        z = k[: p + 1].astype(np.float64) @ q[p].astype(np.float64) / np.sqrt(d)
        e = np.exp(z - z.max())
        a = e / e.sum()
        vv = v[: p + 1].astype(np.float64)
        o = a @ vv
        for i in range(prefix):
            vi = vv[i]
            val = a[i] ** 2 * (vi @ vi)
            key = (a[i] * z[i]) ** 2 * ((vi - o) @ (vi - o))
            cross = 2 * a[i] ** 2 * z[i] * (vi @ vi - vi @ o)
            s[i] += {"value": val, "key": key, "joint": val + key + cross}[kind]
    return s


def pool(x, kernel, how):
    pad = kernel // 2
    n = len(x)
    if how == "max":
        return np.array([x[max(0, i - pad): i + pad + 1].max() for i in range(n)])
    return np.array([x[max(0, i - pad): i + pad + 1].sum() / kernel for i in range(n)])


def kept(q, k, v, c, w, kernel, how, kind, budgets):
    n_head, n_kv = q.shape[0], k.shape[0]
    g = n_head // n_kv
    per_head = np.stack([pool(head_scores(q[h], k[h // g], v[h // g], c, w, kind), kernel, how)
                         for h in range(n_head)])
    red = per_head.reshape(n_kv, g, c - w).mean(1)
    scores = np.concatenate([red, np.full((n_kv, w), red.max() + 1)], axis=1)
    out = []
    for b in budgets:
        assert b >= w
        m = np.zeros((n_kv, c), np.uint8)
        for hk in range(n_kv):
            order = np.lexsort((np.arange(c), -scores[hk]))
            m[hk, order[:b]] = 1
        out.append(m)
    return np.stack(out)


def write_case(f, name, layers, c, n, w, kernel, how, budgets, source):
    g = f.create_group(f"cases/{name}")
    for key, val in dict(c=c, n=n, window=w, kernel=kernel).items():
        g.attrs[key] = val
    g.attrs["pool"] = how
    g.attrs["budgets"] = np.array(budgets, np.int64)
    g.attrs["source"] = source
    for l, (q, k, v) in sorted(layers.items()):
        lg = g.create_group(f"layers/{l}")
        for key, val in (("q", q), ("k", k), ("v", v)):
            lg.create_dataset(key, data=val, **GZIP)
        for kind in ("joint", "key", "value"):
            lg[f"kept/{kind}"] = kept(q, k, v, c, w, kernel, how, kind, budgets)


def dumped(model, layers, tokens_or_text, workdir, name):
    return dump_layers(model, layers, tokens_or_text, workdir, name, ("q", "k", "v"))


def main():
    rng = np.random.default_rng(20261202)
    tmp = OUT.with_suffix(".h5.tmp")

    def syn(n_head, n_kv, d, n, peak):
        return ((rng.standard_normal((n_head, n, d)) * peak).astype(np.float32),
                rng.standard_normal((n_kv, n, d)).astype(np.float32),
                (rng.standard_normal((n_kv, n, d)) * rng.uniform(0.2, 3, (1, n, 1))).astype(np.float32))

    with h5py.File(tmp, "w", libver=("v108", "v110")) as f, tempfile.TemporaryDirectory() as work:
        f.attrs["format_version"] = 1
        f.attrs["generator"] = "tests/reference/make_obcache_goldens.py"
        write_case(f, "synthetic_gqa", {0: syn(4, 2, 16, 210, 1.5), 1: syn(4, 2, 16, 210, 3.0)},
                   200, 210, 16, 7, "max", [30, 60, 120], "synthetic")
        write_case(f, "synthetic_mha", {0: syn(3, 3, 8, 150, 2.0)}, 150, 150, 8, 5, "avg", [20, 45, 90], "synthetic")
        # The tiny GQA model (byte-level vocabulary of 256): TEXT's bytes as token ids.
        toks = list(TEXT.encode("ascii"))[:230]
        write_case(f, "tiny_llama_gqa", dumped(str(ROOT / "tests/data/models/tiny_llama_gqa"), [0, 1], toks, work, "tiny"),
                   224, 230, 32, 7, "max", [40, 64, 100], "models/tiny_llama_gqa, the first 230 bytes of TEXT")
        layers = dumped(str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"), [0, 15, 29], TEXT, work, "default")
        n = next(iter(layers.values()))[0].shape[1]
        c = n - 6
        write_case(f, "default_model", layers, c, n, 32, 7, "max", [40, 64, 100],
                   "models/SmolLM2-135M-Instruct.Q4_1.gguf, TEXT (ckv tokenizer)")
    tmp.replace(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

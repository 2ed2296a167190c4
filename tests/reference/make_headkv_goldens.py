#!/usr/bin/env python3
"""Golden selections of HeadKV for tests/test_methods_golden.cpp.

Writes tests/data/kvpress/headkv_v1.h5 (format_version 1). HeadKV's code
(github.com/FYYFU/HeadKV at 3ec9653, headkv/snapkv_utils.py, ReasonSnapKVCluster) is not
runnable here (flash-attention hijacks of a CUDA Llama); this is a NumPy implementation
of its rule, written from that code and the paper (Fu et al., ICLR 2025, arXiv
2410.19258, §3.2 eq. for the head-level budget allocation), with ckv's one stated
adaptation to GQA (the code runs per query head on repeated keys; ckv selects per KV head):

    scores s[l][h] (the profile); GQA: s_kv[l][g] = mean over g's query heads
    s_hat = s / sum(s);  s_hat = s_hat ** temp;  s_hat /= sum(s_hat)
    B = budget - window                                   (base_capacity - window_size)
    pool = (B // beta) * n_layer * n_kv_head;  min = B - B // beta    (Python float //)
    cap[l][g] = round_half_even(s_hat[l][g] * pool + min)             (torch.round)
    no compression when B > c - window; kept = window + top cap of the prefix by the
    snapkv score: the window rows' softmax (causal), mean over the rows, on the prefix,
    max-pooled (kernel 7, -inf padding), then the group mean (ckv's --gqa-reduce mean);
    ties go to the lower position (a stable sort). Below the window (budget <= window: no
    pool; the code would slice with negative capacities) ckv keeps the last b entries.

Cases: synthetic GQA (4 layers of which 0 and 3 are stored, a query-head profile), MHA (a
KV-head-width profile), each under two (beta, temp) settings; the tiny GQA model
tests/data/models/tiny_llama_gqa (2 layers, 4/2 heads, both layers, on the first 230 bytes of
TEXT as token ids) with a fixed KV-head-width profile [2, 2] drawn here (uniform on
[0.05, 1), seed TINY_PROFILE_SEED; not a profile ckv computed, so the allocation is checked
on numbers independent of ckv); and the default model's layers 0, 15, 29 (q/k recorded by
`ckv dump`, f16) with the committed profile data/headkv/SmolLM2-135M-Instruct.retrieval.json,
on a text no other test uses.

Layout:
    /               attrs: format_version, generator, headkv_commit
    /cases/<name>/  attrs: c, n, window, kernel, n_layer, budgets (int64), source
        profile     float64 [n_layer, width] (width: n_head or n_kv_head)
        layers/<l>/q [n_head, n, d], k [n_kv_head, n, d]
        layers/<l>/kept/beta=<beta>,temp=<temp> uint8 [budget, n_kv_head, c]
"""
import json
import tempfile
from pathlib import Path

import h5py
import numpy as np

from ckv_dump import dump_layers  # noqa: E402 (tests/reference/)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/data/kvpress/headkv_v1.h5"
PROFILE = ROOT / "data/headkv/SmolLM2-135M-Instruct.retrieval.json"
HEADKV_COMMIT = "3ec96530a9fd2063d8c3254be38534934ef90d9c"
TINY_PROFILE_SEED = 20261217  # the tiny model's fixed [n_layer, n_kv_head] profile
TEXT = (
    "The glassblowers of Saint-Aubrac work only in the cool hours before sunrise, because the "
    "furnace heats the narrow street until the cobbles shimmer. Their guild hall keeps a single "
    "green bottle from 1788 in a locked cabinet, and every apprentice must draw it from memory "
    "before being admitted. A ferryman named Joaquim Ferreira carries the finished crates across "
    "the river on a flat barge painted with white stars. In the wet spring of 1962 the river "
    "carried away the lower workshop, and the guild rebuilt it on stilts of chestnut wood. "
)
GZIP = dict(compression="gzip", compression_opts=6, shuffle=True)


def snapkv_scores(q, k, c, w, kernel):
    """[n_kv, c - w] KV-head snapkv scores as HeadKV's calcul_attn_sore, group-mean reduced."""
    n_head, _, d = q.shape
    n_kv = k.shape[0]
    g = n_head // n_kv
    prefix = c - w
    pad = kernel // 2
    out = np.zeros((n_head, prefix))
    for h in range(n_head):
        kk = k[h // g, :c].astype(np.float64)
        logits = q[h, prefix:c].astype(np.float64) @ kk.T / np.sqrt(d)  # [w, c]
        for r in range(w):
            logits[r, prefix + r + 1:] = -np.inf  # causal inside the window
        e = np.exp(logits - logits.max(1, keepdims=True))
        a = e / e.sum(1, keepdims=True)
        mean = a[:, :prefix].mean(0)
        out[h] = [mean[max(0, i - pad): i + pad + 1].max() for i in range(prefix)]
    return out.reshape(n_kv, g, prefix).mean(1)


def caps(profile, n_head, n_kv, budget, w, c, beta, temp):
    s = np.asarray(profile, np.float64)
    if s.shape[1] == n_head and n_head != n_kv:
        s = s.reshape(s.shape[0], n_kv, n_head // n_kv).mean(2)
    base = budget - w
    if base > c - w:
        return None
    hat = s / s.sum()
    hat = hat ** temp
    hat = hat / hat.sum()
    share = base // beta
    pool = share * s.shape[0] * s.shape[1]
    return np.round(hat * pool + (base - share)).astype(np.int64)


def kept(q, k, profile, layer, c, w, kernel, budget, beta, temp):
    n_head, n_kv = q.shape[0], k.shape[0]
    m = np.ones((n_kv, c), np.uint8)
    if budget <= w:  # ckv's rule below the window (no pool): the last b entries, as snapkv
        m[:, : c - budget] = 0
        return m
    cap = caps(profile, n_head, n_kv, budget, w, c, beta, temp)
    if cap is None:
        return m
    sc = snapkv_scores(q, k, c, w, kernel)
    m[:, : c - w] = 0
    for g in range(n_kv):
        order = np.argsort(-sc[g], kind="stable")
        m[g, order[: max(0, cap[layer, g])]] = 1
    return m


SETTINGS = [(1.2, 1.0), (2.0, 0.5)]


def write_case(f, name, layers, profile, c, n, w, kernel, budgets, n_layer, source, settings=SETTINGS):
    g = f.create_group(f"cases/{name}")
    for key, val in dict(c=c, n=n, window=w, kernel=kernel, n_layer=n_layer).items():
        g.attrs[key] = val
    g.attrs["budgets"] = np.array(budgets, np.int64)
    g.attrs["source"] = source
    g["profile"] = np.asarray(profile, np.float64)
    for l, (q, k) in sorted(layers.items()):
        lg = g.create_group(f"layers/{l}")
        lg.create_dataset("q", data=q, **GZIP)
        lg.create_dataset("k", data=k, **GZIP)
        for beta, temp in settings:
            lg[f"kept/beta={beta:g},temp={temp:g}"] = np.stack(
                [kept(q, k, profile, l, c, w, kernel, b, beta, temp) for b in budgets])


def dumped(model, layers, tokens_or_text, workdir, name):
    return dump_layers(model, layers, tokens_or_text, workdir, name, ("q", "k"))


def main():
    rng = np.random.default_rng(20261201)
    tmp = OUT.with_suffix(".h5.tmp")
    with h5py.File(tmp, "w", libver=("v108", "v110")) as f, tempfile.TemporaryDirectory() as work:
        f.attrs["format_version"] = 1
        f.attrs["generator"] = "tests/reference/make_headkv_goldens.py"
        f.attrs["headkv_commit"] = HEADKV_COMMIT

        def syn(n_head, n_kv, d, n, peak):
            return ((rng.standard_normal((n_head, n, d)) * peak).astype(np.float32),
                    rng.standard_normal((n_kv, n, d)).astype(np.float32))

        # GQA 4/2, 4 layers (0 and 3 stored), a query-head profile with zeros and a peak.
        prof = rng.uniform(0, 1, (4, 4)) ** 3
        prof[1, 2] = 0
        prof[3, 0] = 2.5
        write_case(f, "synthetic_gqa", {0: syn(4, 2, 16, 260, 1.5), 3: syn(4, 2, 16, 260, 2.5)}, prof,
                   250, 260, 16, 7, [40, 90, 160], 4, "synthetic")
        # MHA 3/3, 2 layers, a KV-width profile; budget 10 < window (no pool: b each, as snapkv).
        write_case(f, "synthetic_mha", {1: syn(3, 3, 8, 200, 2.0)}, rng.uniform(0.1, 1, (2, 3)),
                   200, 200, 16, 7, [10, 60, 190], 2, "synthetic")
        # The tiny GQA model (byte-level vocabulary of 256): TEXT's bytes as token ids, a fixed
        # random KV-head-width profile (its own generator, so the cases above stay as they were).
        tiny_profile = np.random.default_rng(TINY_PROFILE_SEED).uniform(0.05, 1, (2, 2))
        toks = list(TEXT.encode("ascii"))[:230]
        write_case(f, "tiny_llama_gqa", dumped(str(ROOT / "tests/data/models/tiny_llama_gqa"), [0, 1], toks, work, "tiny"),
                   tiny_profile, 224, 230, 32, 7, [40, 64, 100], 2,
                   f"models/tiny_llama_gqa, the first 230 bytes of TEXT, profile uniform [0.05, 1) seed {TINY_PROFILE_SEED}")
        profile = json.loads(PROFILE.read_text())
        layers = dumped(str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"), [0, 15, 29], TEXT, work, "default")
        n = next(iter(layers.values()))[0].shape[1]
        c = n - 6
        write_case(f, "default_model", layers, profile["scores"], c, n, 32, 7, [40, 64, 100], 30,
                   "models/SmolLM2-135M-Instruct.Q4_1.gguf, TEXT (ckv tokenizer), " + PROFILE.name)
    tmp.replace(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

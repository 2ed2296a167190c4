#!/usr/bin/env python3
"""Golden values of `ckv bound`'s protocol options for tests/test_protocol_golden.cpp.

Writes tests/data/protocol/protocol_v1.h5 (format_version 1). NumPy and h5py only: the
selections and metrics are written here from docs/MATH.md (sections 1-4) and
docs/BOUND.md ("Protocol", the tie rules), not by calling ckv's analysis code. The inputs
are dumps of the tiny GQA test model made by the ckv binary (`ckv dump --what
q,k,v,logits,wo --dtype f32`): the post-RoPE q/k/v, the last position's logits and o_proj
of every layer. From them, for each protocol case:

* --eval question | last | first-decode (the greedy token = argmax of the dumped
  logits, then a second dump of the prompt plus that token),
* --compress context | prompt (evictable [0, context_end) or the whole prompt),
* every --nu-min reading (all, no-sink, stage2, stage2-partial: all four theta_rel
  columns, and the chosen one in theta_rel / nu_min),

the kept sets of attn, criticalkv(attn), snapkv and criticalkv(snapkv) (window 8, max
pool 5, alpha 0.5, eps 1e-4, group-mean scores and nu) at budgets 10 %, 25 %, 50 % of the
evictable entries (10 % is below the window: the most recent window entries win the
tie), and the query-mean metrics of every (method, budget, layer, query head).

    CKV_BINARY=build/ckv python3 tests/reference/make_protocol_golden.py

Layout:

    /                 attrs: format_version 1, generator, model (test-data path), tokens
                      int32 [n], context_end, window, kernel, pool, alpha, eps, budgets (the
                      fractions), methods, metrics (names of the last axis below)
    /cases/<name>/    attrs: eval, compress, nu_min, c, eval_rows int64, eval_token,
                      budgets int64 (kept counts), below_window int64
        kept_mask     uint8   [method, budget, layer, kv_head, c]
        metrics_mean  float64 [method, budget, layer, head, metric]
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/data/protocol/protocol_v1.h5"
MODEL = "models/tiny_llama_gqa"  # under tests/data
WINDOW, KERNEL, POOL, ALPHA, EPS = 8, 5, "max", 0.5, 1e-4
FRACTIONS = [0.1, 0.25, 0.5]
METHODS = ["attn", "criticalkv(attn)", "snapkv", "criticalkv(snapkv)"]
METRICS = ["L1", "theta_hat", "theta_rel", "S", "S1", "C", "nu_min", "nu_min_over_C", "kept",
           "theta_rel_all", "theta_rel_no_sink", "theta_rel_stage2", "theta_rel_stage2_partial"]
READINGS = ["all", "no-sink", "stage2", "stage2-partial"]
# (name, eval, compress, nu_min): every value of each flag at least once.
CASES = [
    ("question_context_all", "question", "context", "all"),
    ("last_context_nosink", "last", "context", "no-sink"),
    ("decode_context_stage2", "first-decode", "context", "stage2"),
    ("decode_prompt_partial", "first-decode", "prompt", "stage2-partial"),
    ("last_prompt_all", "last", "prompt", "all"),
]


def dump(binary, tokens, path):
    tok = Path(path).with_suffix(".txt")
    tok.write_text(" ".join(map(str, tokens)))
    subprocess.run([binary, "-q", "dump", "--model", str(ROOT / "tests/data" / MODEL), "--tokens", str(tok),
                    "--what", "q,k,v,logits,wo", "--dtype", "f32", "-t", "1", "-o", str(path), "--force"],
                   check=True)
    f = h5py.File(path, "r")
    rec = f["records"][list(f["records"].keys())[0]]
    layers = sorted(int(x) for x in rec["layers"].keys())
    out = {"logits": rec["logits_last"][()].astype(np.float64), "layers": []}
    for l in layers:
        g = rec[f"layers/{l}"]
        out["layers"].append({k: g[k][()].astype(np.float64) for k in ("q", "k", "v")}
                             | {"wo": f[f"model/layers/{l}/W_O"][()].astype(np.float64)})
    f.close()
    return out


def attention(q, k, p):
    """docs/MATH.md §1: causal softmax(q K^T / sqrt(d)) of the query at position p, keys [0, p]."""
    logits = k[: p + 1] @ q[p] / np.sqrt(q.shape[1])
    e = np.exp(logits - logits.max())
    return e / e.sum()


def pool(x, kernel, kind):
    pad = kernel // 2
    out = np.empty_like(x)
    for i in range(len(x)):
        win = x[max(0, i - pad): i + pad + 1]
        out[i] = win.max() if kind == "max" else win.sum() / kernel
    return out


def top(score, k, exclude=(), recent_from=None):
    """The k highest scores; ties: lower position first, but inside [recent_from, ...) the
    most recent first (docs/BOUND.md, budgets below the window)."""
    rf = len(score) if recent_from is None else recent_from
    tie = lambda i: (0, -i) if i >= rf else (1, i)  # noqa: E731
    order = sorted((i for i in range(len(score)) if i not in exclude), key=lambda i: (-score[i],) + tie(i))
    return order[:max(0, k)]


def budget(c, fraction):
    # kvpress compute_n_kept with compression_ratio = 1 - fraction, in its float arithmetic
    # (int(40 * (1 - 0.9)) = 3, not 4).
    return max(1, int(c * (1 - (1 - fraction))))


def select(method, score, nu, b, recent_from):
    """(kept, stage1) of one KV head (docs/MATH.md §4, Algorithm 1)."""
    if method.startswith("criticalkv("):
        b1 = max(1, int(b * ALPHA))
        stage1 = top(score, b1, recent_from=recent_from)
        weighted = (score + EPS) * nu
        stage2 = top(weighted, b - b1, exclude=set(stage1), recent_from=recent_from)
        return sorted(stage1 + stage2), stage1
    order = top(score, b, recent_from=recent_from)
    return sorted(order), order[:max(1, int(b * ALPHA))]


def head_metrics(A, keep, stage1_set, c, v, w_h, nu):
    """docs/MATH.md §3 for one query (A over keys [0, p]).

    keep/stage1 cover the context, the rest is kept."""
    p1 = len(A)
    kept = np.zeros(p1, bool)
    kept[list(keep)] = True
    kept[c:] = True
    st1 = np.zeros(p1, bool)
    st1[list(stage1_set)] = True
    st1[c:] = True
    nu = nu[:p1]
    S, S1 = A[kept].sum(), A[st1].sum()
    diff = ((A - np.where(kept, A, 0.0) / S) @ v[:p1]) @ w_h
    C = (A * nu).sum()
    f1 = 2 - 1 / S1
    kept_value = (A * nu)[kept].sum()
    cand = np.ones(p1, bool)
    cand[c:] = False
    cand[st1] = False
    nu2 = nu[:c][cand[:c]].min() if cand[:c].any() else nu.min()
    nu_all, nu_ns = nu.min(), (nu[1:].min() if p1 > 1 else nu[0])
    s2 = A[kept & ~st1].sum()
    rel = {"all": C - f1 * nu_all * S, "no-sink": C - f1 * nu_ns * S, "stage2": C - f1 * nu2 * S,
           "stage2-partial": C - f1 * ((A * nu)[st1].sum() + nu2 * s2)}
    mins = {"all": nu_all, "no-sink": nu_ns, "stage2": nu2, "stage2-partial": nu2}
    return {"L1": np.abs(diff).sum(), "theta_hat": C - f1 * kept_value, "S": S, "S1": S1, "C": C,
            "rel": rel, "mins": mins, "kept": float(len(keep))}


def run_case(d, n_prompt, context_end, ev, compress, reading, decoded):
    c = n_prompt if compress == "prompt" else context_end
    rows = {"question": list(range(context_end, n_prompt)) or [n_prompt - 1], "last": [n_prompt - 1],
            "first-decode": [n_prompt]}[ev]
    budgets = [budget(c, f) for f in FRACTIONS]
    n_layer = len(d["layers"])
    n_head, n_kv = d["layers"][0]["q"].shape[0], d["layers"][0]["k"].shape[0]
    group, dh = n_head // n_kv, d["layers"][0]["q"].shape[2]
    kept_mask = np.zeros((len(METHODS), len(budgets), n_layer, n_kv, c), np.uint8)
    metrics = np.zeros((len(METHODS), len(budgets), n_layer, n_head, len(METRICS)))
    for li, L in enumerate(d["layers"]):
        q, k, v, wo = L["q"], L["k"], L["v"], L["wo"]
        w = [wo[:, h * dh:(h + 1) * dh].T for h in range(n_head)]            # W_h [d, D]
        nu = [np.abs(v[h // group] @ w[h]).sum(axis=1) for h in range(n_head)]  # [seq]
        A = [[attention(q[h], k[h // group], p) for p in rows] for h in range(n_head)]
        # scores per query head over [0, c), then the group mean (docs/MATH.md §4)
        attn_h = np.array([np.mean([a[:c] for a in A[h]], axis=0) for h in range(n_head)])
        snap_h = np.array([pool(np.mean([attention(q[h], k[h // group], p)[: c - WINDOW]
                                         for p in range(c - WINDOW, c)], axis=0), KERNEL, POOL)
                           for h in range(n_head)])
        red = lambda x: x.reshape(n_kv, group, -1).mean(axis=1)  # noqa: E731
        attn_s, snap_s = red(attn_h), red(snap_h)
        snap_s = np.concatenate([snap_s, np.full((n_kv, WINDOW), snap_s.max() + 1.0)], axis=1)
        nu_g = red(np.array([x[:c] for x in nu]))
        for mi, m in enumerate(METHODS):
            snap = "snapkv" in m
            for bi, b in enumerate(budgets):
                for g in range(n_kv):
                    score = (snap_s if snap else attn_s)[g]
                    keep, stage1 = select(m, score, nu_g[g], b, c - WINDOW if snap else None)
                    kept_mask[mi, bi, li, g, keep] = 1
                    for h in range(g * group, (g + 1) * group):
                        per = [head_metrics(A[h][qi], keep, stage1, c, v[g], w[h], nu[h]) for qi in range(len(rows))]
                        vals = {key: np.mean([x[key] for x in per]) for key in ("L1", "theta_hat", "S", "S1", "C", "kept")}
                        for r in READINGS:
                            vals["theta_rel_" + r.replace("-", "_")] = np.mean([x["rel"][r] for x in per])
                        vals["theta_rel"] = vals["theta_rel_" + reading.replace("-", "_")]
                        vals["nu_min"] = np.mean([x["mins"][reading] for x in per])
                        vals["nu_min_over_C"] = np.mean([x["mins"][reading] / x["C"] for x in per])
                        metrics[mi, bi, li, h] = [vals[name] for name in METRICS]
    return dict(c=c, eval_rows=np.array(rows, np.int64), eval_token=decoded if ev == "first-decode" else -1,
                budgets=np.array(budgets, np.int64),
                below_window=np.array([int(b < WINDOW) for b in budgets], np.int64)), kept_mask, metrics


def main():
    binary = os.environ.get("CKV_BINARY", str(ROOT / "build/ckv"))
    # A fixed prompt: 40 context tokens, 8 question tokens; its greedy next token must win by
    # a clear margin so that rounding in another build cannot change it.
    rng = np.random.default_rng(16)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(50):
            tokens = [int(x) for x in rng.integers(3, 256, 48)]
            d = dump(binary, tokens, Path(tmp) / "prompt.h5")
            top2 = np.sort(d["logits"])[-2:]
            if top2[1] - top2[0] > 0.05:
                break
        else:
            sys.exit("no prompt with a clear greedy token")
        decoded = int(np.argmax(d["logits"]))
        d_dec = dump(binary, tokens + [decoded], Path(tmp) / "decoded.h5")
    n, context_end = len(tokens), 40
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(OUT, "w", libver=("v108", "v110")) as f:
        f.attrs["format_version"] = 1
        f.attrs["generator"] = "tests/reference/make_protocol_golden.py"
        f.attrs["model"] = MODEL
        f.attrs["tokens"] = np.array(tokens, np.int32)
        f.attrs["context_end"] = context_end
        for key, val in dict(window=WINDOW, kernel=KERNEL, alpha=ALPHA, eps=EPS).items():
            f.attrs[key] = val
        f.attrs["pool"] = POOL
        f.attrs["budgets"] = ",".join(f"{x:g}" for x in FRACTIONS)
        f.attrs["methods"] = METHODS
        f.attrs["metrics"] = METRICS
        for name, ev, compress, reading in CASES:
            attrs, kept, metrics = run_case(d_dec if ev == "first-decode" else d, n, context_end, ev, compress,
                                            reading, decoded)
            g = f.create_group(f"cases/{name}")
            g.attrs["eval"], g.attrs["compress"], g.attrs["nu_min"] = ev, compress, reading
            for key, val in attrs.items():
                g.attrs[key] = val
            g["kept_mask"], g["metrics_mean"] = kept, metrics
    print(f"wrote {OUT} (greedy token {decoded})")


if __name__ == "__main__":
    main()

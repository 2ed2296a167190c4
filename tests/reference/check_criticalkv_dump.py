#!/usr/bin/env python3
"""Recompute snapkv and criticalkv(snapkv) selections and their actual L in NumPy.

An audit of `ckv bound` on a real model, written from docs/MATH.md (sections
1-4), not from the C++: given a dump of one record (`ckv dump --what q,k,v,attn,wo
--dtype f32 --attn-rows all`) and the `ckv bound` HDF5 of the same record and model, it
recomputes for a few layers and every query head

* the evaluation queries' attention A from q and k (compared with the dumped attn),
* the snapkv scores (window rows' attention over the keys before the window, averaged
  over the window rows, max- or avg-pooled, averaged over the query heads of a KV head,
  the window itself scored above every other entry),
* the kept sets of snapkv and criticalkv(snapkv) (stage 1: floor(alpha*b) by score, at
  least 1; stage 2: the rest by (score + eps) * nu, nu the group mean of ||V W_h||_1),
* the actual L1 = ||(A - A') V W_h||_1 averaged over the evaluation queries,

and compares them with the bound file's kept_mask and metrics_mean. W_h comes from the
GGUF through the `gguf` package's own dequantisation when --model is given (independent
of ckv), else from the dump's W_O. It also counts, per budget, the heads where
criticalkv's L is below, equal to (same kept set) or above snapkv's.

    python3 tests/reference/check_criticalkv_dump.py --dump d.h5 --bound b.h5 --record 0 \
        --layers 0,5,15,29 [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]

Exit status 1 when a kept set differs or L differs by more than --rtol (default 1e-3:
the dump stores float32 q/k/v that ckv computed in float32; ties in the scores are
broken towards the lower position, as ckv documents).
"""
import argparse
import json
import sys

import h5py
import numpy as np


def softmax_rows(logits):
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def causal_attention(q, k, rows):
    # q [n, d], k [n, d]; rows: query positions -> A [len(rows), n], 0 after each row.
    d = q.shape[1]
    logits = q[rows] @ k.T / np.sqrt(d)
    n = k.shape[0]
    mask = np.arange(n)[None, :] > np.asarray(rows)[:, None]
    logits = np.where(mask, -np.inf, logits)
    return softmax_rows(logits)


def pool(x, kernel, kind):
    pad = kernel // 2
    if kind == "max":
        xp = np.concatenate([np.full(pad, -np.inf), x, np.full(pad, -np.inf)])
        return np.array([xp[i:i + kernel].max() for i in range(len(x))])
    xp = np.concatenate([np.zeros(pad), x, np.zeros(pad)])
    return np.array([xp[i:i + kernel].sum() / kernel for i in range(len(x))])


def top(score, k, exclude=()):
    # Highest first; equal scores by lower position (ckv's documented tie order).
    order = sorted((i for i in range(len(score)) if i not in exclude), key=lambda i: (-score[i], i))
    return order[:k]


def gguf_wo(path, layer):
    import gguf
    reader = gguf.GGUFReader(path)
    for t in reader.tensors:
        if t.name == f"blk.{layer}.attn_output.weight":
            w = gguf.quants.dequantize(t.data, t.tensor_type)
            return np.asarray(w, dtype=np.float64).reshape(int(t.shape[1]), int(t.shape[0]))
    sys.exit(f"{path}: no blk.{layer}.attn_output.weight")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--bound", required=True)
    ap.add_argument("--record", default="0")
    ap.add_argument("--layers", default="0,15,29")
    ap.add_argument("--model", help="GGUF to dequantise o_proj from (else the dump's W_O)")
    ap.add_argument("--rtol", type=float, default=1e-3)
    a = ap.parse_args()

    bf = h5py.File(a.bound, "r")
    settings = json.loads(bf.attrs["settings"])
    methods = [m.decode() if isinstance(m, bytes) else str(m) for m in bf.attrs["methods"]]
    metric_names = [m.decode() if isinstance(m, bytes) else str(m) for m in bf.attrs["metrics"]]
    i_snap, i_crit = methods.index("snapkv"), methods.index("criticalkv(snapkv)")
    i_l1 = metric_names.index("L1")
    brec = bf[f"records/{a.record}"]
    c = int(brec.attrs["context_end"])
    eval_rows = [int(x) for x in brec.attrs["eval_rows"]]
    budgets = [int(x) for x in brec.attrs["budgets"]]
    bound_layers = [int(x) for x in brec.attrs["layers"]]
    w, kernel, kind = int(settings["window"]), int(settings["kernel"]), settings["pool"]
    alpha, eps = float(settings["alpha"]), float(settings["eps"])

    df = h5py.File(a.dump, "r")
    drec = df[f"records/{a.record}"]
    failures = 0
    worst = 0.0  # largest relative L1 difference seen
    counts = {b: {"lower": 0, "tie_same_set": 0, "tie_diff_set": 0, "higher": 0} for b in budgets}
    for layer in [int(x) for x in a.layers.split(",")]:
        dl = drec[f"layers/{layer}"]
        q = dl["q"][:].astype(np.float64)  # [head, pos, d]
        k = dl["k"][:].astype(np.float64)  # [kv_head, pos, d]
        v = dl["v"][:].astype(np.float64)
        n_head, n, d = q.shape
        n_kv = k.shape[0]
        group = n_head // n_kv
        wo = gguf_wo(a.model, layer) if a.model else df[f"model/layers/{layer}/W_O"][:].astype(np.float64)
        li = bound_layers.index(layer)
        # Per query head: A at the evaluation rows, the window's attention, nu.
        A_eval, snap_head, nu = [], [], []
        for h in range(n_head):
            g = h // group
            A_eval.append(causal_attention(q[h], k[g], eval_rows))
            win = causal_attention(q[h], k[g], list(range(c - w, c)))[:, :c - w]
            snap_head.append(pool(win.mean(axis=0), kernel, kind))
            W_h = wo[:, h * d:(h + 1) * d].T  # [d, D]
            nu.append(np.abs(v[g] @ W_h).sum(axis=1))  # [n]
        dumped = dl["attn"][:] if "attn" in dl else None
        if dumped is not None:
            rows = list(drec["attn_rows"][:])
            idx = [rows.index(r) for r in eval_rows]
            err = max(np.abs(dumped[h][idx] - A_eval[h]).max() for h in range(n_head))
            print(f"layer {layer}: max |A_numpy - A_dump| = {err:.2e}")
        for g in range(n_kv):
            hs = range(g * group, (g + 1) * group)
            s = np.mean([snap_head[h] for h in hs], axis=0)
            score = np.concatenate([s, np.full(w, s.max() + 1.0)])  # the window is always kept first
            nu_g = np.mean([nu[h][:c] for h in hs], axis=0)
            for bi, b in enumerate(budgets):
                snap = set(top(score, b))
                b1 = max(1, int(b * alpha))
                stage1 = top(score, b1)
                weighted = (score + eps) * nu_g
                crit = set(stage1) | set(top(weighted, b - b1, exclude=set(stage1)))
                for name, mi, sel in (("snapkv", i_snap, snap), ("criticalkv(snapkv)", i_crit, crit)):
                    ck = set(np.flatnonzero(brec["kept_mask"][mi, bi, li, g]).tolist())
                    if ck != sel:
                        failures += 1
                        print(f"  layer {layer} kv {g} b {b} {name}: kept sets differ "
                              f"(numpy-only {sorted(sel - ck)[:8]}, ckv-only {sorted(ck - sel)[:8]})")
                for h in hs:
                    W_h = wo[:, h * d:(h + 1) * d].T
                    Ls = []
                    for mi, sel in ((i_snap, snap), (i_crit, crit)):
                        keep = np.zeros(n, bool)
                        keep[list(sel)] = True
                        keep[c:] = True  # question entries are never evicted
                        L = []
                        for qi in range(len(eval_rows)):
                            A = A_eval[h][qi]
                            A2 = np.where(keep, A, 0.0)
                            A2 = A2 / A2.sum()  # Theorem 3.2
                            L.append(np.abs(((A - A2) @ v[g]) @ W_h).sum())
                        L = float(np.mean(L))
                        Ls.append(L)
                        ours = float(brec["metrics_mean"][mi, bi, li, h, i_l1])
                        worst = max(worst, abs(ours - L) / max(abs(L), 1e-6))
                        if abs(ours - L) > a.rtol * max(abs(L), 1e-6):
                            failures += 1
                            print(f"  layer {layer} head {h} b {b} {methods[mi]}: L1 numpy {L:.6g} ckv {ours:.6g}")
                    cnt = counts[b]
                    if snap == crit:
                        cnt["tie_same_set"] += 1
                    elif Ls[1] < Ls[0]:
                        cnt["lower"] += 1
                    elif Ls[1] == Ls[0]:
                        cnt["tie_diff_set"] += 1
                    else:
                        cnt["higher"] += 1
    print(f"window {w}, pool {kind}/{kernel}, c {c}, {len(eval_rows)} evaluation queries, layers {a.layers}")
    print(f"{'budget':>8} {'lower':>6} {'same set':>9} {'higher':>7}  (criticalkv(snapkv) L vs snapkv L, heads)")
    for b in budgets:
        cnt = counts[b]
        print(f"{b:>8} {cnt['lower']:>6} {cnt['tie_same_set'] + cnt['tie_diff_set']:>9} {cnt['higher']:>7}")
    print(f"largest relative L1 difference numpy vs ckv: {worst:.2e}")
    print("OK: kept sets and L1 agree" if failures == 0 else f"FAIL: {failures} disagreements")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

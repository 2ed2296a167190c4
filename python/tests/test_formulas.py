"""ckv.bound, ckv.select and ckv.value_norms on small random arrays, checked against numpy
recomputations of docs/MATH.md's formulas (the paper's §3): nu = ‖v W_h‖, the actual
perturbation L of the kept set ckv chose, S, C and Theorem 3.3's theta, and the invariant
L <= theta. Needs no model."""
import numpy as np
import pytest

import ckv

H, G, N, D, DM = 4, 2, 48, 8, 16  # query heads, KV heads, positions, d_head, d_model
C = 36                             # context end: rows 36..47 are the evaluation queries


@pytest.fixture(scope="module")
def arrays():
    rng = np.random.default_rng(7)
    q = rng.standard_normal((H, N, D)).astype(np.float32)
    k = rng.standard_normal((G, N, D)).astype(np.float32)
    v = rng.standard_normal((G, N, D)).astype(np.float32)
    wo = (rng.standard_normal((DM, H * D)) / 4).astype(np.float32)
    return q, k, v, wo


def causal_softmax(q, k, p):
    logits = (k[: p + 1].astype(np.float64) @ q.astype(np.float64)) / np.sqrt(q.shape[-1])
    e = np.exp(logits - logits.max())
    return e / e.sum()


def w_h(wo, h):
    return wo[:, h * D:(h + 1) * D].T.astype(np.float64)  # [d_head, d_model]


def test_value_norms(arrays):
    _, _, v, wo = arrays
    l1, l2 = ckv.value_norms(v, wo, H)
    assert l1.shape == (H, N) and l2.shape == (H, N)
    for h in range(H):
        p = v[h // (H // G)].astype(np.float64) @ w_h(wo, h)
        np.testing.assert_allclose(l1[h], np.abs(p).sum(axis=1), rtol=1e-5)
        np.testing.assert_allclose(l2[h], np.linalg.norm(p, axis=1), rtol=1e-5)


@pytest.mark.parametrize("method", ["snapkv", "h2o", "attn", "criticalkv(snapkv)", "adakv(snapkv)", "streaming"])
def test_bound_matches_the_formulas(arrays, method):
    q, k, v, wo = arrays
    res = ckv.bound(q, k, v, wo, context_end=C, methods=[method], budgets=[0.25, 12], window=8, h2o_rows=16)
    assert res.budgets == [ckv.budget_from_fraction(C, 0.25), 12] == [9, 12]
    assert res.eval_rows == list(range(C, N))
    assert res.metrics.shape == (1, 2, H, N - C, len(res.metric_names))
    assert res.kept_mask.shape == (1, 2, G, C)
    group = H // G
    for b in range(2):
        for h in range(H):
            kept = res.kept_mask[0, b, h // group].astype(bool)
            if method != "adakv(snapkv)":
                assert kept.sum() == res.budgets[b]
            wh = w_h(wo, h)
            vals = v[h // group].astype(np.float64)
            nu = np.abs(vals @ wh).sum(axis=1)
            for qi, p in enumerate(res.eval_rows):
                a = causal_softmax(q[h, p], k[h // group], p)  # [p+1]
                keep = np.ones(p + 1, bool)
                keep[:C] = kept
                s = a[keep].sum()
                a_new = np.where(keep, a, 0) / s
                diff = (a - a_new) @ vals[: p + 1] @ wh
                c_value = (a * nu[: p + 1]).sum()
                theta = c_value - (2 - 1 / s) * (a * nu[: p + 1])[keep].sum()
                row = dict(zip(res.metric_names, res.metrics[0, b, h, qi]))
                np.testing.assert_allclose(row["L1"], np.abs(diff).sum(), rtol=1e-4, atol=1e-6)
                np.testing.assert_allclose(row["L2"], np.linalg.norm(diff), rtol=1e-4, atol=1e-6)
                np.testing.assert_allclose(row["S"], s, rtol=1e-5)
                np.testing.assert_allclose(row["C"], c_value, rtol=1e-5)
                np.testing.assert_allclose(row["theta"], theta, rtol=1e-4, atol=1e-6)
                np.testing.assert_allclose(row["nu_min"], nu[: p + 1].min(), rtol=1e-5)
                assert row["kept"] == kept.sum()
                assert row["L1"] <= row["theta"] + 1e-6


@pytest.mark.parametrize("method", ["snapkv", "criticalkv(snapkv)", "streaming"])
def test_a_sliding_window_layer_keeps_only_what_its_window_holds(arrays, method):
    """sliding_window=W: the first evaluation query (row C) sees (C - W, C]; the methods
    keep min(budget, held) of the held entries [C - W + 1, C), and L1 is over each query's
    window (docs/MODELS.md "Sliding-window attention")."""
    q, k, v, wo = arrays
    W = 20
    held_from = C - W + 1
    res = ckv.bound(q, k, v, wo, context_end=C, methods=[method], budgets=[9, 30], window=8, h2o_rows=16,
                    sliding_window=W)
    group = H // G
    for b, want in enumerate([9, C - held_from]):  # 30 > the 19 held entries: all of them
        for h in range(H):
            kept = res.kept_mask[0, b, h // group].astype(bool)
            assert not kept[:held_from].any()
            assert kept.sum() == want
            vals = v[h // group].astype(np.float64)
            for qi, p in enumerate(res.eval_rows):
                lo = p - W + 1
                logits = k[h // group][lo:p + 1].astype(np.float64) @ q[h, p].astype(np.float64) / np.sqrt(D)
                a = np.exp(logits - logits.max())
                a /= a.sum()
                keep = np.ones(p + 1 - lo, bool)
                keep[:C - lo] = kept[lo:]
                a_new = np.where(keep, a, 0) / a[keep].sum()
                diff = (a - a_new) @ vals[lo:p + 1] @ w_h(wo, h)
                row = dict(zip(res.metric_names, res.metrics[0, b, h, qi]))
                np.testing.assert_allclose(row["L1"], np.abs(diff).sum(), rtol=1e-4, atol=1e-6)


def test_snapkv_selection_is_the_pooled_window_attention(arrays):
    """snapkv as kvpress's SnapKVPress computes it (docs/BOUND.md): per query head, the mean
    attention of the window's queries on the entries before the window, max-pooled (kernel
    7); the mean over the KV head's query heads; the window's own entries always kept; the
    top b - window of the rest (ties: the lower position)."""
    q, k, v, wo = arrays
    window, budget = 8, 14
    mask = ckv.select("snapkv", budget, q, k, v, wo, context_end=C, window=window)
    assert mask.dtype == bool and mask.shape == (G, C)
    group = H // G
    for g in range(G):
        pooled_heads = []
        for h in range(g * group, (g + 1) * group):
            rows = [causal_softmax(q[h, p], k[g], p)[: C - window] for p in range(C - window, C)]
            padded = np.pad(np.mean(rows, axis=0), 3, constant_values=-np.inf)
            pooled_heads.append([padded[i:i + 7].max() for i in range(C - window)])
        score = np.mean(pooled_heads, axis=0)
        top = np.argsort(-score, kind="stable")[: budget - window]
        want = np.zeros(C, bool)
        want[top] = True
        want[C - window:] = True
        np.testing.assert_array_equal(mask[g], want)


def test_errors_are_ckv_types(arrays):
    q, k, v, wo = arrays
    with pytest.raises(ckv.InputError, match=r"--methods: unknown method 'bogus'"):
        ckv.bound(q, k, v, wo, context_end=C, methods=["bogus"])
    with pytest.raises(ckv.UsageError, match="kernel"):
        ckv.bound(q, k, v, wo, context_end=C, kernel=4)
    with pytest.raises(ckv.InputError, match="not a multiple"):
        ckv.bound(q[:3], k, v, wo[:, :24], context_end=C)
    with pytest.raises(ckv.InputError, match="window 40 is not shorter"):
        ckv.bound(q, k, v, wo, context_end=C, window=40)
    assert issubclass(ckv.UsageError, ckv.InputError) and issubclass(ckv.Error, RuntimeError)


def test_result_arrays_are_handed_over():
    """The recorded arrays are ckv's buffers, not copies: numpy does not own them."""
    rng = np.random.default_rng(0)
    v = rng.standard_normal((2, 600, 64)).astype(np.float32)
    wo = rng.standard_normal((512, 4 * 64)).astype(np.float32)
    l1, _ = ckv.value_norms(v, wo, 4)
    assert not l1.flags.owndata and l1.flags.c_contiguous


def test_every_selection_parameter_is_a_keyword(arrays):
    """The library's one registration of the selection parameters (docs/BOUND.md "Adding a
    parameter") is what ckv.bound takes: a method's own parameter reaches it by its key."""
    params = ckv.selection_params()
    assert params["window"] == 32 and params["pool"] == "max" and params["ea_covariance"] is True
    assert params["pyramid_beta"] == 20.0 and params["defensive_mass"] == 0.9 and params["headkv_profile"] == ""
    assert {"obcache_score", "ea_future", "duo_sink", "selection_file"} <= set(params)
    q, k, v, wo = arrays
    # PyramidKVPress's budget of layer 0 of 4 (kvpress): b = 12, w = 2, beta 2 gives
    # min (b / beta) = 6, max 2b - min = 18, so layer 0 keeps 18; beta 20 puts min below the
    # window and falls back to b.
    common = dict(context_end=C, methods=["pyramidkv"], budgets=[12], layer=0, n_layer=4, window=2)
    assert (ckv.bound(q, k, v, wo, pyramid_beta=2.0, **common).kept_count == 18).all()
    assert (ckv.bound(q, k, v, wo, **common).kept_count == 12).all()
    with pytest.raises(ckv.UsageError, match=r"--pyramid-beta 0.5: must be finite and at least 1"):
        ckv.bound(q, k, v, wo, pyramid_beta=0.5, **common)
    with pytest.raises(ckv.UsageError, match=r"--obcache-score 'both': one of joint, key, value"):
        ckv.bound(q, k, v, wo, obcache_score="both", **common)
    with pytest.raises(ckv.UsageError, match="unknown parameter 'pyramid_bta'"):
        ckv.bound(q, k, v, wo, pyramid_bta=2.0, **common)

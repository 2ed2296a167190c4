#!/usr/bin/env python3
"""Golden selections of DefensiveKV and Layer-DefensiveKV for tests/test_methods_golden.cpp.

Writes tests/data/kvpress/methods_v1.h5 (format_version 1). The reference is the
official code of the paper (github.com/FFY0/DefensiveKV, commit DEFENSIVEKV_COMMIT),
never copied into this repository: the two press files are read at generation time
from a checkout (env DEFENSIVEKV_REPO, else a git clone into the temporary directory, DefensiveKV/) and
executed with their imports stubbed where they need the repository's CUDA/Triton
parts:

* kvpress/presses/efficient_defensivekv_press.py, EfficientDefensiveKVPress.score
  (lines 158-227) with its torch path `vwl1norm` (lines 32-75) in place of
  `vwl1norm_triton` (line 218, the Triton kernel of kvpress/ops/vw_norm.py; line 219
  is the torch call the authors left commented out), and compute_window_attention
  (lines 116-156) fed with post-RoPE queries (q_proj the identity, cos 1, sin 0);
* the selection of EfficientAdaScorerPress.compress (efficient_ada_scorer_press.py
  lines 85-96: n_kept = int(q_len * (1 - compression_ratio) * n_kv_head), the
  flattened top-k) and, for Layer-DefensiveKV, of EfficientAdaGlobalScorerPress.compress
  (efficient_ada_global_scorer_press.py lines 171-192: the top-k over all layers'
  flattened scores, counted per layer, then each layer's top-k with its count),
  restated here in three lines each because those methods need the repository's
  flattened cache.

Everything runs in float64 on CPU tensors; the one change to the official arithmetic
is that compute_window_attention's softmax(dtype=float32) is kept in float64, so the
reference and ckv (double) agree to rounding instead of to float32 (the kept sets are
compared exactly).

The two readings the official code does not implement (the window share on the window
itself, the value-norm factor normalised across positions; docs/BOUND.md) come from a
NumPy implementation written from the paper's description (arXiv 2510.13334, §4:
defensive aggregation; CriticalKV's two stages; AdaKV's allocation), which is checked
against the official code on every case in the official setting before it is used.

Cases: synthetic (random q/k/v, GQA 4/2, MHA 3/3, GQA 6/2) and two real models on a
text no other test uses: the default model (SmolLM2-135M-Instruct Q4_1, layers 0, 15,
29) and tiny_llama_gqa (both layers), their q/k/v/W_O recorded by `ckv dump` (f16).

q, k, v and nu_l1 are gzip-compressed (HDF5's built-in deflate filter, with shuffle).

Layout:
    /               attrs: format_version, generator, kvpress_version, torch_version,
                           defensivekv_commit
    /cases/<name>/  attrs: c, n, window, kernel, budgets (int64: kept per KV head),
                           fractions (float64), layers (int64), source, n_layer (the
                           model's layers), pyramid_beta
        layers/<l>/q  [n_head, n, d_head], k, v [n_kv_head, n, d_head] (float32 or
                      float16 as stored; q's rows [0, c - window) are zeros: never read),
                      nu_l1 float64 [n_head, c] (L1 norm of V W_h, torch, from these v
                      and W_O)
        layer_totals int64 [budget, layer], layer_determined uint8 [budget, layer]: the
            official Layer-DefensiveKV totals per stored layer (in increasing layer order),
            and whether that layer's kept set is free of ties at the cut (else torch.topk
            leaves it unspecified: only the total is compared)
        layers/<l>/kept/<label> uint8 [budget, n_kv_head, c], 1 = kept, budgets in the
            order of the attribute; label is
            defensivekv (official), defensivekv:mass=0.6 (the official code with its stage-1
            threshold 0.9 replaced by 0.6: --defensive-mass), defensivekv:share=window, defensivekv:nu=positions,
            defensivekv:share=window,nu=positions (NumPy), layer-defensivekv (official,
            allocation over the case's layers; compared where layer_determined), pyramidkv (kvpress 0.5.5 PyramidKVPress,
            window/kernel of the case, avg pooling, beta pyramid_beta, n_layer layers),
            duoattention (kvpress 0.5.5 DuoAttentionPress with the head scores duo_scores
            [n_layer, n_kv_head], sink duo_sink, recent duo_recent, and the head ratio ckv
            derives from the budget: (1 - b/c) / (1 - (sink + recent)/c))
"""
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import h5py
import numpy as np

from ckv_dump import dump_layers  # noqa: E402 (tests/reference/)
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/data/kvpress/methods_v1.h5"
DEFENSIVEKV_URL = "https://github.com/FFY0/DefensiveKV"
DEFENSIVEKV_COMMIT = "9251b95e7e282a6c18dd98ef6318dd489e639a58"
MASS = 0.6  # the label "defensivekv:mass=0.6": --defensive-mass 0.6 (the official press: 0.9)
PRESS_FILES = {
    "efficient_ada_scorer_press": "kvpress/presses/efficient_ada_scorer_press.py",
    "efficient_ada_global_scorer_press": "kvpress/presses/efficient_ada_global_scorer_press.py",
    "efficient_defensivekv_press": "kvpress/presses/efficient_defensivekv_press.py",
    "efficient_layer_defensivekv_press": "kvpress/presses/efficient_layer_defensivekv_press.py",
}
TEXT = (
    "The orchard cooperative of Lindmoor keeps its ledgers in a converted grain loft above the "
    "cider press. Every autumn the members weigh their harvest on a brass scale that once belonged "
    "to a canal company, and the clerk writes the totals in green ink. In the wet year of 1974 the "
    "river rose into the cellars and spoiled four hundred barrels, so the cooperative built a levee "
    "of river stones along the eastern meadow. The levee still stands; children walk along its top "
    "on the way to school. The current clerk, Tomas Adeyemi, also keeps bees behind the loft and "
    "sells their honey at the Saturday market, where the best pear variety is the small russet "
    "called Winter Nell. "
)


# --- the official code ---------------------------------------------------------------

def official_source(rel):
    repo = os.environ.get("DEFENSIVEKV_REPO")
    if repo is None:
        repo = str(Path(tempfile.gettempdir()) / "DefensiveKV")
        if not Path(repo).exists():
            subprocess.check_call(["git", "clone", "-q", DEFENSIVEKV_URL, repo])
    path = Path(repo)
    if (path / ".git").exists() or (path / "HEAD").exists():
        return subprocess.check_output(["git", "-C", str(path), "show", f"{DEFENSIVEKV_COMMIT}:{rel}"], text=True)
    return (path / rel).read_text()


class _Anything:
    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Anything()

    def __getattr__(self, k):
        return _Anything()

    def __mro_entries__(self, bases):
        return (object,)


class _Stub(types.ModuleType):
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _Anything()


def load_official():
    for name in ["datasets", "fire"]:
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = _Stub(name)
    import kvpress  # noqa: F401  (0.5.5: BasePress, ScorerPress)
    # The Triton kernel module: its function is never called (vwl1norm_triton is replaced).
    sys.modules["kvpress.ops"] = types.ModuleType("kvpress.ops")
    sys.modules["kvpress.ops.vw_norm"] = types.ModuleType("kvpress.ops.vw_norm")
    sys.modules["kvpress.ops.vw_norm"].vw_l1norm = None
    mods = {}
    for name, rel in PRESS_FILES.items():
        full = f"kvpress.presses.{name}"
        mod = types.ModuleType(full)
        mod.__file__ = f"<{DEFENSIVEKV_URL}@{DEFENSIVEKV_COMMIT[:7]}>/{rel}"
        sys.modules[full] = mod
        exec(compile(official_source(rel), mod.__file__, "exec"), mod.__dict__)
        mods[name] = mod
    # The official press with its stage-1 mass (a constant there, 0.9) set to MASS: the
    # reference of --defensive-mass. Its source is the official file with that one number
    # replaced where it stands, nothing else.
    rel = PRESS_FILES["efficient_defensivekv_press"]
    src = official_source(rel)
    # Twice: the torch path (vwl1norm, the one run here) and the Triton path's copy.
    assert src.count("threshold = 0.9 - window_bias") == 2, "the official stage-1 threshold moved"
    mod = types.ModuleType("kvpress.presses.efficient_defensivekv_press_mass")
    mod.__file__ = f"<{DEFENSIVEKV_URL}@{DEFENSIVEKV_COMMIT[:7]}>/{rel} (threshold {MASS})"
    exec(compile(src.replace("threshold = 0.9 - window_bias", f"threshold = {MASS!r} - window_bias"),
                 mod.__file__, "exec"), mod.__dict__)
    mods["efficient_defensivekv_press_mass"] = mod
    return mods


class FakeModule:
    def __init__(self, n_head, n_kv, d_head, wo, n_layer):
        d_model = wo.shape[0]
        self.config = types.SimpleNamespace(num_attention_heads=n_head, num_key_value_heads=n_kv, head_dim=d_head,
                                            hidden_size=d_model, num_hidden_layers=n_layer)
        self.head_dim = d_head
        self.num_key_value_groups = n_head // n_kv
        self.q_proj = torch.nn.Identity()  # hidden_states carry the post-RoPE queries
        self.o_proj = torch.nn.Linear(n_head * d_head, d_model, bias=False, dtype=torch.float64)
        with torch.no_grad():
            self.o_proj.weight.copy_(torch.from_numpy(wo.astype(np.float64)))


_softmax = F.softmax


def _softmax64(x, dim=None, dtype=None, **kw):
    # compute_window_attention asks for float32; keep float64 inputs in float64.
    if dtype == torch.float32 and x.dtype == torch.float64:
        dtype = torch.float64
    return _softmax(x, dim=dim, dtype=dtype, **kw)


def official_scores(press, q, k, v, wo, c, n_layer):
    """EfficientDefensiveKVPress.score on the context [0, c): flattened [n_kv * c]."""
    n_head, _, d = q.shape
    n_kv = k.shape[0]
    module = FakeModule(n_head, n_kv, d, wo, n_layer)
    press.vwl1norm_triton = press.vwl1norm  # the torch path (line 219)
    hidden = torch.from_numpy(q[:, :c].astype(np.float64)).permute(1, 0, 2).reshape(1, c, n_head * d)
    keys = torch.from_numpy(k[None, :, :c].astype(np.float64))
    values = torch.from_numpy(v[None, :, :c].astype(np.float64))
    cos = torch.ones(1, c, d, dtype=torch.float64)
    sin = torch.zeros(1, c, d, dtype=torch.float64)
    meta = types.SimpleNamespace(head_lens=[c] * n_kv, bsz=1, num_key_value_heads=n_kv)
    F.softmax = _softmax64
    torch.nn.functional.softmax = _softmax64
    try:
        s = press.score(module, hidden, keys, values, None, {"metadata": meta, "position_embeddings": (cos, sin)})
    finally:
        F.softmax = _softmax
        torch.nn.functional.softmax = _softmax
    return s[0]


def mask_from_flat(idx, n_kv, c):
    m = np.zeros((n_kv, c), np.int32)
    for i in np.asarray(idx):
        m[i // c, i % c] = 1
    return m


# --- NumPy from the paper's description (both readings) --------------------------------

def softmax_rows(q, k, rows):
    d = q.shape[1]
    out = np.zeros((len(rows), k.shape[0]))
    for r, p in enumerate(rows):
        logits = k[: p + 1].astype(np.float64) @ q[p].astype(np.float64) / np.sqrt(d)
        e = np.exp(logits - logits.max())
        out[r, : p + 1] = e / e.sum()
    return out


def numpy_defensive(q, k, nu, c, w, kernel, cr, share, nu_norm, mass=0.9):
    """Budget scores [n_kv, c] of DefensiveKV at compression ratio cr."""
    n_head, n_kv = q.shape[0], k.shape[0]
    g = n_head // n_kv
    prefix = c - w
    mx = np.full((n_kv, prefix), -np.inf)
    ave = np.zeros((n_kv, prefix))
    share_sum = 0.0
    pad = kernel // 2
    for h in range(n_head):
        a = softmax_rows(q[h], k[h // g], range(prefix, c))  # [w, >= c] rows of the window
        for row in a:
            x = row[:prefix]
            share_sum += x[max(0, prefix - w):].sum() if share == "before" else row[prefix:c].sum()
            xp = np.concatenate([np.zeros(pad), x, np.zeros(pad)])
            pooled = np.array([xp[i:i + kernel].sum() / kernel for i in range(prefix)])
            pooled = pooled / pooled.sum() * x.sum()
            mx[h // g] = np.maximum(mx[h // g], pooled)
            ave[h // g] += x
    ave /= g * w
    bias = share_sum / (n_head * w)
    defensive = np.maximum(mx, mx.mean(1, keepdims=True))
    nu_kv = nu[:, :prefix].reshape(n_kv, g, prefix).mean(1)
    factor = nu_kv / nu_kv.sum(0, keepdims=True) if nu_norm == "heads" else nu_kv / nu_kv.sum(1, keepdims=True)
    base = defensive * factor
    top = base.max()
    scores = np.full((n_kv, c), top)
    scores[:, :prefix] = base
    cap = int(prefix * (1 - cr) - w)  # the official stage-1 cap, q_len the prefix
    for hk in range(n_kv):
        norm = ave[hk] / ave[hk].sum()
        order = np.argsort(-norm, kind="stable")
        cum = np.cumsum(norm[order])
        hit = np.nonzero(cum >= mass - bias)[0]
        count = min(int(hit[0]) if len(hit) else 0, cap)
        scores[hk, order[:count]] = top
    return scores


def top_flat(scores, total):
    flat = scores.reshape(-1)
    order = np.lexsort((np.arange(flat.size), -flat))  # score desc, then lower index
    return order[:total]


# --- cases ------------------------------------------------------------------------------

def check_budgets(c, w, n_kv, fractions):
    """(compression ratio, kept per KV head) of each fraction: the references receive the
    ratio 1 - f (as a kvpress user passes it; 1 - 0.2 is 0.8 but 1 - 0.8 is
    0.19999999999999996) and b is kvpress's compute_n_kept, max(1, int(c (1 - r))). Where
    c (1 - r) is not whole the formulas on the unrounded share differ from b-based ones."""
    out = []
    for f in fractions:
        cr = 1 - f
        b = max(1, int(c * (1 - cr)))
        assert 1 <= b < c, (c, f)
        out.append((cr, b))
    return out


GZIP = dict(compression="gzip", compression_opts=6, shuffle=True)


def put(masks, layer, label, mask):
    masks.setdefault((layer, label), []).append(mask.astype(np.uint8))


def pyramid_kept(q, k, wo, c, w, kernel, cr, beta, layer, n_layer):
    """kvpress 0.5.5 PyramidKVPress.compress on the context [0, c), from its attention rows."""
    from kvpress import PyramidKVPress
    n_head, _, d = q.shape
    n_kv = k.shape[0]
    g = n_head // n_kv
    module = FakeModule(n_head, n_kv, d, wo, n_layer)
    module.layer_idx = layer
    att = np.zeros((1, n_head, w, c))
    for h in range(n_head):
        att[0, h] = softmax_rows(q[h], k[h // g], range(c - w, c))[:, :c]
    keys = torch.zeros(1, n_kv, c, d, dtype=torch.float64)
    keys[..., 0] = torch.arange(c, dtype=torch.float64)  # keys carry their position
    values = torch.zeros(1, n_kv, c, d, dtype=torch.float64)
    hidden = torch.zeros(1, c, wo.shape[0], dtype=torch.float64)
    press = PyramidKVPress(compression_ratio=cr, window_size=w, kernel_size=kernel, beta=beta)
    kk, _ = press.compress(module, hidden, keys, values, torch.from_numpy(att), {})
    pos = kk[0, :, :, 0].round().long().numpy()
    m = np.zeros((n_kv, c), np.int32)
    for hk in range(n_kv):
        m[hk, pos[hk]] = 1
    return m


def duo_kept(scores, sink, recent, ratio, layer, n_kv, c):
    """kvpress 0.5.5 DuoAttentionPress: post_init_from_model with the pattern given, then compress."""
    from kvpress import DuoAttentionPress
    press = DuoAttentionPress(head_compression_ratio=ratio)
    DuoAttentionPress.load_attention_pattern = staticmethod(lambda model: (sink, recent, np.clip(scores, 0, 1)))
    press.post_init_from_model(types.SimpleNamespace(device="cpu"))
    module = types.SimpleNamespace(layer_idx=layer, config=types.SimpleNamespace(_attn_implementation="sdpa"))
    keys = torch.zeros(1, n_kv, c, 4, dtype=torch.float64)
    press.compress(module, None, keys, keys, None, {})
    m = np.ones((n_kv, c), np.int32)
    if hasattr(module, "masked_key_indices"):
        _, heads, seqs = module.masked_key_indices
        m[heads.numpy(), seqs.numpy()] = 0
    return m


def duo_ratio(c, b, sink, recent):
    """ckv's head ratio for budget b (lib/analysis/duoattention.h), in the same float order."""
    window = (sink + recent) / c
    return 0.0 if window >= 1 else min(1.0, max(0.0, (1 - b / c) / (1 - window)))


def write_case(f, mods, name, layers, c, n, w, kernel, fractions, source, n_layer, beta=20):
    """layers: {layer: (q, k, v, wo)} of a model with n_layer layers."""
    any_l = next(iter(layers.values()))
    n_head, n_kv = any_l[0].shape[0], any_l[1].shape[0]
    g = f.create_group(f"cases/{name}")
    budgets = check_budgets(c, w, n_kv, fractions)
    for key, val in dict(c=c, n=n, window=w, kernel=kernel).items():
        g.attrs[key] = val
    g.attrs["budgets"] = np.array([b for _, b in budgets], np.int64)
    g.attrs["fractions"] = np.array(fractions, np.float64)
    g.attrs["layers"] = np.array(sorted(layers), np.int64)
    g.attrs["source"] = source
    g.attrs["n_layer"] = n_layer
    g.attrs["pyramid_beta"] = beta
    duo_scores = np.random.default_rng(len(name) * 1000 + c).uniform(0.01, 0.99, (n_layer, n_kv))
    duo_sink, duo_recent = 4, 16
    g["duo_scores"] = duo_scores
    g.attrs["duo_sink"], g.attrs["duo_recent"] = duo_sink, duo_recent
    Defensive = mods["efficient_defensivekv_press"].EfficientDefensiveKVPress
    LayerDefensive = mods["efficient_layer_defensivekv_press"].EfficientLayerDefensiveKVPress
    per_budget_layer_scores = [[] for _ in budgets]
    masks = {}  # (layer, label) -> [mask per budget, in budget order]
    for l, (q, k, v, wo) in sorted(layers.items()):
        lg = g.create_group(f"layers/{l}")
        # Only the window's and the question's query rows are ever read: the others are
        # stored as zeros (gzip makes them free).
        q_stored = q.copy()
        q_stored[:, : c - w] = 0
        for key, val in (("q", q_stored), ("k", k), ("v", v)):
            lg.create_dataset(key, data=val, **GZIP)
        d = q.shape[2]
        vv = v.astype(np.float64)
        nu = np.zeros((n_head, c))
        for h in range(n_head):
            w_h = wo[:, h * d:(h + 1) * d].T.astype(np.float64)
            nu[h] = torch.norm(torch.from_numpy(vv[h // (n_head // n_kv), :c] @ w_h), p=1, dim=-1).numpy()
        lg.create_dataset("nu_l1", data=nu, **GZIP)
        for bi, (cr, b) in enumerate(budgets):
            press = Defensive(compression_ratio=cr, window_size=w, kernel_size=kernel)
            s = official_scores(press, q, k, v, wo, c, len(layers))
            n_kept = int(c * (1 - cr) * n_kv)  # efficient_ada_scorer_press.py line 89
            kept = mask_from_flat(s.topk(n_kept).indices.numpy(), n_kv, c)
            put(masks, l, "defensivekv", kept)
            # The NumPy reading in the official setting must give the official set.
            ref = numpy_defensive(q, k, nu, c, w, kernel, cr, "before", "heads")
            mine = mask_from_flat(top_flat(ref, n_kept), n_kv, c)
            assert (mine == kept).all(), f"{name} layer {l} budget {b}: NumPy differs from the official code"
            # --defensive-mass: the official code with its threshold replaced, and the NumPy
            # reading at that mass must agree.
            mpress = mods["efficient_defensivekv_press_mass"].EfficientDefensiveKVPress(
                compression_ratio=cr, window_size=w, kernel_size=kernel)
            kept_m = mask_from_flat(official_scores(mpress, q, k, v, wo, c, len(layers)).topk(n_kept).indices.numpy(),
                                    n_kv, c)
            ref_m = numpy_defensive(q, k, nu, c, w, kernel, cr, "before", "heads", mass=MASS)
            assert (mask_from_flat(top_flat(ref_m, n_kept), n_kv, c) == kept_m).all(), \
                f"{name} layer {l} budget {b}: NumPy differs from the official code at mass {MASS}"
            put(masks, l, f"defensivekv:mass={MASS}", kept_m)
            for label, share, nn_ in [("defensivekv:share=window", "window", "heads"),
                                      ("defensivekv:nu=positions", "before", "positions"),
                                      ("defensivekv:share=window,nu=positions", "window", "positions")]:
                sc = numpy_defensive(q, k, nu, c, w, kernel, cr, share, nn_)
                put(masks, l, label, mask_from_flat(top_flat(sc, n_kept), n_kv, c))
            put(masks, l, "pyramidkv", pyramid_kept(q, k, wo, c, w, kernel, cr, beta, l, n_layer))
            put(masks, l, "duoattention", duo_kept(duo_scores, duo_sink, duo_recent,
                                                   duo_ratio(c, b, duo_sink, duo_recent), l, n_kv, c))
            lpress = LayerDefensive(compression_ratio=cr, window_size=w, kernel_size=kernel)
            per_budget_layer_scores[bi].append((l, official_scores(lpress, q, k, v, wo, c, len(layers))))
    totals, determined = [], []
    for bi, (cr, b) in enumerate(budgets):
        # efficient_ada_global_scorer_press.py lines 171-192.
        items = per_budget_layer_scores[bi]
        n_kept = int(c * (1 - cr) * n_kv * len(items))
        glob = torch.stack([s for _, s in items]).view(-1)
        idx = glob.topk(n_kept).indices
        counts = torch.bincount(idx // (c * n_kv), minlength=len(items))
        totals.append(counts.numpy().astype(np.int64))
        det = []
        for i, (l, s) in enumerate(items):
            kept = mask_from_flat(s.topk(int(counts[i])).indices.numpy(), n_kv, c)
            put(masks, l, "layer-defensivekv", kept)
            # A layer whose total cuts through tied scores (its stage-1 and window entries
            # all score the layer's maximum) has a kept set torch.topk leaves unspecified.
            srt = torch.sort(s, descending=True).values
            k_i = int(counts[i])
            det.append(k_i in (0, len(srt)) or bool(srt[k_i - 1] != srt[k_i]))
        determined.append(np.array(det, np.uint8))
    g["layer_totals"] = np.stack(totals)          # [budget, layer] official per-layer totals
    g["layer_determined"] = np.stack(determined)  # [budget, layer] 1: the kept set is tie-free
    for (l, label), ms in masks.items():
        g[f"layers/{l}/kept/{label}"] = np.stack(ms)  # contiguous: tiny, no chunk index


def synthetic(rng, n_head, n_kv, d, d_model, n, peak):
    q = (rng.standard_normal((n_head, n, d)) * peak).astype(np.float32)
    k = rng.standard_normal((n_kv, n, d)).astype(np.float32)
    v = rng.standard_normal((n_kv, n, d)).astype(np.float32)
    wo = (rng.standard_normal((d_model, n_head * d)) / np.sqrt(d)).astype(np.float32)
    return q, k, v, wo


def dumped(model, layers, tokens_or_text, workdir, name):
    return dump_layers(model, layers, tokens_or_text, workdir, name, ("q", "k", "v", "wo"))


def main():
    mods = load_official()
    import kvpress
    OUT.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20260317)
    tmp = OUT.with_suffix(".h5.tmp")
    with h5py.File(tmp, "w", libver=("v108", "v110")) as f, tempfile.TemporaryDirectory() as work:
        f.attrs["format_version"] = 1
        f.attrs["generator"] = "tests/reference/make_methods_goldens.py"
        f.attrs["kvpress_version"] = str(getattr(kvpress, "__version__", "0.5.5"))
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["defensivekv_commit"] = DEFENSIVEKV_COMMIT
        # Synthetic: GQA 4/2, two layers; MHA 3/3; GQA 6/2 with peaked attention.
        write_case(f, mods, "synthetic_gqa", {0: synthetic(rng, 4, 2, 16, 32, 210, 1.0),
                                              1: synthetic(rng, 4, 2, 16, 32, 210, 2.0)},
                   200, 210, 32, 5, [0.3, 0.4, 0.6], "synthetic", 2)
        write_case(f, mods, "synthetic_mha", {0: synthetic(rng, 3, 3, 8, 24, 160, 2.5)},
                   160, 160, 16, 5, [0.3, 0.5, 0.7], "synthetic", 1)
        write_case(f, mods, "synthetic_gqa6", {0: synthetic(rng, 6, 2, 8, 24, 250, 1.5),
                                               3: synthetic(rng, 6, 2, 8, 24, 250, 0.7)},
                   240, 250, 32, 5, [0.25, 0.3, 0.5], "synthetic", 4)
        # A window of 8 and beta 4, so PyramidKV's pyramid (not its uniform fallback) is
        # exercised: layers 0, 2, 5 of 6.
        write_case(f, mods, "synthetic_pyramid", {l: synthetic(rng, 4, 2, 8, 16, 200, 1.2) for l in (0, 2, 5)},
                   200, 200, 8, 5, [0.3, 0.4, 0.5], "synthetic", 6, beta=4)
        # Budgets where c (1 - r) is not whole (203 * 0.37 = 75.11, 197 * 0.33 = 65.01, ...):
        # the references use the fraction itself, not the rounded b; and f = 0.2, whose
        # ratio 0.8 gives 1 - 0.8 = 0.19999999999999996 (200 * that = 39.999...: b = 39).
        write_case(f, mods, "fractional_gqa", {0: synthetic(rng, 4, 2, 16, 32, 212, 1.0),
                                               1: synthetic(rng, 4, 2, 16, 32, 212, 1.8)},
                   203, 212, 32, 5, [0.2, 0.37, 0.5, 0.63], "synthetic", 2)
        write_case(f, mods, "fractional_pyramid", {l: synthetic(rng, 4, 2, 8, 16, 197, 1.2) for l in (0, 3, 5)},
                   197, 197, 8, 5, [0.2, 0.33, 0.45], "synthetic", 6, beta=4)
        write_case(f, mods, "float_ratio", {0: synthetic(rng, 4, 2, 8, 16, 210, 1.4),
                                            2: synthetic(rng, 4, 2, 8, 16, 210, 0.9)},
                   200, 210, 16, 5, [0.2, 0.7, 0.9], "synthetic", 3)
        # Real models on TEXT (no other test uses it).
        tiny = str(ROOT / "tests/data/models/tiny_llama_gqa")
        toks = list(TEXT.encode("ascii"))[:230]
        write_case(f, mods, "tiny_llama_gqa", dumped(tiny, [0, 1], toks, work, "tiny"),
                   220, 230, 32, 5, [0.3, 0.4, 0.5], "models/tiny_llama_gqa, bytes of TEXT", 2)
        default = str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf")
        layers = dumped(default, [0, 15, 29], TEXT, work, "default")
        n = next(iter(layers.values()))[0].shape[1]
        c = (n - 8) // 10 * 10
        write_case(f, mods, "default_model", layers, c, n, 32, 5, [0.3, 0.4, 0.5],
                   "models/SmolLM2-135M-Instruct.Q4_1.gguf, TEXT (ckv tokenizer)", 30)
    tmp.replace(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

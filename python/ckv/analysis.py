"""ckv.bound, ckv.select and ckv.value_norms on arrays: one layer of `ckv bound`
(docs/BOUND.md), computed by the library's value_norms and analyze_layer, the calls the CLI
makes for each layer.

Shapes (one layer, one prompt, post-RoPE):
    q  [head, pos, d_head]      k, v  [kv_head, pos, d_head]      wo  [d_model, head*d_head]
The evictable context is [0, context_end); the evaluation queries are the positions
>= context_end (the question) or, with none, the last one (`eval_rows` overrides).
Budgets: a float in (0, 1] is a fraction of the context (kvpress's compute_n_kept, 1.0
keeps all), an int a count of kept entries per KV head.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from . import _ckv

# The keyword parameters of ckv.bound: every selection parameter (one registration each in
# the library, analysis/selection_params.h; the keys of an output's settings) and the
# layer's own settings.
_PARAMS = tuple(_ckv.selection_param_keys()) + ("nu_min", "oracle_max_n", "sliding_window", "threads")


def selection_params() -> dict:
    """Every selection parameter ckv.bound and Model.eval take, by keyword, with its default:
    {"window": 32, "kernel": 7, "pool": "max", ..., "pyramid_beta": 20.0, "obcache_score":
    "joint"} (`ckv bound --help` says what each means; paths are "" when not given)."""
    a = _ckv.BoundArgs()
    return {key: getattr(a, key) for key in _ckv.selection_param_keys()}


def _f32(x) -> np.ndarray:
    """float32 C-contiguous arrays pass as they are; others (float16 dumps) are converted."""
    return np.ascontiguousarray(x, dtype=np.float32)


def _budgets(budgets, c: int) -> list:
    out = []
    for b in budgets:
        if isinstance(b, (float, np.floating)):
            if not 0 < b <= 1:
                raise _ckv.UsageError(f"budgets: {b} is not a fraction in (0, 1] (give an int for a count)")
            out.append(_ckv.budget_from_fraction(c, float(b)))
        else:
            out.append(int(b))
    return out


@dataclass
class BoundResult:
    """Per-head numbers of one layer, as `ckv bound` writes them for the layer.

    metrics     float64 [method, budget, head, query, metric]; metric_names gives the last
                axis: L1, L2, theta, theta_hat, theta_rel, their _l2 forms, S, S1, C, C_l2,
                nu_min, nu_min_l2, kept, the theta_rel readings (docs/MATH.md §3)
    kept_mask   uint8 [method, budget, kv_head, context]: 1 where the entry is kept
    kept_count  int64 [method, budget, kv_head]
    methods     canonical method names; budgets kept entries per KV head;
    eval_rows   the evaluation query positions (axis `query`)
    """
    methods: list
    budgets: list
    eval_rows: list
    metric_names: list
    metrics: np.ndarray
    kept_mask: np.ndarray
    kept_count: np.ndarray
    oracle_skipped: bool

    def metric(self, name: str) -> np.ndarray:
        """[method, budget, head, query] of one metric."""
        return self.metrics[..., self.metric_names.index(name)]

    def mean(self, name: str) -> np.ndarray:
        """[method, budget, head]: the mean over the evaluation queries."""
        return self.metric(name).mean(axis=-1)

    def table(self):
        """A tidy pandas DataFrame: one row per method, budget, head and query."""
        import pandas as pd

        m, b, h, q, _ = self.metrics.shape
        idx = np.indices((m, b, h, q)).reshape(4, -1)
        df = pd.DataFrame(self.metrics.reshape(-1, len(self.metric_names)), columns=self.metric_names)
        df.insert(0, "method", np.asarray(self.methods, dtype=object)[idx[0]])
        df.insert(1, "budget", np.asarray(self.budgets)[idx[1]])
        df.insert(2, "head", idx[2])
        df.insert(3, "query", np.asarray(self.eval_rows)[idx[3]])
        return df


def bound(q, k, v, wo, context_end: int, methods: Sequence[str] = ("snapkv",), budgets: Sequence = (0.5,),
          eval_rows: Optional[Sequence[int]] = None, layer: int = 0, n_layer: int = 1,
          inv_freq: Optional[np.ndarray] = None, **params) -> BoundResult:
    """Selections and perturbation metrics of one layer (module docstring for shapes).

    methods: `ckv bound --methods` expressions (snapkv, h2o, attn, streaming, oracle,
    adakv(X), criticalkv(X), defensivekv, pyramidkv, expectedattention, obcache, knorm, keydiff, ...; not the
    layer-global ones). params: window=32, kernel=7, pool="max", h2o_rows=256, sinks=4,
    alpha=0.5, eps=1e-4, alpha_safe=0.2, gqa_reduce="mean", every other selection parameter
    by its key (ckv.selection_params(): pyramid_beta, ea_future, obcache_score, headkv_profile,
    ...), nu_min="all", oracle_max_n=1024, threads=1, sliding_window=0 (the layer's attention window, as
    `ckv bound` takes it from the model: the methods then select among the entries the
    window holds, docs/MODELS.md "Sliding-window attention"). layer / n_layer: the layer's
    depth (pyramidkv's budget);
    inv_freq: RoPE inverse frequencies (expectedattention). The GIL is released.
    """
    for key in params:
        if key not in _PARAMS:
            raise _ckv.UsageError(f"bound: unknown parameter '{key}' (known: {', '.join(_PARAMS)})")
    a = _ckv.BoundArgs()
    a.methods = [str(m) for m in methods]
    a.c = int(context_end)
    a.budgets = _budgets(budgets, a.c)
    a.eval_rows = None if eval_rows is None else [int(r) for r in eval_rows]
    a.layer, a.n_layer = int(layer), int(n_layer)
    for key, value in params.items():
        setattr(a, key, value)
    inv = None if inv_freq is None else [float(x) for x in np.asarray(inv_freq).reshape(-1)]
    out = _ckv.bound_layer(_f32(q), _f32(k), _f32(v), _f32(wo), a, inv)
    return BoundResult(methods=list(out["methods"]), budgets=list(out["budgets"]), eval_rows=list(out["eval_rows"]),
                       metric_names=list(out["metric_names"]), metrics=out["metrics"], kept_mask=out["kept_mask"],
                       kept_count=out["kept_count"], oracle_skipped=bool(out["oracle_skipped"]))


def select(method: str, budget, q, k, v, wo, context_end: int, **kwargs) -> np.ndarray:
    """The kept mask of one method at one budget: bool [kv_head, context_end], the very
    selection `ckv bound` makes (it runs the same analyze_layer). kwargs as for `bound`."""
    res = bound(q, k, v, wo, context_end, methods=[method], budgets=[budget], **kwargs)
    return res.kept_mask[0, 0].astype(bool)


def value_norms(v, wo, n_head: int):
    """(nu_l1, nu_l2), each [head, pos]: ‖v_i W_h‖₁ and ‖v_i W_h‖₂ (docs/MATH.md §1)."""
    return _ckv.value_norms(_f32(v), _f32(wo), int(n_head))

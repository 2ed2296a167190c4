"""ckv.open and ckv.table: every ckv output file (dump, bound, check, mask, eval, merged
shards: one schema each, docs/DUMP.md, BOUND.md, MASK.md, EVAL.md) as numpy arrays, and its
numbers as a tidy pandas DataFrame (pandas is optional: only `table` needs it)."""
from __future__ import annotations

import numpy as np


def open(path):  # noqa: A001 (ckv.open, as the issue names it)
    """Open a ckv output and dispatch on its schema: a DumpFile (arrays read lazily:
    `.array(record_id, "q", layer)`; close it, or use `with`), BoundFile (kind bound or
    check), MaskFile or EvalFile. Raises SchemaError (a ValueError-like Exception naming the
    file) for other files or schema versions. Needs h5py (imported here, not with ckv)."""
    from .reader import open_ckv

    return open_ckv(path)


def table(f):
    """A tidy pandas DataFrame of an opened file:
    bound/check  one row per record, method (or alpha), budget, layer and head, a column per
                 metric (the mean over the evaluation queries);
    eval         one row per record and run: method, fraction, score, logp_answer, mean_l1;
    mask         one row per record and run with the run's scalar attributes;
    dump         one row per complete record: id, n_tokens, context_end."""
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("ckv.table needs pandas (pip install pandas)") from e
    from .reader import BoundFile, DumpFile, EvalFile, MaskFile
    if isinstance(f, BoundFile):
        frames = []
        for r in f.records:
            m, b, layer, h, _ = r.metrics_mean.shape
            idx = np.indices((m, b, layer, h)).reshape(4, -1)
            df = pd.DataFrame(r.metrics_mean.reshape(-1, len(f.metric_names)), columns=f.metric_names)
            df.insert(0, "record", r.id)
            df.insert(1, "method", np.asarray(f.methods, dtype=object)[idx[0]])
            df.insert(2, "budget", np.asarray(r.budgets)[idx[1]])
            df.insert(3, "layer", np.asarray(r.layers)[idx[2]])
            df.insert(4, "head", idx[3])
            frames.append(df)
        return pd.concat(frames, ignore_index=True)
    if isinstance(f, EvalFile):
        return pd.DataFrame([{"record": r.id, "method": run.method, "fraction": run.fraction, "score": run.score,
                              "logp_answer": run.logp_answer, "mean_l1": run.mean_l1}
                             for r in f.records for run in r.runs])
    if isinstance(f, MaskFile):
        rows = []
        for r in f.records:
            for name, run in r.runs.items():
                scalars = {k: v for k, v in run.attrs.items() if np.isscalar(v)}
                rows.append({"record": r.id, "run": name, **scalars})
        return pd.DataFrame(rows)
    if isinstance(f, DumpFile):
        return pd.DataFrame([{"record": i, "n_tokens": int(f.record_attrs(i)["n_tokens"]),
                              "context_end": int(f.record_attrs(i)["context_end"])} for i in f.record_ids])
    raise TypeError(f"ckv.table: {type(f).__name__} is not an opened ckv file")

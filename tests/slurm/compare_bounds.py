#!/usr/bin/env python3
"""Exit 0 when two `ckv bound` / `ckv check` outputs (PREFIX.h5, PREFIX.csv, PREFIX.json) hold
the same results: the same records with the same attributes, kept entries equal, metrics equal
to float rounding (relative 1e-9, NaN == NaN), the same CSV rows and the same JSON summary
(provenance aside). Usage: compare_bounds.py PREFIX_A PREFIX_B"""
import csv
import json
import math
import sys

import h5py
import numpy as np

from compare_dumps import compare_attrs, report

RTOL, ATOL = 1e-9, 1e-12
# Root attributes that must agree (the rest is provenance: who, where, when, which shard).
SAME_ROOT = ["schema", "schema_version", "kind", "methods", "alphas", "metrics", "settings",
             "model_sha256", "input_sha256", "input_records"]
EXACT_DATA = {"kept_mask", "kept_count"}


def close(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True))


def compare_h5(pa, pb, errors):
    with h5py.File(pa, "r") as fa, h5py.File(pb, "r") as fb:
        provenance = (set(fa.attrs) | set(fb.attrs)) - set(SAME_ROOT)
        errors += compare_attrs("/", fa.attrs, fb.attrs, provenance)
        ra, rb = fa["records"], fb["records"]
        done_a = sorted(k for k in ra if ra[k].attrs.get("complete", False))
        done_b = sorted(k for k in rb if rb[k].attrs.get("complete", False))
        if done_a != done_b:
            errors.append(f"complete records differ: {done_a} vs {done_b}")
        for rid in sorted(set(done_a) & set(done_b)):
            a, b = ra[rid], rb[rid]
            errors += compare_attrs(f"/records/{rid}", a.attrs, b.attrs)
            for name in sorted(set(a) | set(b)):
                if name not in a or name not in b:
                    errors.append(f"/records/{rid}/{name} in only one file")
                elif name in EXACT_DATA:
                    if not np.array_equal(a[name][()], b[name][()]):
                        errors.append(f"/records/{rid}/{name} differs")
                elif not close(a[name][()], b[name][()]):
                    errors.append(f"/records/{rid}/{name} differs beyond rounding")
        return len(done_a)


def compare_csv(pa, pb, errors):
    with open(pa, newline="") as fa, open(pb, newline="") as fb:
        rows_a, rows_b = list(csv.reader(fa)), list(csv.reader(fb))
    if rows_a[:1] != rows_b[:1] or len(rows_a) != len(rows_b):
        errors.append(f"CSV: header or row count differs ({len(rows_a)} vs {len(rows_b)} lines)")
        return
    for i, (a, b) in enumerate(zip(rows_a[1:], rows_b[1:]), start=2):
        # record, method, budget, layer, head, kv_head, n_query, eval, compress,
        # nu_min_reading, below_window, sliding_window: exact; then the metrics.
        if a[:12] != b[:12] or not close([float(x) for x in a[12:]], [float(x) for x in b[12:]]):
            errors.append(f"CSV line {i} differs: {a[:12]} vs {b[:12]}")
            return


def same_json(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL) or (math.isnan(a) and math.isnan(b))
    return a == b


def compare_json(pa, pb, errors):
    with open(pa) as fa, open(pb) as fb:
        a, b = json.load(fa), json.load(fb)
    a.pop("provenance", None)
    b.pop("provenance", None)
    for key in sorted(set(a) | set(b)):
        if not same_json(a.get(key), b.get(key)):
            errors.append(f"JSON: {key} differs")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    a, b = (p[:-3] if p.endswith(".h5") else p for p in sys.argv[1:3])
    errors = []
    n = compare_h5(a + ".h5", b + ".h5", errors)
    compare_csv(a + ".csv", b + ".csv", errors)
    compare_json(a + ".json", b + ".json", errors)
    return report(errors, a, b, f"same results: {n} records (HDF5, CSV and JSON; provenance aside)")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Exit 0 when two ckv dump files hold the same data: every group and dataset (dtype, shape,
bytes) and every attribute, except the root attributes that describe how and where a file was
made (provenance, shard identity, merge history). Usage: compare_dumps.py A.h5 B.h5"""
import sys

import h5py
import numpy as np

# Root attributes that legitimately differ between a single-process run and a merge of shards.
PROVENANCE = {"command_line", "hostname", "user", "created", "threads", "device", "shard",
              "shard_index", "shard_count", "resumed", "merged_from", "merge_command_line",
              "merged_at"}


def items(f):
    out = {}
    f.visititems(lambda name, obj: out.__setitem__(name, obj))
    return out


def same_value(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.hasobject:  # variable-length strings: compare the values, not the pointers
        return a.tolist() == b.tolist()
    return a.tobytes() == b.tobytes()  # bitwise: NaN == NaN, -0 != +0


def compare_attrs(where, a, b, skip=frozenset()):
    errors = []
    for key in sorted((set(a.keys()) | set(b.keys())) - skip):
        if key not in a or key not in b:
            errors.append(f"{where}: attribute {key} only in {'second' if key not in a else 'first'} file")
        elif not same_value(a[key], b[key]):
            errors.append(f"{where}: attribute {key} differs: {a[key]!r} vs {b[key]!r}")
    return errors


def report(errors, a, b, same):
    """Prints the first differences or `same`; the exit code."""
    for e in errors[:30]:
        print("compare:", e)
    if errors:
        print(f"compare: {len(errors)} difference(s) between {a} and {b}")
        return 1
    print(f"compare: {same}")
    return 0


def main():
    with h5py.File(sys.argv[1], "r") as fa, h5py.File(sys.argv[2], "r") as fb:
        errors = compare_attrs("/", fa.attrs, fb.attrs, PROVENANCE)
        ia, ib = items(fa), items(fb)
        for name in sorted(set(ia) ^ set(ib)):
            errors.append(f"/{name} only in {'first' if name in ia else 'second'} file")
        n_data = 0
        for name in sorted(set(ia) & set(ib)):
            a, b = ia[name], ib[name]
            errors += compare_attrs("/" + name, a.attrs, b.attrs)
            if isinstance(a, h5py.Dataset) != isinstance(b, h5py.Dataset):
                errors.append(f"/{name}: dataset in one file, group in the other")
            elif isinstance(a, h5py.Dataset):
                n_data += 1
                if not same_value(a[()], b[()]):
                    errors.append(f"/{name}: data differ ({a.dtype}{a.shape} vs {b.dtype}{b.shape})")
        n_rec = len(fa["records"]) if "records" in fa else 0
    return report(errors, sys.argv[1], sys.argv[2],
                  f"identical: {n_rec} records, {n_data} datasets, all attributes but provenance")


if __name__ == "__main__":
    sys.exit(main())

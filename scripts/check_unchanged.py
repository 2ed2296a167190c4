#!/usr/bin/env python3
"""Compares two folders written by `scripts/check_unchanged.sh run` (see there).

    /usr/bin/python3 scripts/check_unchanged.py BEFORE AFTER

Every file of BEFORE must be in AFTER and the other way round, and hold the same:
  * .h5: the same groups, datasets (dtype, shape and bytes) and attributes, except the
    provenance times ("created", "merged_at") and the build ("git_commit");
  * .json: the same JSON value with the same exceptions, wherever they are nested;
  * the attribute or key "settings" (a JSON object): every key of BEFORE with the same value in
    AFTER; keys AFTER adds are listed (one settings schema serialises every selection flag,
    where some subcommands listed only some), not counted as a difference;
  * everything else (.csv, .jsonl, console_NN.out/.err/.rc): the same bytes, after replacing
    durations ("0.123 s", "1234 tokens/s") by a placeholder.
Exit status 0 when nothing differs, 1 otherwise; each difference is printed on one line.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import h5py
import numpy as np

IGNORED = {"created", "merged_at", "git_commit"}
DURATION = [(re.compile(rb"\d+(\.\d+)? s\b"), b"<T> s"), (re.compile(rb"\d+(\.\d+)? tokens/s"), b"<R> tokens/s"),
            (re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"), b"<TIME>"),
            (re.compile(rb"^git_commit +\S+$", re.M), b"git_commit <COMMIT>")]

differences: list[str] = []
added_settings: set[str] = set()


def differ(where: str, what: str) -> None:
    differences.append(f"{where}: {what}")


def compare_settings(where: str, a, b) -> None:
    if not isinstance(a, dict) or not isinstance(b, dict):
        if a != b:
            differ(where, f"settings {a!r} != {b!r}")
        return
    for k, v in a.items():
        if k not in b:
            differ(where, f"settings key {k!r} gone")
        elif b[k] != v:
            differ(where, f"settings[{k!r}] {v!r} != {b[k]!r}")
    added_settings.update(f"{k}" for k in b if k not in a)


def compare_json(where: str, a, b) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in IGNORED:
                continue
            if k not in a or k not in b:
                differ(where, f"key {k!r} only in {'after' if k in b else 'before'}")
            elif k == "settings":
                compare_settings(f"{where}.settings", a[k], b[k])
            else:
                compare_json(f"{where}.{k}", a[k], b[k])
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            compare_json(f"{where}[{i}]", x, y)
    elif isinstance(a, str) and isinstance(b, str) and a != b and embedded_json(a) is not None:
        compare_json(where, embedded_json(a), embedded_json(b))  # provenance lists stored as JSON text
    elif a != b and not (isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b)):
        differ(where, f"{a!r} != {b!r}")


def embedded_json(text: str):
    if not text.startswith(("[", "{")):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def attr_value(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return [attr_value(x) for x in v.tolist()] if v.dtype.kind == "O" else v.tolist()
    return v


def compare_attrs(where: str, a: h5py.AttributeManager, b: h5py.AttributeManager) -> None:
    for k in sorted(set(a.keys()) | set(b.keys())):
        if k in IGNORED:
            continue
        if k not in a or k not in b:
            differ(where, f"attribute {k!r} only in {'after' if k in b else 'before'}")
            continue
        x, y = attr_value(a[k]), attr_value(b[k])
        if k == "settings":
            compare_settings(f"{where}@settings", json.loads(x), json.loads(y))
        elif isinstance(x, list) and isinstance(y, list) and np.asarray(a[k]).dtype.kind != "O":
            if np.asarray(a[k]).tobytes() != np.asarray(b[k]).tobytes():
                differ(where, f"attribute {k!r} {x!r} != {y!r}")
        else:
            compare_json(f"{where}@{k}", x, y)


def compare_h5(where: str, a: Path, b: Path) -> None:
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        def walk(name: str, ga: h5py.Group, gb: h5py.Group) -> None:
            compare_attrs(f"{where}:{name}", ga.attrs, gb.attrs)
            for k in sorted(set(ga.keys()) | set(gb.keys())):
                path = f"{name.rstrip('/')}/{k}"
                if k not in ga or k not in gb:
                    differ(f"{where}:{path}", f"only in {'after' if k in gb else 'before'}")
                    continue
                xa, xb = ga[k], gb[k]
                if isinstance(xa, h5py.Group) and isinstance(xb, h5py.Group):
                    walk(path, xa, xb)
                elif isinstance(xa, h5py.Dataset) and isinstance(xb, h5py.Dataset):
                    compare_attrs(f"{where}:{path}", xa.attrs, xb.attrs)
                    if xa.dtype != xb.dtype or xa.shape != xb.shape:
                        differ(f"{where}:{path}", f"{xa.dtype}{xa.shape} != {xb.dtype}{xb.shape}")
                    elif np.asarray(xa[()]).tobytes() != np.asarray(xb[()]).tobytes():
                        differ(f"{where}:{path}", "data differ")
                else:
                    differ(f"{where}:{path}", "a group in one file, a dataset in the other")
        walk("/", fa, fb)


def normalised(data: bytes) -> bytes:
    for pattern, placeholder in DURATION:
        data = pattern.sub(placeholder, data)
    return data


def main() -> int:
    before, after = Path(sys.argv[1]), Path(sys.argv[2])
    names_a = {p.relative_to(before) for p in before.rglob("*") if p.is_file() and p.name != "ckv"}
    names_b = {p.relative_to(after) for p in after.rglob("*") if p.is_file() and p.name != "ckv"}
    for n in sorted(names_a ^ names_b):
        differ(str(n), f"only in {'after' if n in names_b else 'before'}")
    for n in sorted(names_a & names_b):
        a, b = before / n, after / n
        if n.suffix == ".h5":
            compare_h5(str(n), a, b)
        elif n.suffix == ".json":
            compare_json(str(n), json.loads(a.read_text()), json.loads(b.read_text()))
        elif normalised(a.read_bytes()) != normalised(b.read_bytes()):
            differ(str(n), "bytes differ")
    for d in differences:
        print(d)
    if added_settings:
        print(f"settings keys added (not a difference): {', '.join(sorted(added_settings))}")
    print(f"{len(names_a & names_b)} files compared, {len(differences)} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())

"""Every ckv output reads with h5py alone (docs/ANALYSIS.md "Reading with h5py alone"):
each dataset has a `description` (and `unit` where it has one), token ids carry their text,
bound and eval budgets are numbers, every schema names a record's token count, context end
and prompt ids alike (n_tokens, context_end, tokens: bound 3, eval 3, mask 2), and an older
file is refused by ckv and read by analysis/ckv_reader.py with the new names. Also: a placebo search that finds fewer spans than asked for is a
note on the record, not a failed batch.

Environment: CKV_BINARY, CKV_MODEL; tests skip when either is absent.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
BINARY = os.environ.get("CKV_BINARY", str(ROOT / "build" / "ckv"))
MODEL = os.environ.get("CKV_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))

pytestmark = pytest.mark.skipif(not (Path(BINARY).exists() and Path(MODEL).exists()),
                                reason="ckv binary or default model absent")

from analysis.ckv_reader import open_ckv  # noqa: E402


def ckv(*args, ok=True):
    r = subprocess.run([BINARY, "-q", *args], capture_output=True, text=True)
    if ok:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("described")
    m = ["-m", MODEL, "-t", "2"]
    ckv("dump", *m, "--layers", "0,1,10", "--what", "q,k,v,attn,nu,logits", "-o", str(tmp / "dump.h5"))
    ckv("bound", *m, "--budgets", "0.1,0.2", "--layers", "0,1", "-o", str(tmp / "bound"))
    mask = ckv("mask", *m, "--span-name", "answer_evidence", "--placebo", "2", "--match-tol", "0",
               "-o", str(tmp / "mask.h5"))
    ckv("niah", "-m", MODEL, "--length", "256", "--count", "1", "--seed", "2", "-o", str(tmp / "niah.jsonl"))
    ckv("eval", *m, "-i", str(tmp / "niah.jsonl"), "--methods", "snapkv", "--budgets", "0.2",
        "--max-new-tokens", "4", "-o", str(tmp / "eval"))
    return tmp, mask


def datasets(f):
    out = []
    f.visititems(lambda name, obj: out.append((name, obj)) if isinstance(obj, h5py.Dataset) else None)
    return out


@pytest.mark.parametrize("name", ["dump.h5", "bound.h5", "mask.h5", "eval.h5"])
def test_every_dataset_has_a_description(outs, name):
    tmp, _ = outs
    with h5py.File(tmp / name, "r") as f:
        found = datasets(f)
        assert found
        missing = [n for n, d in found if not str(d.attrs.get("description", "")).strip()]
        assert not missing, f"{name}: no description on {missing}"


def test_units_where_values_have_one(outs):
    tmp, _ = outs
    with h5py.File(tmp / "bound.h5", "r") as f:
        rec = f["records"][next(iter(f["records"]))]
        assert rec["kept_count"].attrs["unit"] == "entries"
    with h5py.File(tmp / "dump.h5", "r") as f:
        rec = f["records"][next(iter(f["records"]))]
        assert rec["layers/0/attn"].attrs["unit"] == "probability"
        assert rec["logits_last"].attrs["unit"] == "logit"


@pytest.mark.parametrize("name,path", [("dump.h5", "tokens"), ("mask.h5", "tokens"), ("eval.h5", "tokens"),
                                       ("eval.h5", "runs/1/tokens")])
def test_token_text_beside_ids(outs, name, path):
    tmp, _ = outs
    with h5py.File(tmp / name, "r") as f:
        rec = f["records"][next(iter(f["records"]))]
        ids = rec[path][()]
        text = json.loads(rec[path].attrs["token_text"])
        assert len(text) == len(ids) and all(isinstance(t, str) for t in text)
        assert "".join(text).strip()


def test_dump_token_text_is_the_prompt(outs):
    tmp, _ = outs
    with h5py.File(tmp / "dump.h5", "r") as f:
        rec = f["records"][next(iter(f["records"]))]
        text = "".join(json.loads(rec["tokens"].attrs["token_text"]))
        assert rec.attrs["context"] in text


def test_layer_groups_listed_in_order(outs):
    tmp, _ = outs
    with h5py.File(tmp / "dump.h5", "r") as f:
        layers = f["records"][next(iter(f["records"]))]["layers"]
        assert list(layers) == ["0", "1", "10"] or list(layers) == sorted(["0", "1", "10"])
        assert "key=int" in layers.attrs["description"]
        assert sorted(layers, key=int) == ["0", "1", "10"]


def test_bound_budgets_are_numbers(outs):
    tmp, _ = outs
    with h5py.File(tmp / "bound.h5", "r") as f:
        assert np.allclose(f.attrs["budget_fractions"], [0.1, 0.2])
        assert f.attrs["schema_version"] == 3


def test_one_vocabulary_across_schemas(outs):
    """Every record's token count is n_tokens, its context end context_end, its prompt ids
    tokens; fractions are budget_fractions at the root of bound and eval (bound 3, eval 3,
    mask 2, dump 1)."""
    tmp, _ = outs
    versions = {"bound.h5": 3, "eval.h5": 3, "mask.h5": 2}
    for name, version in versions.items():
        with h5py.File(tmp / name, "r") as f:
            assert f.attrs["schema_version"] == version, name
            rec = f["records"][next(iter(f["records"]))]
            assert "n_tokens" in rec.attrs and "n" not in rec.attrs and "prompt_tokens" not in rec.attrs, name
            assert 0 < rec.attrs["context_end"] <= rec.attrs["n_tokens"], name
    with h5py.File(tmp / "eval.h5", "r") as f:
        assert np.allclose(f.attrs["budget_fractions"], [0.2]) and "budgets" not in f.attrs
        rec = f["records"][next(iter(f["records"]))]
        assert "context_end" in rec.attrs and "c" not in rec.attrs
        assert "tokens" in rec and "prompt" not in rec
        assert list(rec.attrs["run_labels"]) == ["full cache", "snapkv 20%"]
        assert rec["runs/1"].attrs["label"] == "snapkv 20%"
        assert 0 < rec.attrs["context_end"] <= rec["tokens"].shape[0]


def test_eval_version_1_refused_by_ckv_and_read_by_the_reader(outs, tmp_path):
    tmp, _ = outs
    old = tmp_path / "eval_v1.h5"
    shutil.copy(tmp / "eval.h5", old)
    with h5py.File(old, "r+") as f:     # back to the version-1 names
        f.attrs["schema_version"] = 1
        f.attrs["budgets"] = f.attrs["budget_fractions"]
        del f.attrs["budget_fractions"]
        for rec in f["records"].values():
            rec.attrs["c"] = rec.attrs["context_end"]
            rec.attrs["n"] = rec.attrs["n_tokens"]
            del rec.attrs["context_end"], rec.attrs["n_tokens"]
            rec.move("tokens", "prompt")
    r = ckv("info", str(old), ok=False)
    assert r.returncode == 1 and "version 1" in r.stderr and "version 3" in r.stderr
    new = open_ckv(tmp / "eval.h5")
    read = open_ckv(old)
    assert read.version == 1
    assert read.records[0].attrs["context_end"] == new.records[0].attrs["context_end"]
    assert read.records[0].attrs["n_tokens"] == new.records[0].attrs["n_tokens"]
    assert read.budgets == new.budgets == [0.2]


def test_older_bound_and_mask_files_are_read_with_the_new_names(outs, tmp_path):
    tmp, _ = outs
    for name, version, old_name in (("bound.h5", 2, "n"), ("mask.h5", 1, "prompt_tokens")):
        old = tmp_path / name
        shutil.copy(tmp / name, old)
        with h5py.File(old, "r+") as f:
            f.attrs["schema_version"] = version
            for rec in f["records"].values():
                rec.attrs[old_name] = rec.attrs["n_tokens"]
                del rec.attrs["n_tokens"]
        r = ckv("info", str(old), ok=False)
        assert r.returncode == 1 and f"version {version}" in r.stderr, r.stderr
        new, read = open_ckv(tmp / name), open_ckv(old)
        assert read.version == version
        if name == "bound.h5":
            assert read.records[0].n_tokens == new.records[0].n_tokens > 0
        else:
            assert read.records[0].attrs["n_tokens"] == new.records[0].attrs["n_tokens"] > 0


def test_too_few_placebos_is_a_note_not_a_failure(outs):
    tmp, run = outs
    assert "note" in run.stderr and "--match-tol" in run.stderr
    assert "of 2 placebo spans found" in run.stderr
    with h5py.File(tmp / "mask.h5", "r") as f:
        rec = f["records"][next(iter(f["records"]))]
        p = json.loads(rec.attrs["placebo"])
        assert p["requested"] == 2 and p["found"] < 2 and "--match-tol" in p["note"]
        runs = list(rec.attrs["runs"])
        assert runs[0] == "target" and len(runs) == 1 + p["found"]
        assert bool(rec.attrs["complete"])

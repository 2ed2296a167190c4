"""--compute-dtype on every subcommand that runs the forward pass (issue 12, item 3).

A build with oneDNN (`gemm_engine` "onednn" in `ckv forward --timing-json`) runs bf16 and
records it in the output's provenance; a build without it refuses bf16 with exactly one line
`ckv: error: ...` and exit 2 on each subcommand, before reading any input. An unknown value
is refused the same way by either build. (The bf16 arithmetic itself is checked in
tests/test_linear_engine.cpp.)

Environment: CKV_BINARY (the ckv executable), CKV_MODEL (the default model; tests skip
when it is absent).
"""
import json
import os
import subprocess
from pathlib import Path

import h5py
import pytest

ROOT = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("CKV_BINARY", str(ROOT / "build" / "ckv"))
MODEL = os.environ.get("CKV_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
SUBCOMMANDS = ["forward", "dump", "bound", "check", "mask", "eval", "profile"]


def absent_input(sub, tmp_path):
    """An input that would fail later (a missing file), in the flag the subcommand has: the
    dtype must be refused first. forward has no --input (an unknown flag is named first)."""
    return ["--prompt-file" if sub == "forward" else "--input", str(tmp_path / "absent.jsonl")]

pytestmark = pytest.mark.skipif(not Path(MODEL).exists(), reason="default model absent")


def ckv(*args):
    return subprocess.run([BINARY, "-q", *args], capture_output=True, text=True)


def timing(tmp_path, *flags):
    ids = tmp_path / "ids.txt"
    ids.write_text(" ".join(str(17 + 37 * i) for i in range(24)))
    r = ckv("forward", "--model", MODEL, "--tokens", str(ids), "--timing-json", "--generate", "0",
            "-t", "2", *flags)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return timing(tmp_path_factory.mktemp("engine"))["gemm_engine"]


def assert_one_line_usage_error(r, *words):
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckv: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_unknown_compute_dtype_refused(sub, tmp_path):
    r = ckv(sub, "--model", MODEL, "--compute-dtype", "fp8", *absent_input(sub, tmp_path))
    assert_one_line_usage_error(r, "--compute-dtype", "fp8")


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_bf16_refused_without_onednn(sub, engine, tmp_path):
    if engine != "eigen":
        pytest.skip("this build has oneDNN: bf16 runs")
    r = ckv(sub, "--model", MODEL, "--compute-dtype", "bf16", *absent_input(sub, tmp_path))
    assert_one_line_usage_error(r, "--compute-dtype", "bf16", "oneDNN")


def test_bf16_runs_and_is_recorded(engine, tmp_path):
    if engine != "onednn":
        pytest.skip("built without oneDNN: bf16 is refused (test above)")
    t32, t16 = timing(tmp_path), timing(tmp_path, "--compute-dtype", "bf16")
    assert (t32["compute_dtype"], t16["compute_dtype"]) == ("f32", "bf16")
    # How bf16 multiplies on this CPU: native bf16 instructions, or float32 sgemm on bf16 values.
    assert "bf16_kernel" not in t32
    assert t16["bf16_kernel"] in ("onednn-bf16-matmul", "onednn-sgemm-on-bf16-values"), t16
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps({"id": "a", "context": "The Eiffel Tower stands in Paris. " * 4}) + "\n")
    for dtype in ("f32", "bf16"):
        out = tmp_path / f"{dtype}.h5"
        r = ckv("dump", "--model", MODEL, "-t", "2", "--input", str(jsonl), "-o", str(out), "--layers", "0",
                "--what", "q,logits", "--compute-dtype", dtype)
        assert r.returncode == 0, r.stderr
        with h5py.File(out, "r") as f:
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            assert attrs["compute_dtype"] == dtype, attrs
            assert attrs["gemm_engine"] == "onednn", attrs
            assert (attrs.get("bf16_kernel") == t16["bf16_kernel"]) == (dtype == "bf16"), attrs

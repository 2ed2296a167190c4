"""Q/K/V of some layers by `ckv dump` (f16), for the selection-golden scripts.

The selection references take each layer's q/k/v from ckv's forward pass, which the forward
goldens prove equal to HF transformers' (make_forward_goldens.py); what they check is the
selection computed from them, in NumPy or in the official code, never ckv's own selection.
"""
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def dump_layers(model, layers, tokens_or_text, workdir, name, what):
    """Runs `ckv dump --what WHAT --dtype f16` of `layers` on a text or on a list of token ids
    ($CKV_BINARY, else build/ckv) and returns one tuple per layer, in the order of `what`
    ("q", "k", "v", "wo"; "wo" is the model's W_O of that layer as float32)."""
    ckv = os.environ.get("CKV_BINARY", str(ROOT / "build/ckv"))
    out = Path(workdir) / f"{name}.h5"
    args = [ckv, "-q", "dump", "--model", str(model), "--what", ",".join(what), "--dtype", "f16",
            "--layers", ",".join(map(str, layers)), "-o", str(out), "--force"]
    if isinstance(tokens_or_text, list):
        tok = Path(workdir) / f"{name}.tokens"
        tok.write_text(" ".join(map(str, tokens_or_text)))
        args += ["--tokens", str(tok)]
    else:
        txt = Path(workdir) / f"{name}.txt"
        txt.write_text(tokens_or_text)
        args += ["--prompt-file", str(txt)]
    subprocess.check_call(args)
    res = {}
    with h5py.File(out) as f:
        rec = f["records"][list(f["records"].keys())[0]]
        for l in layers:
            res[l] = tuple(f[f"model/layers/{l}/W_O"][:].astype(np.float32) if x == "wo"
                           else rec[f"layers/{l}/{x}"][:] for x in what)
    return res

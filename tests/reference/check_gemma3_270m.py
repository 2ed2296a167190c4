#!/usr/bin/env python3
"""Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf, scripts/fetch_model.sh gemma3-270m):
ckv's forward pass against HF transformers loading the same GGUF (its gguf integration
dequantises every tensor to float32 and builds Gemma3ForCausalLM), issue 27 item 4.

The prompts are tokenised by llama.cpp (llama-cpp-python, the reference for a GGUF
vocabulary; transformers' tokenizer built from this GGUF splits words into fragments and
adds no BOS), and ckv's tokens for the same text are compared with them. Each prompt runs
through `ckv dump --what logits` and through HF in float32 (eager attention); the check is
the C++ golden tests' tolerance: max |logit difference| <= 1e-3 x the logit range of the
last row, and the same argmax.
One prompt is longer than the 512-key window, so the local layers' window is exercised.

Usage: check_gemma3_270m.py [--binary build/ckv]   (exit 1 on a mismatch)
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import torch
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[2]
GGUF = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"
# Not tuned to anything: a sentence, code, and a long paragraph past the 512-key window.
PROMPTS = [
    "The tallest mountain in the Alps is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    " ".join(["Rivers carry sediment from the mountains to the sea, and over thousands of years"
              " the deltas they build change the shape of coastlines."] * 30) + " In short,",
]


def llama_cpp_tokens(text):
    from llama_cpp import Llama
    tok = Llama(model_path=str(GGUF), vocab_only=True, verbose=False)
    return tok.tokenize(text.encode(), add_bos=True, special=True)


def ckv_run(binary, tmp, name, text=None, tokens=None):
    out = tmp / f"{name}.h5"
    args = [binary, "-q", "dump", "--model", str(GGUF), "--what", "logits", "-o", str(out), "--force"]
    if tokens is not None:
        path = tmp / f"{name}.txt"
        path.write_text(" ".join(str(t) for t in tokens))
        args += ["--tokens", str(path)]
    else:
        path = tmp / f"{name}.prompt"
        path.write_text(text)
        args += ["--prompt-file", str(path)]
    subprocess.run(args, check=True)
    with h5py.File(out, "r") as f:
        rec = f["records"][next(iter(f["records"]))]
        return dict(tokens=rec["tokens"][()] if "tokens" in rec else None,
                    logits=rec["logits_last"][()])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(ROOT / "build" / "ckv"))
    a = ap.parse_args()
    if not GGUF.exists():
        sys.exit(f"{GGUF} missing: scripts/fetch_model.sh gemma3-270m")
    model = AutoModelForCausalLM.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name,
                                                 dtype=torch.float32, attn_implementation="eager").eval()
    ok = True
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for i, text in enumerate(PROMPTS):
            ids = llama_cpp_tokens(text)
            ours_text = ckv_run(a.binary, tmp, f"text{i}", text=text)
            ours = ckv_run(a.binary, tmp, f"ids{i}", tokens=ids)
            same_tokens = ours_text["tokens"] is None or list(ours_text["tokens"]) == list(ids)
            with torch.no_grad():
                logits = model(torch.tensor([ids]), use_cache=False).logits[0, -1].numpy()
            err = np.abs(ours["logits"].reshape(-1) - logits).max() / np.ptp(logits)
            same_arg = int(ours["logits"].reshape(-1).argmax()) == int(logits.argmax())
            print(f"prompt {i}: {len(ids)} tokens (llama.cpp), ckv tokens {'equal' if same_tokens else 'DIFFER'}; "
                  f"max |logit diff| / range {err:.2e}, argmax {'same' if same_arg else 'DIFFERENT'} "
                  f"({int(logits.argmax())})")
            ok = ok and same_tokens and same_arg and err <= 1e-3
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

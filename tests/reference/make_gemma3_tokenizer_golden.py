#!/usr/bin/env python3
"""llama.cpp's ids for the stress strings (tokenizer_cases.HARD / NO_SPECIAL) under Gemma 3
270M's GGUF vocabulary (models/gemma-3-270m-q4_k_m.gguf, scripts/fetch_model.sh gemma3-270m):
SentencePiece-style BPE over 262,144 tokens with byte fallback, no prefix space, BOS <bos>.
llama.cpp (llama-cpp-python) is the reference for a GGUF vocabulary; transformers' tokenizer
built from this GGUF splits words into fragments and adds no BOS (issue 27), so it is not used.

Writes tests/data/tokenizers/golden_gemma3_llamacpp.json (the test skips without the model).
Usage: python3 tests/reference/make_gemma3_tokenizer_golden.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from make_tokenizer_goldens import FORMAT_VERSION, ROOT, dump, llamacpp_records  # noqa: E402
from tokenizer_cases import HARD, NO_SPECIAL  # noqa: E402

GGUF = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")


def main():
    import llama_cpp
    if not os.path.exists(GGUF):  # opt-in model: make_all.py goes on without it
        print(f"skip: {GGUF} missing (scripts/fetch_model.sh gemma3-270m)")
        return
    golden = {"format_version": FORMAT_VERSION, "generator": "tests/reference/make_gemma3_tokenizer_golden.py",
              "llama_cpp_python_version": llama_cpp.__version__, "strings": HARD,
              "no_special_strings": NO_SPECIAL,
              "gguf": {"gemma3_270m": {"file": "models/gemma-3-270m-q4_k_m.gguf", **llamacpp_records(GGUF)}}}
    dump(golden, "golden_gemma3_llamacpp.json")


if __name__ == "__main__":
    main()

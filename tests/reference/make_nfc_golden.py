#!/usr/bin/env python3
"""NFC normalisation golden: the trained Qwen2-style tokenizer of tests/data/tokenizers with
the NFC normalizer that real Qwen2 tokenizer.json files carry, and the ids HF `tokenizers`
gives for strings whose NFC form differs from their input.

    python3 tests/reference/make_nfc_golden.py   # needs tokenizers from PyPI
"""
import json
import os

from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "tokenizers")

CASES = [
    "Cafe\u0301 na\u0131\u0308ve re\u0301sume\u0301",     # combining acute / diaeresis
    "\u212b ngstro\u0308m \u2126hm",                     # singleton decompositions (Angstrom, Ohm)
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab",             # conjoining Hangul jamo -> syllables
    "A\u030a and \u00c5 and \u212b",                     # three spellings of one letter
    "plain ascii 123 text",
    "<|im_start|>e\u0301<|im_end|>",                     # specials are not normalised
    "\ufb01 ligature and \u00bd stay (NFC, not NFKC)",
]


def main():
    src = os.path.join(DATA, "qwen2.tokenizer.json")
    with open(src, encoding="utf-8") as f:
        tj = json.load(f)
    tj["normalizer"] = {"type": "NFC"}
    dst = os.path.join(DATA, "qwen2-nfc.tokenizer.json")
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
    tok = Tokenizer.from_file(dst)
    golden = {"format_version": 1, "generator": "tests/reference/make_nfc_golden.py",
              "tokenizer": "qwen2-nfc.tokenizer.json",
              "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in CASES]}
    with open(os.path.join(DATA, "golden_nfc.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()

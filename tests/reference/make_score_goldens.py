#!/usr/bin/env python3
"""Answer-scoring golden (tests/data/answer_score/golden_v1.json): the scores the official
RULER and LongBench scripts give a table of (prediction, references) cases, which
tests/test_answer_score.cpp compares lib/data/answer_score.cpp with.

    python3 tests/reference/make_score_goldens.py      # plain Python 3, no packages

The definitions below are written from the official sources (read, not copied):

* RULER, github.com/NVIDIA/RULER at c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a:
  scripts/eval/evaluate.py `postprocess_pred` (strip; every character U+0000-U+001F
  becomes "\\n"; strip again) and scripts/eval/synthetic/constants.py `string_match_all`
  (per reference: 1 if ref.lower() is a substring of pred.lower(); the mean over the
  references) and `string_match_part` (the max). RULER reports the mean over records x 100
  rounded to 2 decimals; here the per-record value in [0, 1].
* LongBench, github.com/THUDM/LongBench at 2e00731f8d0bff23dc4325161044d0ed8af94c1e:
  LongBench/metrics.py `normalize_answer` and `qa_f1_score` (SQuAD v1.1's
  evaluate-v1.1.py: lower-case, drop the characters of string.punctuation, replace the
  words a/an/the (re `\\b(a|an|the)\\b`, Unicode word boundaries) by a space, split on
  whitespace and join with single spaces; F1 of the Counter overlap of the tokens, 0 when
  nothing overlaps), LongBench/eval.py `scorer` (the max over the references; for
  trec/triviaqa/samsum/lsht the prediction is first cut to `pred.lstrip('\\n')
  .split('\\n')[0]`). Exact match is SQuAD v1.1's `exact_match_score`
  (normalize_answer(pred) == normalize_answer(ref)), max over the references.
* NIAH exact match (ckv's own, documented in lib/data/answer_score.h): SQuAD exact
  match against the references joined by ", " (the record's "answer").

Predictions given as bytes (`prediction_hex`) are decoded as UTF-8 with errors="replace"
(what a detokeniser gives for a generation cut inside a character).

Besides the cases, the golden lists the Python str properties the C++ code reimplements,
over Unicode blocks that are the same in Python's Unicode 14 and ICU's 15:
`str.lower()`, `str.isspace()` (all of Unicode) and the re module's `\\w`.
"""
import json
import re
import string
import sys
import unicodedata
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "answer_score" / "golden_v1.json"


# --- RULER ---------------------------------------------------------------------------

def ruler_postprocess(pred):
    pred = pred.strip()
    pred = "".join("\n" if ord(ch) < 0x20 else ch for ch in pred)
    return pred.strip()


def ruler_contains(pred, refs):
    pred = ruler_postprocess(pred).lower()
    return [ref.lower() in pred for ref in refs]


def string_match_all(pred, refs):
    flags = ruler_contains(pred, refs)
    return sum(1.0 for f in flags if f) / len(flags)


def string_match_part(pred, refs):
    return max(1.0 if f else 0.0 for f in ruler_contains(pred, refs))


# --- LongBench / SQuAD v1.1 ----------------------------------------------------------

PUNCTUATION = set(string.punctuation)
ARTICLE = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text):
    text = text.lower()
    text = "".join(ch for ch in text if ch not in PUNCTUATION)
    text = ARTICLE.sub(" ", text)
    return " ".join(text.split())


def qa_f1(pred, ref):
    pred_tokens = normalize_answer(pred).split()
    ref_tokens = normalize_answer(ref).split()
    overlap = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def qa_exact(pred, ref):
    return normalize_answer(pred) == normalize_answer(ref)


def first_line(pred):
    return pred.lstrip("\n").split("\n")[0]


# --- cases ---------------------------------------------------------------------------

CASES = [
    # NIAH (RULER)
    ("niah", " 8072723.", ["8072723"]),
    ("niah", "8072723", ["8072723"]),
    ("niah", "The special magic numbers are 8528032 and 6369474.", ["8528032", "6369474"]),
    ("niah", "8528032, 6369474", ["8528032", "6369474"]),
    ("niah", "6369474, 8528032", ["8528032", "6369474"]),
    ("niah", " 8528032.\nThe special magic number is", ["8528032", "6369474"]),
    ("niah", "no number here", ["8528032", "6369474", "1234567"]),
    ("niah", "ECD4BDEB-8B4C-4A2D-9C1F-0E7A3B5D6F81", ["ecd4bdeb-8b4c-4a2d-9c1f-0e7a3b5d6f81"]),
    ("niah", "", ["8072723"]),
    ("niah", " \t\n ", ["8072723"]),
    ("niah", "\t\x01 80727\x1f23 \x0b", ["80727\n23"]),        # control characters become \n
    ("niah", "a\tb", ["a\tb"]),                                # ... so a reference's tab no longer matches
    ("niah", "  807 2723  ", [" 807"]),                         # strip: the leading space is gone
    ("niah", "80727230", ["8072723"]),                          # a substring counts (RULER's rule)
    ("niah", "\u00a0 8072723 \u3000", ["8072723"]),             # Unicode whitespace is stripped
    ("niah", "8072723\u200b", ["8072723\u200b"]),               # ZERO WIDTH SPACE is not whitespace
    ("niah", "Straße", ["STRASSE", "straße"]),                 # lower() keeps ß
    # QA (LongBench)
    ("qa", "Six years.", ["six"]),
    ("qa", "six", ["six"]),
    ("qa", "The Senate", ["senate"]),
    ("qa", "an apple and the orange", ["apple and orange"]),
    ("qa", "another theory", ["theory"]),                       # an/the inside words stay
    ("qa", "a-the b", ["the ab"]),                              # punctuation goes before articles
    ("qa", "the the cat cat cat", ["cat cat dog"]),             # multiset overlap
    ("qa", "cat", ["cat cat cat"]),
    ("qa", "Joseph, son of Jacob", ["Joseph", "the son of Jacob", "Reuben"]),
    ("qa", "twenty pieces of silver", ["twenty"]),
    ("qa", "", ["six"]),
    ("qa", "the", ["a"]),                                       # both normalise to "": EM 1, F1 0
    ("qa", "  ", ["six"]),
    ("qa", "\u201cCantonese\u201d", ["Cantonese"]),             # curly quotes are not string.punctuation
    ("qa", "\"Cantonese\"", ["Cantonese"]),
    ("qa", "Caf\u00e9\u2014the na\u00efve", ["cafe naive", "caf\u00e9\u2014 na\u00efve"]),
    ("qa", "Th\u00e9 au lait", ["th\u00e9"]),                    # "thé" is not the article
    ("qa", "the\u0301 end", ["end"]),                           # a combining mark is not \w: "the" goes
    ("qa", "the\u00b2 end", ["end"]),                           # superscript two is \w (numeric): "the" stays
    ("qa", "3the the3 _the_ the_", ["3the the3"]),
    ("qa", "six\u00a0years", ["six years"]),                    # NBSP splits
    ("qa", "six\u200byears", ["six years"]),                    # ZWSP does not
    ("qa", "\u0130stanbul", ["istanbul", "i\u0307stanbul"]),    # İ lowers to i + U+0307
    ("qa", "\u039f\u0394\u039f\u03a3 \u03a3", ["\u03bf\u03b4\u03bf\u03c2 \u03c3", "\u03bf\u03b4\u03bf\u03c3"]),  # final sigma
    ("qa", "\uff21\uff22\uff23 \u216b", ["\uff41\uff42\uff43 \u217b"]),  # fullwidth, roman numeral
    ("qa", "\n\nsix\nyears of service", ["six"]),               # first line: "six"
    ("qa", "six years\n\nthe end", ["six years"]),
    ("qa", "Answer: as of the date such litigation is filed.", ["as of the date such litigation is filed"]),
    ("qa", "42", ["forty-two", "42"]),
    ("qa", "A", ["a", "A."]),
    ("qa", "x y z x y z", ["z y x"]),
]

BYTE_CASES = [
    ("qa", b"six\xe2\x82", ["six"]),                          # a generation cut inside "€"
    ("qa", b"\xffthe end\xc3", ["end"]),
    ("niah", b"80727\xed\xa0\x8023", ["8072723", "80727"]),   # an encoded surrogate: 3 bytes, 3 replacements
    ("niah", b"\xf0\x9f\x98 8072723", ["8072723"]),
]


def score(task, pred, refs):
    joined = ", ".join(refs)
    out = {
        "task": task,
        "references": refs,
        "ruler_postprocessed": ruler_postprocess(pred),
        "contains": ruler_contains(pred, refs),
        "string_match_all": string_match_all(pred, refs),
        "string_match_part": string_match_part(pred, refs),
        "normalized": normalize_answer(pred),
        "normalized_references": [normalize_answer(r) for r in refs],
        "f1_each": [qa_f1(pred, r) for r in refs],
        "exact_each": [qa_exact(pred, r) for r in refs],
        "f1_joined": qa_f1(pred, joined),
        "exact_joined": qa_exact(pred, joined),
        "first_line": first_line(pred),
        "first_line_f1": max(qa_f1(first_line(pred), r) for r in refs),
        "first_line_exact": any(qa_exact(first_line(pred), r) for r in refs),
    }
    if task == "niah":
        out.update(exact_match=out["exact_joined"], f1=out["f1_joined"], score=out["string_match_all"])
    else:
        out.update(exact_match=any(out["exact_each"]), f1=max(out["f1_each"]), score=max(out["f1_each"]))
    return out


# Unicode blocks whose properties did not change between Unicode 14 and 15.
BLOCKS = [(0x0000, 0x058F), (0x1E00, 0x1FFF), (0x2000, 0x218F), (0x2460, 0x24FF),
          (0x3000, 0x303F), (0xFF00, 0xFFEF), (0x10400, 0x1044F)]


def ranges(codes):
    out = []
    for c in codes:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def main():
    cases = []
    for task, pred, refs in CASES:
        cases.append({"prediction": pred, **score(task, pred, refs)})
    for task, raw, refs in BYTE_CASES:
        pred = raw.decode("utf-8", errors="replace")
        cases.append({"prediction_hex": raw.hex(), "decoded": pred, **score(task, pred, refs)})
    word = re.compile(r"\w")
    in_blocks = [c for lo, hi in BLOCKS for c in range(lo, hi + 1)]
    golden = {
        "format_version": 1,
        "generator": "tests/reference/make_score_goldens.py",
        "python": sys.version.split()[0],
        "unicode": unicodedata.unidata_version,
        "sources": {"ruler": "NVIDIA/RULER@c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a "
                             "scripts/eval/evaluate.py, scripts/eval/synthetic/constants.py",
                    "longbench": "THUDM/LongBench@2e00731f8d0bff23dc4325161044d0ed8af94c1e "
                                 "LongBench/metrics.py, LongBench/eval.py"},
        "cases": cases,
        "unicode_blocks": BLOCKS,
        "space": [c for c in range(0x110000) if chr(c).isspace()],
        "word_ranges": ranges(c for c in in_blocks if word.match(chr(c))),
        "lower": [[c, chr(c).lower()] for c in in_blocks if chr(c).lower() != chr(c)],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    # One line per case and per table, so a regenerated file diffs readably.
    lines = []
    for key, value in golden.items():
        if key == "cases":
            items = ",\n  ".join(json.dumps(c, ensure_ascii=True) for c in value)
            lines.append(f'"cases": [\n  {items}\n ]')
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=True, separators=(',', ':'))}")
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("{\n " + ",\n ".join(lines) + "\n}\n")
    print(f"{OUT}: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()

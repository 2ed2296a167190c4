#!/usr/bin/env python3
"""Cut the texts of data/texts/ from their Debian packages, reproducibly.

Each text is English prose whose licence allows shipping it (data/texts/README.md):
the cuts are fixed line/verse ranges, not token counts, so the script needs no
tokenizer; scripts/results.sh checks that each record is 2K-4K tokens of the
default model. Needs the Debian packages miscfiles, bible-kjv (with bible-kjv-text),
jargon-text and base-files (common-licenses):

    apt-get install miscfiles bible-kjv jargon-text
    python3 data/texts/make_texts.py cut              # rewrites data/texts/*.txt

The JSONL for `ckv bound --input` (docs/BOUND.md) is made from the shipped .txt files
(no package needed), one record {id, context, question, answer} per text; the
question's tokens are the evaluation queries:

    python3 data/texts/make_texts.py jsonl OUT.jsonl

Question-answering records for `ckv eval` (docs/DUMP.md: answers, task "qa", scored like
LongBench's QA sets): the hand-checked questions of questions.json (3-4 a text, each with
the line where its answer is; data/texts/README.md), one record per question, context = the
whole text, the question an instruction to answer briefly plus "Question: ... Answer:":

    python3 data/texts/make_texts.py qa OUT.jsonl

Summary-style records like LongBench's MultiNews prompt (the paper's Table 9 / Figure 4
data): each text cut at line boundaries into pieces of about 8,000 characters (1.4K-2.1K
tokens of the default model), the context an instruction plus the piece, the question the
closing instruction ending in "Summary:", so the first decoded token starts the summary:

    python3 data/texts/make_texts.py summary OUT.jsonl
"""
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def constitution():
    # Preamble and Article I (up to the line before "Article II"), as the file has it.
    lines = gzip.open("/usr/share/state/us-constitution.gz", "rt", encoding="utf-8").read().split("\n")
    end = lines.index("Article II")
    return "\n".join(lines[:end])


def genesis():
    # The Joseph story: Genesis 37, 39 and 40 (38 is a different story), one verse a line.
    out = subprocess.run(["bible", "-l0", "Gen37:1-36", "Gen39:1-23", "Gen40:1-23"],
                         capture_output=True, text=True, check=True).stdout
    return "\n".join(line.strip() for line in out.strip().split("\n"))


def jargon():
    # Appendix B of the Jargon File 4.4.7 from its introduction through "Communication Style",
    # without the table of contents, the three-space indentation undone and no-break
    # spaces (in headings) made plain spaces.
    text = gzip.open("/usr/share/doc/jargon-text/jargon.txt.gz", "rt", encoding="utf-8").read()
    lines = text.replace("\u00a0", " ").split("\n")
    start = lines.index("Appendix B. A Portrait of J. Random Hacker")
    intro = next(i for i in range(start, len(lines)) if lines[i].startswith("   This profile reflects"))
    end = lines.index("Geographical Distribution", start)
    body = [re.sub(r"^   ", "", line) for line in lines[intro:end]]
    return "\n".join([lines[start], ""] + body).rstrip()


def licence(name):
    # A licence text in full: it may be copied verbatim but not changed, so it is not cut.
    return Path("/usr/share/common-licenses", name).read_text(encoding="utf-8").rstrip()


TEXTS = [
    ("constitution", constitution,
     "Question: For how many years is a Senator chosen? Answer:", "six"),
    ("genesis", genesis,
     "Question: For how many pieces of silver did his brethren sell Joseph? Answer:", "twenty"),
    ("jargon", jargon,
     "Question: Which Chinese cuisine do hackers consider vaguely declasse? Answer:", "Cantonese"),
    ("apache", lambda: licence("Apache-2.0"),
     "Question: When do the patent licenses of a party that institutes patent litigation terminate? Answer:",
     "as of the date such litigation is filed"),
    ("gpl2", lambda: licence("GPL-2"),
     "Question: For how many years must the written offer to give the source code be valid? Answer:",
     "three"),
]


SUMMARY_CHARS = 8000
SUMMARY_HEAD = "You are given a text. Write a one-page summary of it.\n\nText:\n"
SUMMARY_QUESTION = "\n\nNow, write a one-page summary of the text.\n\nSummary:"


def pieces(text, target=SUMMARY_CHARS):
    """The text cut at line boundaries into round(len / target) (at least 1) near-equal pieces."""
    lines = text.rstrip().split("\n")
    count = max(1, round(len(text) / target))
    size = len(text) / count
    out, cur, done = [], [], 0
    for line in lines:
        cur.append(line)
        done += len(line) + 1
        if len(out) < count - 1 and done >= size * (len(out) + 1):
            out.append("\n".join(cur).strip())
            cur = []
    out.append("\n".join(cur).strip())
    return [p for p in out if p]


def summary_records():
    for name, _, _, _ in TEXTS:
        text = (HERE / f"{name}.txt").read_text(encoding="utf-8")
        for i, piece in enumerate(pieces(text)):
            yield {"id": f"{name}_{i}", "context": SUMMARY_HEAD + piece, "question": SUMMARY_QUESTION}


QA_INSTRUCTION = "Answer the question using the text above. Give only the answer, no other words."


def qa_records():
    """One `ckv eval` record per question of questions.json, in file order."""
    spec = json.loads((HERE / "questions.json").read_text(encoding="utf-8"))
    if spec.get("format_version") != 1:
        sys.exit(f"questions.json: format_version {spec.get('format_version')!r}, expected 1")
    for name, questions in spec["texts"].items():
        text = (HERE / f"{name}.txt").read_text(encoding="utf-8")
        for q in questions:
            yield {"id": q["id"], "context": text,
                   "question": f"{QA_INSTRUCTION}\n\nQuestion: {q['question']}\nAnswer:",
                   "answer": q["answers"][0], "answers": q["answers"], "task": "qa"}


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "cut":
        for name, make, _, _ in TEXTS:
            text = make() + "\n\n"
            (HERE / f"{name}.txt").write_text(text, encoding="utf-8")
            print(f"{name}.txt: {len(text)} characters", file=sys.stderr)
    elif len(sys.argv) == 3 and sys.argv[1] == "jsonl":
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            for name, _, question, answer in TEXTS:
                text = (HERE / f"{name}.txt").read_text(encoding="utf-8")
                f.write(json.dumps({"id": name, "context": text, "question": question, "answer": answer},
                                   ensure_ascii=False) + "\n")
    elif len(sys.argv) == 3 and sys.argv[1] in ("summary", "qa"):
        records = summary_records() if sys.argv[1] == "summary" else qa_records()
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    else:
        sys.exit("usage: make_texts.py cut | make_texts.py jsonl OUT.jsonl | make_texts.py summary OUT.jsonl"
                 " | make_texts.py qa OUT.jsonl")


if __name__ == "__main__":
    main()

"""data/texts/questions.json: every answer is literally in its text at the stated line, inside
the quoted evidence sentence; and `make_texts.py qa` turns it into `ckv eval` records.

Standard library and pytest only; no model or binary needed.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ROOT / "data" / "texts"
SPEC = json.loads((TEXTS / "questions.json").read_text(encoding="utf-8"))
QUESTIONS = [(name, q) for name, qs in SPEC["texts"].items() for q in qs]


def text_of(name):
    return (TEXTS / f"{name}.txt").read_text(encoding="utf-8")


def line_span(text, line):
    """[start, end) character range of 1-based line `line` (without its newline)."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    assert 1 <= line <= len(starts), f"line {line} past the end ({len(starts)} lines)"
    start = starts[line - 1]
    end = text.find("\n", start)
    return start, len(text) if end < 0 else end


def evidence_spans(text, evidence):
    """Where the evidence sentence is in the text (its single spaces matching any line breaks
    and indentation); at least once (the GPL's address is there twice)."""
    pattern = r"\s+".join(re.escape(word) for word in evidence.split())
    found = [m.span() for m in re.finditer(pattern, text)]
    assert found, f"evidence not in the text: {evidence!r}"
    return found


def test_format():
    assert SPEC["format_version"] == 1
    assert set(SPEC["texts"]) == {"constitution", "genesis", "jargon", "apache", "gpl2"}
    for name, questions in SPEC["texts"].items():
        assert 3 <= len(questions) <= 4, name
    ids = [q["id"] for _, q in QUESTIONS]
    assert len(ids) == len(set(ids))
    for _, q in QUESTIONS:
        assert set(q) == {"id", "question", "answers", "line", "evidence"}, q["id"]
        assert q["answers"] and all(isinstance(a, str) and a.strip() == a and a for a in q["answers"])
        assert q["question"].endswith("?"), q["id"]


@pytest.mark.parametrize("name,q", QUESTIONS, ids=[q["id"] for _, q in QUESTIONS])
def test_answer_is_on_its_line_inside_the_evidence(name, q):
    text = text_of(name)
    line_start, line_end = line_span(text, q["line"])
    evidence = evidence_spans(text, q["evidence"])
    for answer in q["answers"]:
        # The answer string as written, on the stated line, within the quoted sentence.
        hits = [m.start() for m in re.finditer(re.escape(answer), text)
                if line_start <= m.start() and m.end() <= line_end
                and any(s <= m.start() and m.end() <= e for s, e in evidence)]
        assert hits, f"{q['id']}: {answer!r} is not on line {q['line']} inside the evidence"


def test_a_wrong_line_is_caught():
    # The check above can fail: the Senate answer is not on the Representative's line.
    text = text_of("constitution")
    line_start, line_end = line_span(text, 32)
    assert "thirty" not in text[line_start:line_end]
    with pytest.raises(AssertionError):
        evidence_spans(text, "No Person shall be a Senator aged twenty five")


def test_qa_mode_writes_eval_records(tmp_path):
    out = tmp_path / "qa.jsonl"
    subprocess.run([sys.executable, str(TEXTS / "make_texts.py"), "qa", str(out)], check=True)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == [q["id"] for _, q in QUESTIONS]
    for r, (name, q) in zip(records, QUESTIONS):
        assert set(r) == {"id", "context", "question", "answer", "answers", "task"}
        assert r["context"] == text_of(name)
        assert r["task"] == "qa"
        assert r["answers"] == q["answers"]
        assert r["answer"] == q["answers"][0]
        assert r["question"].endswith(f"Question: {q['question']}\nAnswer:")


def test_jsonl_mode_is_unchanged(tmp_path):
    # scripts/results.sh reads these five records: one per text, no answer-scoring fields.
    out = tmp_path / "texts.jsonl"
    subprocess.run([sys.executable, str(TEXTS / "make_texts.py"), "jsonl", str(out)], check=True)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == ["constitution", "genesis", "jargon", "apache", "gpl2"]
    assert all(set(r) == {"id", "context", "question", "answer"} for r in records)

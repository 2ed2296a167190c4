#!/usr/bin/env python3
"""RULER task-score golden (tests/data/answer_score/ruler_v1.json): the score RULER's
evaluation gives a table of fixed predictions for each of its 13 tasks, which
tests/test_ruler_score.cpp compares `ckv eval`'s scoring (lib/data/answer_score.cpp,
the record's "metric") with.

    python3 tests/reference/make_ruler_score_goldens.py      # plain Python 3, no packages

RULER's definitions, github.com/NVIDIA/RULER at c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a
(read, not copied):

* scripts/eval/evaluate.py `postprocess_pred`: strip the prediction, replace every
  character U+0000-U+001F by "\\n", strip again.
* scripts/eval/synthetic/constants.py, over a task's predictions p_i and reference lists R_i:
  string_match_all = 100 * mean_i( |{r in R_i : r.lower() in p_i.lower()}| / |R_i| )
  string_match_part = 100 * mean_i( max_{r in R_i} [r.lower() in p_i.lower()] )
  each rounded to 2 decimals; niah_*, vt, cwe and fwe use string_match_all, qa_1 and qa_2
  string_match_part.
"""
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "answer_score" / "ruler_v1.json"

METRIC = {name: "string_match_all" for name in [
    "niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
    "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"]}
METRIC.update({"qa_1": "string_match_part", "qa_2": "string_match_part"})


def postprocess(pred):
    pred = pred.strip()
    pred = "".join("\n" if ord(ch) < 0x20 else ch for ch in pred)
    return pred.strip()


def found(pred, ref):
    return ref.lower() in pred.lower()


def per_sample(metric, pred, refs):
    hits = [1.0 if found(pred, r) else 0.0 for r in refs]
    return sum(hits) / len(refs) if metric == "string_match_all" else max(hits)


UUID_A = "8f1b7c8e-2d4a-4c1e-9b7a-0a1b2c3d4e5f"
UUID_B = "c0ffee00-1234-4abc-8def-0123456789ab"
CWE = ["harbor", "lantern", "meadow", "needle", "orchid", "pebble", "quartz", "river", "saddle", "tunnel"]

# (prediction, references) per task: right, wrong, partial, case, control characters,
# a reference split across a line break, empty predictions.
TABLE = {
    "niah_single_1": [(" 8528032.", ["8528032"]), ("The number is 852803", ["8528032"]),
                      ("\n\n8528032\n", ["8528032"]), ("", ["8528032"])],
    "niah_single_2": [(" 1234567 and 7654321", ["7654321"]), ("none", ["7654321"])],
    "niah_single_3": [(f" {UUID_A.upper()}.", [UUID_A]), (UUID_A[:-1], [UUID_A])],
    "niah_multikey_1": [("6369474", ["6369474"]), ("63694\t74", ["6369474"])],
    "niah_multikey_2": [("2716350, 1234567", ["2716350"]), ("27163", ["2716350"])],
    "niah_multikey_3": [(f"The uuid is {UUID_B}", [UUID_B]), (f"{UUID_A}", [UUID_B])],
    "niah_multivalue": [(" 1111111, 2222222, 3333333, 4444444", ["1111111", "2222222", "3333333", "4444444"]),
                        (" 1111111, 3333333", ["1111111", "2222222", "3333333", "4444444"]),
                        ("4444444\x0b2222222", ["1111111", "2222222", "3333333", "4444444"])],
    "niah_multiquery": [("for a 1111111, for b 2222222", ["1111111", "2222222", "3333333", "4444444"]),
                        ("nothing", ["1111111", "2222222", "3333333", "4444444"])],
    "vt": [(" QWERT ASDFG ZXCVB POIUY LKJHG", ["QWERT", "ASDFG", "ZXCVB", "POIUY", "LKJHG"]),
           (" qwert asdfg", ["QWERT", "ASDFG", "ZXCVB", "POIUY", "LKJHG"]),
           ("VAR QWERT = 12345", ["QWERT", "ASDFG", "ZXCVB", "POIUY", "LKJHG"])],
    "cwe": [(" " + " ".join(f"{i + 1}. {w}" for i, w in enumerate(CWE)), CWE),
            (" 1. harbor 2. lantern 3. Meadow 4. x", CWE), ("", CWE)],
    "fwe": [(" abcdef, ghijkl, mnopqr", ["abcdef", "ghijkl", "mnopqr"]),
            (" ghijkl ...", ["abcdef", "ghijkl", "mnopqr"])],
    "qa_1": [(" thirty", ["thirty"]), ("Thirty years", ["thirty"]), ("twenty five", ["thirty"]),
             (" Monday", ["Monday", "the first Monday"])],
    "qa_2": [(" Reuben", ["Reuben"]), ("Judah", ["Reuben"]), ("\x00reuben\x1f", ["Reuben"])],
}


def main():
    tasks = []
    for name, rows in TABLE.items():
        metric = METRIC[name]
        samples = [{"prediction": p, "references": r, "postprocessed": postprocess(p),
                    "score": per_sample(metric, postprocess(p), r)} for p, r in rows]
        mean_x100 = sum(s["score"] for s in samples) / len(samples) * 100
        tasks.append({"task": name, "metric": metric, "samples": samples,
                      "mean_x100": mean_x100, "score": round(mean_x100, 2)})
    average = sum(t["score"] for t in tasks) / len(tasks)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"format_version": 1, "source": "tests/reference/make_ruler_score_goldens.py",
                               "tasks": tasks, "average": average}, indent=1, ensure_ascii=True) + "\n")
    print(f"{OUT}: {len(tasks)} tasks, average {average:.2f}")


if __name__ == "__main__":
    main()

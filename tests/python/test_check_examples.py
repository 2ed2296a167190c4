"""scripts/check_examples.py's skip rules: an example is skipped only for a stated reason."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_examples", ROOT / "scripts" / "check_examples.py")
CE = importlib.util.module_from_spec(spec)
spec.loader.exec_module(CE)


def test_a_long_run_is_skipped_only_when_its_comment_says_so():
    assert "long run" in CE.skip_reason("ckv eval -i big.jsonl -o e  # (hours on 2 cores)")
    assert "long run" in CE.skip_reason("ckv eval -i big.jsonl -o e  # (minutes: 15 on 2 cores)")
    # A continued command is one line: the marker may close its last part.
    assert "long run" in CE.skip_reason("ckv eval -i a.jsonl --budgets 0.1 -o e  # mean L1 (minutes: after the run above)")
    # Without the comment, or with the word outside one, the example runs.
    assert CE.skip_reason("ckv eval -i a.jsonl -o e") == ""
    assert CE.skip_reason("ckv eval -i a.jsonl -o minutes") == ""
    assert CE.skip_reason("ckv eval -i a.jsonl -o e  # takes minutes") == ""


def test_the_marked_results_runs_and_what_reads_them_are_the_skipped_ones():
    # RESULTS.md's along-the-answer run of the default model, its figure, and the table of
    # the Gemma 3 runs (whose eval and bound are skipped as needing a model CI does not fetch).
    doc = ROOT / "docs" / "RESULTS.md"
    marked = [(n, c) for n, c in CE.examples(doc) if "long run" in CE.skip_reason(c)]
    assert [c.split()[:3] for _, c in marked] == [["build/ckv", "eval", "-t"],
                                                  ["/usr/bin/python3", "-m", "analysis.figures"],
                                                  ["/usr/bin/python3", "-m", "analysis.tables"],
                                                  ["/usr/bin/python3", "-m", "analysis.tables"],
                                                  ["/usr/bin/python3", "-m", "analysis.tables"]]
    assert [c.split()[3:5] for _, c in marked[2:]] == [["gemma_steps_1024.h5", "--layers"],
                                                      ["gemma_mass_1024.h5", "--mass"],
                                                      ["gemma_mass_1024.h5", "--swaps"]]
    assert all("steps_1024" in c for _, c in marked[:3])
    gemma = [c for _, c in CE.examples(doc) if "models/gemma-3-270m" in c]
    assert gemma and all(CE.skip_reason(c) == "needs a model that is not here" for c in gemma)

"""The report's generated prose follows the numbers (analysis/findings.py): synthetic inputs
where each claim holds and where it does not give different sentences. Needs nothing but
Debian's python3 (no ckv binary, no model)."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from analysis import findings as W  # noqa: E402


def test_head_share_holds_partly_or_not():
    holds = W.head_share_sentence("criticalkv(snapkv)", "snapkv", "20%", 0.90)
    partly = W.head_share_sentence("criticalkv(snapkv)", "snapkv", "20%", 0.70)
    fails = W.head_share_sentence("criticalkv(snapkv)", "snapkv", "20%", 0.33)
    assert "90 % of heads" in holds and "as in the paper" in holds
    assert "70 % of heads" in partly and "short of the paper" in partly
    assert "33 % of heads" in fails and "does not hold" in fails
    assert "86–92 %" in fails
    assert "20 %" in fails
    assert "no head" in W.head_share_sentence("c", "b", "20%", math.nan)


def test_accuracy_sentence_compares_criticalkv_with_its_base():
    below = W.accuracy_sentence(0.2, {"snapkv": 0.5, "criticalkv(snapkv)": 0.25}, 1.0, 4)
    above = W.accuracy_sentence(0.2, {"snapkv": 0.25, "criticalkv(snapkv)": 0.75}, 1.0, 4)
    level = W.accuracy_sentence(0.2, {"snapkv": 0.5, "criticalkv(snapkv)": 0.5}, 1.0, 4)
    assert "snapkv 0.50" in below and "criticalkv(snapkv) 0.25" in below and "1.00" in below
    assert "below snapkv by 0.25" in below and "against the paper" in below
    assert "above snapkv by 0.50" in above and "as the paper finds" in above
    assert "level with snapkv" in level
    assert "20 %" in below and "4 records" in below


def test_caveat_names_a_small_quantised_model():
    small = W.caveat_sentence("SmolLM2-135M-Instruct.Q4_1", 4)
    big = W.caveat_sentence("Llama-3.1-8B", 1)
    assert "135M-parameter" in small and "Q4_1" in small and "4 records" in small
    assert "135M-parameter" not in big and "on 1 record," in big


def test_below_window_only_where_half_the_budget_is_under_the_window():
    labels = ["2.5%", "5%", "10%", "20%", "40%"]
    kept = [12, 25, 51, 102, 204]
    text = W.below_window_sentence(labels, kept, 32, [-5.0, -10.0, -40.0, 3.0, 8.0])
    # k/2 < 32 for 12, 25, 51 (25.5) but not for 102
    assert "2.5 % (k = 12" in text and "10 % (k = 51, reduction -40 %)" in text
    assert "20 %" not in text
    assert "stage 1" in text and "value norm" in text
    assert W.below_window_sentence(["20%"], [102], 32, [3.0]) == ""


def test_population_sentence_only_when_the_head_count_changes():
    changing = W.population_sentence(["5%", "20%", "40%"], [12, 80, 200], [0.9, 0.4, 0.6], [2.0, 1.0, 0.5])
    assert "12 heads" in changing and "200 heads" in changing
    assert "fall-then-rise" in changing and "all heads 0.5" in changing
    monotone = W.population_sentence(["5%", "20%"], [12, 80], [0.9, 0.4], [2.0, 1.0])
    assert "fall-then-rise" not in monotone and "all-heads mean" in monotone
    assert W.population_sentence(["5%", "20%"], [80, 80], [0.9, 0.4], [2.0, 1.0]) == ""


def test_equal_rows_explained_below_the_window_only():
    rows = [(10, 1.0), (10, 1.0), (30, 0.5)]
    below = W.equal_rows_sentence(["2.5%", "5%", "10%"], rows, [True, True, False])
    assert "2.5 % and 5 %" in below and "below the snapkv window" in below
    above = W.equal_rows_sentence(["10%", "20%"], [(3, 1.0), (3, 1.0)], [False, False])
    assert "below the snapkv window" not in above and "same entries" in above
    assert W.equal_rows_sentence(["a", "b"], [(1,), (2,)], [True, True]) == ""


def test_placebo_asked_versus_found():
    short = W.placebo_sentence(2, 1, 0.35, 0.64)
    full = W.placebo_sentence(2, 2, 0.35, 0.98)
    assert "2 asked for, 1 found" in short and "0.64" in short and "--match-tol" in short
    assert "2 of 2" in full
    assert W.placebo_sentence(0, 0, 0.25, 0.0) == ""


def test_protocol_difference_names_the_apparent_contradiction():
    clash = W.protocol_sentence(1, "0.2", 4, "prompt", {"snapkv": (-25.0, -3.0)}, {"snapkv": 0.5})
    assert "--compress prompt" in clash and "4 other records" in clash
    assert "snapkv can lose the needle" in clash
    calm = W.protocol_sentence(1, "0.2", 4, "prompt", {"snapkv": (-3.5, -3.0)}, {"snapkv": 0.5})
    assert "lose the needle" not in calm and "Two protocols" in calm

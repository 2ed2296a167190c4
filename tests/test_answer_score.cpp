// Answer scoring (lib/data/answer_score.h) against tests/data/answer_score/golden_v1.json,
// which tests/reference/make_score_goldens.py writes from plain-Python implementations of
// RULER's and LongBench's official scoring code, run by CPython.
#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/answer_score.h"
#include "core/error.h"

namespace {

using nlohmann::json;

const json& golden() {
  static const json g = [] {
    std::ifstream in(std::string(CKV_TEST_DATA_DIR) + "/answer_score/golden_v1.json");
    EXPECT_TRUE(in.good()) << "missing golden_v1.json";
    json j = json::parse(in);
    EXPECT_EQ(j.at("format_version").get<int>(), 1);
    return j;
  }();
  return g;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string prediction_of(const json& c) {
  return c.contains("prediction_hex") ? from_hex(c.at("prediction_hex").get<std::string>())
                                      : c.at("prediction").get<std::string>();
}

std::string utf8(char32_t c) {
  std::string out;
  if (c < 0x80)
    out += static_cast<char>(c);
  else if (c < 0x800)
    out += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
  else if (c < 0x10000)
    out += {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
            static_cast<char>(0x80 | (c & 0x3F))};
  else
    out += {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
            static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
  return out;
}

TEST(AnswerScore, GoldenHasTrickyCases) {
  EXPECT_GE(golden().at("cases").size(), 50u);
}

TEST(AnswerScore, PiecesMatchThePythonReference) {
  for (const json& c : golden().at("cases")) {
    const std::string pred = prediction_of(c);
    const auto refs = c.at("references").get<std::vector<std::string>>();
    SCOPED_TRACE(c.dump());
    EXPECT_EQ(ckv::ruler_postprocess(pred), c.at("ruler_postprocessed").get<std::string>());
    EXPECT_EQ(ckv::ruler_contains(pred, refs), c.at("contains").get<std::vector<bool>>());
    EXPECT_DOUBLE_EQ(ckv::ruler_string_match_all(pred, refs),
                     c.at("string_match_all").get<double>());
    EXPECT_DOUBLE_EQ(ckv::ruler_string_match_part(pred, refs),
                     c.at("string_match_part").get<double>());
    EXPECT_EQ(ckv::normalize_answer(pred), c.at("normalized").get<std::string>());
    for (size_t i = 0; i < refs.size(); ++i) {
      EXPECT_EQ(ckv::normalize_answer(refs[i]),
                c.at("normalized_references")[i].get<std::string>());
      EXPECT_DOUBLE_EQ(ckv::qa_f1_score(pred, refs[i]), c.at("f1_each")[i].get<double>());
      EXPECT_EQ(ckv::qa_exact_match(pred, refs[i]), c.at("exact_each")[i].get<bool>());
    }
    const std::string first = ckv::longbench_first_line(pred);
    if (!c.contains("prediction_hex")) {
      EXPECT_EQ(first, c.at("first_line").get<std::string>());
    }
    double first_f1 = 0.0;
    bool first_exact = false;
    for (const std::string& ref : refs) {
      first_f1 = std::max(first_f1, ckv::qa_f1_score(first, ref));
      first_exact = first_exact || ckv::qa_exact_match(first, ref);
    }
    EXPECT_DOUBLE_EQ(first_f1, c.at("first_line_f1").get<double>());
    EXPECT_EQ(first_exact, c.at("first_line_exact").get<bool>());
  }
}

TEST(AnswerScore, ScoreAnswerMatchesThePythonReference) {
  int niah = 0, qa = 0;
  for (const json& c : golden().at("cases")) {
    const auto refs = c.at("references").get<std::vector<std::string>>();
    const auto task = ckv::parse_answer_task(c.at("task").get<std::string>());
    ASSERT_TRUE(task.has_value());
    (*task == ckv::AnswerTask::Niah ? niah : qa)++;
    SCOPED_TRACE(c.dump());
    const ckv::AnswerScores s = ckv::score_answer(*task, prediction_of(c), refs);
    EXPECT_EQ(s.task, *task);
    EXPECT_EQ(s.contains, c.at("contains").get<std::vector<bool>>());
    EXPECT_DOUBLE_EQ(s.string_match_all, c.at("string_match_all").get<double>());
    EXPECT_DOUBLE_EQ(s.string_match_part, c.at("string_match_part").get<double>());
    EXPECT_DOUBLE_EQ(s.f1, c.at("f1").get<double>());
    EXPECT_EQ(s.exact_match, c.at("exact_match").get<bool>());
    EXPECT_DOUBLE_EQ(s.score, c.at("score").get<double>());
  }
  EXPECT_GT(niah, 10);
  EXPECT_GT(qa, 10);
}

// The golden's own spot values, so a regenerated golden that drifted is noticed too.
TEST(AnswerScore, KnownValues) {
  EXPECT_DOUBLE_EQ(ckv::qa_f1_score("Six years.", "six"), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(ckv::qa_f1_score("the the cat cat cat", "cat cat dog"), 2.0 / 3.0);
  EXPECT_TRUE(ckv::qa_exact_match("The Senate!", "senate"));
  EXPECT_FALSE(
      ckv::qa_exact_match("\xe2\x80\x9c"
                          "Cantonese"
                          "\xe2\x80\x9d",
                          "Cantonese"));
  EXPECT_TRUE(ckv::qa_exact_match("the", "a"));
  EXPECT_DOUBLE_EQ(ckv::qa_f1_score("the", "a"), 0.0);
  EXPECT_EQ(ckv::normalize_answer("an apple and the orange"), "apple and orange");
  EXPECT_DOUBLE_EQ(ckv::ruler_string_match_all("8528032.", {"8528032", "6369474"}), 0.5);
  EXPECT_DOUBLE_EQ(ckv::ruler_string_match_part("8528032.", {"8528032", "6369474"}), 1.0);
  const ckv::AnswerScores niah =
      ckv::score_answer(ckv::AnswerTask::Niah, " 8528032, 6369474.", {"8528032", "6369474"});
  EXPECT_TRUE(niah.exact_match);
  EXPECT_EQ(niah.contains, (std::vector<bool>{true, true}));
  EXPECT_EQ(ckv::longbench_first_line("\n\nsix\nyears"), "six");
  EXPECT_EQ(ckv::longbench_first_line("\n\n"), "");
  EXPECT_EQ(ckv::longbench_first_line(""), "");
}

TEST(AnswerScore, RefusesWhatCannotBeScored) {
  EXPECT_THROW(ckv::score_answer(ckv::AnswerTask::Qa, "x", {}), ckv::InputError);
  EXPECT_THROW(ckv::ruler_string_match_all("x", {}), ckv::InputError);
  EXPECT_THROW(ckv::score_answer(ckv::AnswerTask::None, "x", {"x"}), ckv::Error);
  EXPECT_EQ(ckv::parse_answer_task("niah"), ckv::AnswerTask::Niah);
  EXPECT_EQ(ckv::parse_answer_task("qa"), ckv::AnswerTask::Qa);
  EXPECT_FALSE(ckv::parse_answer_task("NIAH").has_value());
  EXPECT_FALSE(ckv::parse_answer_task("none").has_value());
  EXPECT_EQ(ckv::answer_task_name(ckv::AnswerTask::Qa), "qa");
}

// str.isspace() over all of Unicode.
TEST(AnswerScore, WhitespaceIsPythons) {
  std::vector<char32_t> expected;
  for (const json& c : golden().at("space")) expected.push_back(c.get<char32_t>());
  std::vector<char32_t> got;
  for (char32_t c = 0; c < 0x110000; ++c)
    if (ckv::is_python_space(c)) got.push_back(c);
  EXPECT_EQ(got, expected);
}

// re's \w and str.lower() over the blocks the golden lists (the same in Unicode 14 and 15).
TEST(AnswerScore, WordCharactersAndLowerCaseArePythons) {
  std::vector<bool> word(0x110000, false);
  for (const json& r : golden().at("word_ranges"))
    for (auto c = r[0].get<char32_t>(); c <= r[1].get<char32_t>(); ++c) word[c] = true;
  std::map<char32_t, std::string> lowered;
  for (const json& p : golden().at("lower"))
    lowered[p[0].get<char32_t>()] = p[1].get<std::string>();
  int checked = 0;
  for (const json& block : golden().at("unicode_blocks")) {
    for (auto c = block[0].get<char32_t>(); c <= block[1].get<char32_t>(); ++c, ++checked) {
      EXPECT_EQ(ckv::is_python_word(c), word[c]) << "U+" << std::hex << static_cast<uint32_t>(c);
      if (c >= 0xD800 && c < 0xE000) continue;
      const auto it = lowered.find(c);
      EXPECT_EQ(ckv::python_lower(utf8(c)), it == lowered.end() ? utf8(c) : it->second)
          << "U+" << std::hex << static_cast<uint32_t>(c);
    }
  }
  EXPECT_EQ(checked, 2880);  // every code point of the listed blocks
}

}  // namespace

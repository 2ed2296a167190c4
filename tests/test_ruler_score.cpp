// RULER's task scores (docs/RULER.md "Scoring") against tests/data/answer_score/ruler_v1.json,
// which tests/reference/make_ruler_score_goldens.py writes with RULER's formulas run by
// CPython: per sample the record's metric as `ckv eval` scores it (score_answer with the
// record's "metric"), per task the mean x 100.
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/answer_score.h"
#include "core/error.h"
#include "data/records.h"
#include "data/ruler.h"

namespace {

using nlohmann::json;

const json& golden() {
  static const json g = [] {
    std::ifstream in(std::string(CKV_TEST_DATA_DIR) + "/answer_score/ruler_v1.json");
    EXPECT_TRUE(in.good()) << "missing ruler_v1.json";
    json j = json::parse(in);
    EXPECT_EQ(j.at("format_version").get<int>(), 1);
    return j;
  }();
  return g;
}

TEST(RulerScore, EveryTaskMatchesRulersFormula) {
  ASSERT_EQ(golden().at("tasks").size(), ckv::ruler_tasks().size());
  double average = 0;
  for (const json& t : golden().at("tasks")) {
    const std::string name = t.at("task").get<std::string>();
    SCOPED_TRACE(name);
    const ckv::RulerTask* task = ckv::find_ruler_task(name);
    ASSERT_NE(task, nullptr);
    EXPECT_EQ(ckv::ruler_metric_name(task->metric), t.at("metric").get<std::string>());
    double sum = 0;
    int64_t n = 0;
    for (const json& s : t.at("samples")) {
      // The record as `ckv ruler` writes it, read as `ckv eval` reads it.
      json record = {{"context", "x"},
                     {"answers", s.at("references")},
                     {"task", "ruler"},
                     {"metric", t.at("metric")}};
      const ckv::InputRecord r = ckv::parse_record(record.dump(), "golden", 1, 0);
      const std::string pred = s.at("prediction").get<std::string>();
      const ckv::AnswerScores scores = ckv::score_answer(r.task, pred, r.answers);
      EXPECT_EQ(ckv::ruler_postprocess(pred), s.at("postprocessed").get<std::string>());
      EXPECT_DOUBLE_EQ(scores.score, s.at("score").get<double>()) << pred;
      sum += scores.score;
      ++n;
    }
    const double mean_x100 = sum / static_cast<double>(n) * 100;
    EXPECT_DOUBLE_EQ(mean_x100, t.at("mean_x100").get<double>());
    EXPECT_NEAR(mean_x100, t.at("score").get<double>(), 0.005);  // RULER rounds to 2 decimals
    average += t.at("score").get<double>();
  }
  EXPECT_NEAR(average / static_cast<double>(golden().at("tasks").size()),
              golden().at("average").get<double>(), 1e-9);
}

// Spot values, so a regenerated golden that drifted is noticed too.
TEST(RulerScore, KnownValues) {
  using ckv::AnswerTask;
  EXPECT_DOUBLE_EQ(ckv::score_answer(AnswerTask::RulerMatchAll, " qwert asdfg",
                                     {"QWERT", "ASDFG", "ZXCVB", "POIUY", "LKJHG"})
                       .score,
                   0.4);
  EXPECT_DOUBLE_EQ(ckv::score_answer(AnswerTask::RulerMatchPart, "Thirty years", {"thirty"}).score,
                   1.0);
  EXPECT_DOUBLE_EQ(ckv::score_answer(AnswerTask::RulerMatchPart, "Thirty years", {"thirty"}).f1,
                   2.0 / 3.0);
  EXPECT_DOUBLE_EQ(
      ckv::score_answer(AnswerTask::RulerMatchPart, "twenty", {"thirty", "twenty five"}).score,
      0.0);
  EXPECT_EQ(ckv::parse_answer_task("string_match_part"), AnswerTask::RulerMatchPart);
  EXPECT_EQ(ckv::answer_task_name(AnswerTask::RulerMatchAll), "string_match_all");
  EXPECT_THROW(ckv::parse_record(R"({"context": "x", "answer": "a", "task": "ruler"})", "t", 1, 0),
               ckv::InputError);
  EXPECT_THROW(
      ckv::parse_record(R"({"context": "x", "answer": "a", "task": "ruler", "metric": "f1"})", "t",
                        1, 0),
      ckv::InputError);
}

}  // namespace

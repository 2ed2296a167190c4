// `ckv ruler` generation (lib/data/ruler.h, docs/RULER.md): the 13 tasks' table, determinism
// for a seed, the fit of prompt + generation budget to the length with the default model's
// tokenizer, each task's answers where the task puts them, and the refusals. Records are
// read back through the path `ckv eval` uses (parse_record + tokenize_record).
#include <algorithm>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/prompt_tokenizer.h"
#include "data/records.h"
#include "data/ruler.h"
#include "test_dump_util.h"

namespace ckv {
namespace {

// The default model's tokenizer: its GGUF when installed, else the same tokenizer's JSON.
const Tokenizer& tok() {
  static const PromptTokenizer t = [] {
    const std::string model = test::default_model_or_empty();
    return load_prompt_tokenizer(model.empty() ? std::filesystem::path(CKV_TEST_DATA_DIR) /
                                                     "tokenizers" / "smollm.tokenizer.json"
                                               : std::filesystem::path(model));
  }();
  return *t.tokenizer;
}

std::string cp_substr(const std::string& s, SpanRange r) {
  const size_t a = utf8_offset(s, r.start, "test"), b = utf8_offset(s, r.end, "test");
  return s.substr(a, b - a);
}

int64_t count_of(const std::string& text, const std::string& word) {
  int64_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

TEST(Ruler, TaskTable) {
  const std::vector<std::string> names{"niah_single_1",
                                       "niah_single_2",
                                       "niah_single_3",
                                       "niah_multikey_1",
                                       "niah_multikey_2",
                                       "niah_multikey_3",
                                       "niah_multivalue",
                                       "niah_multiquery",
                                       "vt",
                                       "cwe",
                                       "fwe",
                                       "qa_1",
                                       "qa_2"};
  ASSERT_EQ(ruler_tasks().size(), names.size());
  const std::map<std::string_view, int64_t> budget{{"niah", 128},
                                                   {"variable_tracking", 30},
                                                   {"common_words_extraction", 120},
                                                   {"freq_words_extraction", 50},
                                                   {"qa", 32}};
  for (size_t i = 0; i < names.size(); ++i) {
    const RulerTask& t = ruler_tasks()[i];
    EXPECT_EQ(t.name, names[i]);
    EXPECT_EQ(t.tokens_to_generate, budget.at(t.family)) << t.name;
    EXPECT_EQ(t.metric,
              t.family == "qa" ? RulerMetric::StringMatchPart : RulerMetric::StringMatchAll)
        << t.name;
    EXPECT_EQ(find_ruler_task(names[i]), &t);
  }
  EXPECT_EQ(find_ruler_task("niah_single_4"), nullptr);
}

TEST(Ruler, SameSeedSameBytesOtherSeedOther) {
  for (const RulerTask& t : ruler_tasks()) {
    SCOPED_TRACE(std::string(t.name));
    const RulerGenerator a(t.name, 1024, 7, tok()), b(t.name, 1024, 7, tok()),
        c(t.name, 1024, 8, tok());
    for (int64_t i = 0; i < 2; ++i) {
      EXPECT_EQ(a.record(i).to_jsonl(), b.record(i).to_jsonl());
      EXPECT_NE(a.record(i).to_jsonl(), c.record(i).to_jsonl());
    }
    EXPECT_NE(a.record(0).context, a.record(1).context);
  }
}

// Every task at 4096 tokens: the fit, the template's end, and the answers in their places.
TEST(Ruler, EveryTaskFitsAndHoldsItsAnswers) {
  constexpr int64_t kLength = 4096;
  for (const RulerTask& t : ruler_tasks()) {
    SCOPED_TRACE(std::string(t.name));
    const RulerGenerator gen(t.name, kLength, 0, tok());
    for (int64_t i = 0; i < 3; ++i) {
      const RulerRecord r = gen.record(i);
      const InputRecord in = parse_record(r.to_jsonl(), "ruler", 1, i);
      EXPECT_EQ(in.task, t.metric == RulerMetric::StringMatchAll ? AnswerTask::RulerMatchAll
                                                                 : AnswerTask::RulerMatchPart);
      EXPECT_EQ(in.answers, r.answers);
      const RecordPrompt p = tokenize_record(in, tok(), false);
      const auto n = static_cast<int64_t>(p.tokens.size());
      EXPECT_EQ(n, r.n_tokens);
      EXPECT_LE(n + t.tokens_to_generate, kLength);
      // The largest haystack that fits: one unit more would not (a unit is at most a document,
      // a line of UUID needles ~55 tokens).
      EXPECT_GT(n + t.tokens_to_generate, kLength - (t.family == "qa" ? 400 : 80)) << n;
      const nlohmann::json j = nlohmann::json::parse(r.to_jsonl());
      EXPECT_EQ(j.at("ruler").at("task"), t.name);
      EXPECT_EQ(j.at("ruler").at("tokens_to_generate"), t.tokens_to_generate);
      EXPECT_TRUE(j.at("ruler").contains("stand_in"));
      ASSERT_FALSE(r.answers.empty());
      const auto& needles = in.spans.at("needle");
      ASSERT_FALSE(needles.empty());
      if (t.family == "niah") {
        ASSERT_EQ(needles.size(), r.answers.size());
        for (size_t k = 0; k < needles.size(); ++k) {
          const std::string text = cp_substr(r.context, needles[k]);
          EXPECT_EQ(text.rfind("One of the special magic ", 0), 0u) << text;
          EXPECT_EQ(text.substr(text.size() - r.answers[k].size() - 1), r.answers[k] + ".") << text;
          EXPECT_EQ(count_of(r.context, r.answers[k]), 1) << r.answers[k];
        }
        EXPECT_EQ(r.question.rfind("What ", 0), 0u);
        const bool single = r.answers.size() == 1;
        EXPECT_TRUE(r.question.ends_with(single ? "mentioned in the provided text is"
                                                : "mentioned in the provided text are"));
      } else if (t.family == "variable_tracking") {
        ASSERT_EQ(needles.size(), 5u);
        ASSERT_EQ(r.answers.size(), 5u);
        for (size_t k = 0; k < 5; ++k)
          EXPECT_EQ(cp_substr(r.context, needles[k]).rfind("VAR " + r.answers[k] + " = ", 0), 0u);
        const std::string value = cp_substr(r.context, needles[0]).substr(12);
        EXPECT_TRUE(
            r.question.ends_with("5 variables are assigned the value " + value + ", they are: "))
            << r.question;
        EXPECT_NE(cp_substr(r.context, in.spans.at("example")[0]).find("they are:  "),
                  std::string::npos);
      } else if (t.family == "common_words_extraction") {
        ASSERT_EQ(r.answers.size(), 10u);
        EXPECT_EQ(needles.size(), 300u);  // 10 words x 30 at 4096 tokens
        const SpanRange ex = in.spans.at("example")[0];
        const std::string list = r.context.substr(utf8_offset(r.context, ex.end, "test"));
        for (const std::string& w : r.answers)
          EXPECT_EQ(count_of(list, ". " + w + " ") + count_of(list, ". " + w + "\n"), 30) << w;
        EXPECT_TRUE(r.question.ends_with(
            "Answer: The top 10 words that appear most often in the list are:"));
      } else if (t.family == "freq_words_extraction") {
        ASSERT_EQ(r.answers.size(), 3u);
        std::map<std::string, int64_t> counts;
        for (const SpanRange& s : needles) ++counts[cp_substr(r.context, s)];
        EXPECT_GT(counts.at(r.answers[0]), counts.at(r.answers[1]));
        EXPECT_GT(counts.at(r.answers[1]), counts.at(r.answers[2]));
        EXPECT_GT(count_of(r.context, " ... "), counts.at(r.answers[0]));
      } else {
        ASSERT_EQ(needles.size(), 1u);
        const std::string gold = cp_substr(r.context, needles[0]);
        EXPECT_TRUE(std::any_of(r.answers.begin(), r.answers.end(), [&](const std::string& a) {
          return gold.find(a) != std::string::npos;
        })) << gold;
        EXPECT_TRUE(r.question.ends_with(" Answer:"));
      }
    }
  }
}

TEST(Ruler, RefusesUnknownTasksAndShortLengths) {
  try {
    RulerGenerator("niah_single_4", 4096, 0, tok());
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown task \"niah_single_4\""), std::string::npos)
        << e.what();
  }
  for (const auto& [task, length] : std::vector<std::pair<std::string, int64_t>>{
           {"niah_single_1", 150}, {"vt", 400}, {"cwe", 200}, {"fwe", 100}, {"qa_1", 100}}) {
    try {
      RulerGenerator(task, length, 0, tok());
      FAIL() << task << " at " << length << ": no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("is too short for " + task), std::string::npos)
          << e.what();
    }
  }
}

// The command line: `--task all` writes 13 x count records; bad input is one line.
TEST(RulerCli, SuiteAndBadInput) {
  const std::string model = test::default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model not installed";
  const auto dir = test::scratch_dir("ruler");
  const std::string out = (dir / "suite.jsonl").string();
  const test::RunResult ok =
      test::run_ckv("ruler -m " + model + " --task all --length 1024 --count 2 -q -o " + out);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  RecordReader reader(out);
  std::map<std::string, int64_t> per_task;
  while (auto r = reader.next()) ++per_task[r->id.substr(0, r->id.size() - 7)];
  EXPECT_EQ(per_task.size(), 13u);
  for (const auto& [task, n] : per_task) EXPECT_EQ(n, 2) << task;

  auto one_line = [](const test::RunResult& r, int code, const std::string& needle) {
    EXPECT_EQ(r.exit_code, code) << r.output;
    EXPECT_EQ(r.output.rfind("ckv: error: ", 0), 0u) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  };
  one_line(test::run_ckv("ruler -m " + model + " --task bogus -o -"), 2, "unknown task \"bogus\"");
  one_line(test::run_ckv("ruler -m " + model + " --task vt --length 300 -o -"), 1,
           "too short for vt");
  one_line(test::run_ckv("ruler -m " + std::string(CKV_TEST_DATA_DIR) +
                         "/models/tiny_llama_gqa --task vt -o -"),
           1, "no tokenizer");
}

}  // namespace
}  // namespace ckv

// The answer fields of input records (lib/data/records.h): "answers" and "task", their
// defaults, and hostile values refused with one InputError naming the file and line.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/records.h"

namespace ckv {
namespace {

InputRecord parse(const std::string& line) {
  return parse_record(line, "in.jsonl", 9, 0);
}

TEST(RecordAnswers, AnswersAndTaskDefaults) {
  InputRecord r = parse(R"({"context": "x"})");
  EXPECT_TRUE(r.answers.empty());
  EXPECT_EQ(r.task, AnswerTask::None);

  r = parse(R"({"context": "x", "answer": "six"})");
  EXPECT_EQ(r.answers, std::vector<std::string>{"six"});
  EXPECT_EQ(r.task, AnswerTask::Qa);
  EXPECT_EQ(r.answer, "six");

  r = parse(R"({"context": "x", "answer": ""})");  // an empty answer is no reference
  EXPECT_TRUE(r.answers.empty());
  EXPECT_EQ(r.task, AnswerTask::None);
  EXPECT_EQ(r.answer, "");  // kept as before for the other subcommands

  r = parse(R"({"context": "x", "answer": "1, 2", "answers": ["1", "2"], "niah": {"length": 10}})");
  EXPECT_EQ(r.answers, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(r.answer, "1, 2");
  EXPECT_EQ(r.task, AnswerTask::Niah);

  r = parse(R"({"context": "x", "answers": ["Joseph", "the son of Jacob"]})");
  EXPECT_EQ(r.answers.size(), 2u);
  EXPECT_FALSE(r.answer.has_value());  // answers do not invent an "answer" for mask
  EXPECT_EQ(r.task, AnswerTask::Qa);

  r = parse(R"({"context": "x", "answers": ["7"], "task": "niah"})");
  EXPECT_EQ(r.task, AnswerTask::Niah);
  r = parse(R"({"context": "x", "answer": "7", "task": "qa", "niah": {}})");
  EXPECT_EQ(r.task, AnswerTask::Qa);  // an explicit task wins
  r = parse(R"({"context": "x", "niah": {"length": 10}})");
  EXPECT_EQ(r.task, AnswerTask::None);  // nothing to score against
  r = parse(R"({"context": "x", "answers": null, "task": null, "answer": "y"})");
  EXPECT_EQ(r.answers, std::vector<std::string>{"y"});
  EXPECT_EQ(r.task, AnswerTask::Qa);
}

TEST(RecordAnswers, HostileValuesAreRefusedNamingFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"context": "x", "answers": "six"})", "\"answers\" must be a list of strings"},
      {R"({"context": "x", "answers": {"a": "six"}})", "\"answers\" must be a list of strings"},
      {R"({"context": "x", "answers": []})", "\"answers\" is an empty list"},
      {R"({"context": "x", "answers": ["six", 6]})", "\"answers\"[1] must be a string, not 6"},
      {R"({"context": "x", "answers": [null]})", "\"answers\"[0] must be a string, not null"},
      {R"({"context": "x", "answers": [["six"]]})", "\"answers\"[0] must be a string"},
      {R"({"context": "x", "answers": ["six", ""]})", "\"answers\"[1] is empty"},
      {R"({"context": "x", "answers": ["a\u0000b"]})", "\"answers\" contains a NUL"},
      {R"({"context": "x", "answer": "six", "task": "squad"})",
       "\"task\" must be \"niah\" or \"qa\", not \"squad\""},
      {R"({"context": "x", "answer": "six", "task": "NIAH"})", "not \"NIAH\""},
      {R"({"context": "x", "answer": "six", "task": 1})",
       "\"task\" must be \"niah\" or \"qa\", not 1"},
      {R"({"context": "x", "answer": "six", "task": ["qa"]})", "\"task\" must be"},
      {R"({"context": "x", "task": "qa"})", "\"task\" \"qa\" needs a reference answer"},
      {R"({"context": "x", "answer": "", "task": "niah"})",
       "\"task\" \"niah\" needs a reference answer"},
      {R"({"context": "x", "task": "\u001b[31mred"})", "\\x1b[31mred"},  // no terminal escapes
  };
  for (const auto& [line, expected] : bad) {
    try {
      parse(line);
      ADD_FAILURE() << "accepted " << line;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("in.jsonl:9: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(expected), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace ckv

// One rule for every flag value (issue 24, item 7) and the help and flag texts (issue 30,
// item 5): each value that used to be accepted with exit 0, or refused with exit 1, is
// refused as a usage error (exit 2, one line naming the flag) before any work; the budget
// syntax takes the form the console prints (20%); a mistyped subcommand or flag gets a
// "did you mean". Every case stops at parsing or before the model load: milliseconds each.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "test_dump_util.h"
#include "test_shard_util.h"

namespace ckv::test {
namespace {

const std::string kData = CKV_TEST_DATA_DIR;
const std::string kTiny = kData + "/models/tiny_llama_gqa";  // no tokenizer, context 256

// Exit 2 and one line "ckv: error: ..." that holds every needle.
void expect_usage_error(const std::string& args, const std::vector<std::string>& needles) {
  SCOPED_TRACE(args);
  const RunResult r = run_ckv(args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("ckv: error: ", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
  for (const std::string& n : needles) EXPECT_NE(r.output.find(n), std::string::npos) << "no '" << n << "' in " << r.output;
  EXPECT_EQ(r.output.find("ckv: error: ckv "), std::string::npos) << "a doubled prefix: " << r.output;
}

class FlagRules : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir("ckv_flag_rules");
    write_text(dir_ / "ids.txt", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20");
    write_text(dir_ / "in.jsonl", "{\"id\": \"a\", \"context\": \"x\", \"question\": \"y\"}\n");
  }
  void TearDown() override { fs::remove_all(dir_); }
  // `ckv <sub>` on the tiny model over the token file, writing into the scratch folder.
  std::string tokens(const std::string& sub) const {
    return sub + " -m " + kTiny + " --tokens " + (dir_ / "ids.txt").string() + " -o " + (dir_ / "out").string() + " ";
  }
  std::string jsonl() const { return (dir_ / "in.jsonl").string(); }
  fs::path dir_;
};

TEST_F(FlagRules, NonFiniteNumbersAreRefused) {
  expect_usage_error("niah --tolerance nan -o -", {"--tolerance", "nan is not a finite number"});
  expect_usage_error(tokens("mask") + "--context-end 15 --spans 2-4 --match-tol nan", {"--match-tol", "nan"});
  expect_usage_error(tokens("bound") + "--eps inf", {"--eps", "inf is not a finite number"});
}

TEST_F(FlagRules, EmptyValuesAreRefused) {
  expect_usage_error(tokens("bound") + "--shard ''", {"--shard", "an empty value"});
  expect_usage_error(tokens("dump") + "--layers ''", {"--layers", "an empty value"});
}

TEST_F(FlagRules, ResumeAndForceExcludeEachOther) {
  expect_usage_error(tokens("bound") + "--resume --force", {"--resume", "--force"});
  expect_usage_error(tokens("dump") + "--resume --force", {"--resume", "--force"});
}

TEST_F(FlagRules, NegativeCountsAreRefused) {
  expect_usage_error(tokens("check") + "--max-list -1", {"--max-list -1"});
  expect_usage_error(tokens("bound") + "--oracle --oracle-max-n -1", {"--oracle-max-n -1"});
}

TEST_F(FlagRules, DefensiveKernelIsLimitedLikeKernel) {
  expect_usage_error(tokens("bound") + "--methods defensivekv --defensive-kernel 2000000001",
                     {"--defensive-kernel 2000000001", "[1, 1023]"});
}

TEST_F(FlagRules, MethodListsRefuseEmptyItemsAndDuplicates) {
  expect_usage_error(tokens("bound") + "--methods snapkv,,snapkv", {"--methods", "empty item"});
  expect_usage_error(tokens("bound") + "--methods snapkv,h2o,snapkv", {"--methods", "snapkv is listed twice"});
  expect_usage_error("eval -m " + kTiny + " -i " + jsonl() + " --methods 'snapkv,'", {"--methods", "empty item"});
}

TEST_F(FlagRules, BudgetListsTakeOneSyntax) {
  expect_usage_error("eval -m " + kTiny + " -i " + jsonl() + " --budgets '[0.2]'", {"--budgets", "'[0.2]' is not a number"});
  expect_usage_error(tokens("bound") + "--budgets 0.2,0.2", {"--budgets", "given twice"});
  expect_usage_error(tokens("bound") + "--budgets 0.2,", {"--budgets", "empty item"});
  expect_usage_error(tokens("bound") + "--budgets 120%", {"--budgets", "outside (0, 1]"});
  expect_usage_error(tokens("check") + "--alpha 0.5,0.5", {"--alpha", "given twice"});
}

TEST_F(FlagRules, WholeNumbersDoNotSaturate) {
  expect_usage_error(tokens("bound") + "--keep 99999999999999999999999", {"--keep", "beyond the 64-bit whole numbers"});
  expect_usage_error(tokens("bound") + "--window 2.5", {"--window", "2.5 is not a whole number"});
  expect_usage_error("forward --threads abc", {"--threads", "abc is not a number"});
  expect_usage_error("forward --threads 5000000", {"--threads", "5000000 is outside [0, 1048576]"});
}

TEST_F(FlagRules, BadListsAreUsageErrors) {
  expect_usage_error(tokens("mask") + "--context-end 15 --spans 9-7", {"--spans", "9-7"});
  expect_usage_error(tokens("mask") + "--context-end 15 --spans x", {"--spans"});
  expect_usage_error(tokens("dump") + "--attn-rows 9-7", {"--attn-rows", "9-7"});
}

TEST_F(FlagRules, RangeErrorsNameTheRangeInWords) {
  const RunResult r = run_ckv("niah --length 0 -o -");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--length: 0 is below 1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("e+308"), std::string::npos) << r.output;
}

TEST_F(FlagRules, PercentBudgetsAreTheFractions) {
  // 20% is 0.2 exactly: the same budgets, so the same CSV row for row.
  const std::string common = "--window 4 --methods snapkv --layers 0 -t 1 -q";
  const fs::path a = dir_ / "a", b = dir_ / "b";
  const std::string base = "bound -m " + kTiny + " --tokens " + (dir_ / "ids.txt").string() + " " + common;
  ASSERT_EQ(run_ckv(base + " --budgets 0.2,0.5 -o " + a.string()).exit_code, 0);
  const RunResult r = run_ckv(base + " --budgets 20%,50% -o " + b.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string csv_a = read_text(a.string() + ".csv"), csv_b = read_text(b.string() + ".csv");
  EXPECT_FALSE(csv_a.empty());
  EXPECT_EQ(csv_a, csv_b);
}

TEST_F(FlagRules, BoundReadsTheOneSelectionFormat) {
  // ckv.selection (mask's and eval's format) and the old {"<layer>": ...} give the same bound;
  // the old one with a note, "evicted" lists (which need the record's c) with one error line.
  write_text(dir_ / "new.json", R"({"format": "ckv.selection", "format_version": 1,
                                    "layers": {"0": {"kept": [[0, 3, 7], [1, 2, 9]]}}})");
  write_text(dir_ / "old.json", R"({"0": [[0, 3, 7], [1, 2, 9]]})");
  write_text(dir_ / "evicted.json", R"({"layers": {"0": {"evicted": [[0], [1]]}}})");
  write_text(dir_ / "v2.json", R"({"format": "ckv.selection", "format_version": 2, "layers": {}})");
  const std::string base = "bound -m " + kTiny + " --tokens " + (dir_ / "ids.txt").string() +
                           " --window 4 --methods file --layers 0 --budgets 0.5 -t 1 --selection-file ";
  ASSERT_EQ(run_ckv("-q " + base + (dir_ / "new.json").string() + " -o " + (dir_ / "n").string()).exit_code, 0);
  const RunResult old = run_ckv(base + (dir_ / "old.json").string() + " -o " + (dir_ / "o").string());
  ASSERT_EQ(old.exit_code, 0) << old.output;
  EXPECT_NE(old.output.find("the old selection format"), std::string::npos) << old.output;
  EXPECT_EQ(read_text(dir_ / "n.csv"), read_text(dir_ / "o.csv"));
  const auto refused = [&](const std::string& file, const std::string& needle) {
    const RunResult r = run_ckv("-q " + base + (dir_ / file).string() + " -o " + (dir_ / "x").string());
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  };
  refused("evicted.json", "takes \"kept\" lists");
  refused("v2.json", "format_version 2");
}

TEST(FlagTexts, UnknownNamesGetDidYouMean) {
  expect_usage_error("dumb", {"unknown subcommand 'dumb'", "did you mean dump?"});
  expect_usage_error("forward --generat 3", {"unknown flag --generat for `ckv forward`", "did you mean --generate?"});
  expect_usage_error("bound --budget 0.2", {"unknown flag --budget", "did you mean --budgets?"});
  // The unknown flag first, before a value CLI11 checks while parsing (merge's missing shard).
  expect_usage_error("merge out.h5 /nonexistent/s0.h5 --alow-missing",
                     {"unknown flag --alow-missing for `ckv merge`", "did you mean --allow-missing?"});
  expect_usage_error("merge out.h5 /nonexistent/s0.h5", {"/nonexistent/s0.h5"});
}

TEST(FlagTexts, InfoNamesWhatItReads) {
  const fs::path dir = scratch_dir("ckv_flag_texts");
  write_text(dir / "eval.json", "{}");
  expect_usage_error("info " + (dir / "eval.json").string(), {"eval.json", "not a model nor a ckv output file"});
  fs::remove_all(dir);
}

TEST(FlagTexts, HelpHasNoFormattingArtefacts) {
  for (const char* sub : {"bound", "check", "mask", "eval", "dump", "niah", "forward", "merge"}) {
    SCOPED_TRACE(sub);
    const RunResult r = run_ckv(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    for (const char* artefact : {"{false}", "INT:INT", "FLOAT:FLOAT", "(always done)", "--kept-report", "[0.05,",
                                 "1.79769e+308", "the seed's"})
      EXPECT_EQ(r.output.find(artefact), std::string::npos) << artefact << " in:\n" << r.output;
  }
  EXPECT_NE(run_ckv("forward --help").output.find("Path of a file of token ids"), std::string::npos);
}

TEST(FlagTexts, SelectionFlagsAreTheSameOnEverySubcommand) {
  // One registration: mask and eval take what bound takes, with the same help line.
  auto line_of = [](const std::string& help, const std::string& flag) {
    const size_t at = help.find("  " + flag + " ");
    return at == std::string::npos ? std::string() : help.substr(at, help.find('\n', at) - at);
  };
  const std::string bound = run_ckv("bound --help").output;
  for (const char* sub : {"mask", "eval", "check"}) {
    const std::string help = run_ckv(std::string(sub) + " --help").output;
    for (const char* flag : {"--window", "--kernel", "--eps", "--alpha-safe", "--h2o-rows", "--gqa-reduce",
                             "--defensive-kernel", "--ea-future", "--obcache-score"}) {
      SCOPED_TRACE(std::string(sub) + " " + flag);
      EXPECT_FALSE(line_of(help, flag).empty()) << help;
      EXPECT_EQ(line_of(help, flag), line_of(bound, flag));
    }
  }
}

}  // namespace
}  // namespace ckv::test

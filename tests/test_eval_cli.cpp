// `ckv eval` end to end on the default model: NIAH records from `ckv niah`, two methods at two
// budgets; the HDF5 file, CSV and JSON agree with each other and with what the selection
// must keep; shards merged give the whole run's CSV; a resume of a finished file changes
// nothing; bad flags and records are refused with one line. The same run on the tiny Qwen3
// model (EvalCliTiny) takes a second, so that the sanitizer run of CI, which leaves the
// default-model one out (scripts/sanitize.sh), still writes, resumes and merges eval files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "analysis/selection.h"
#include "io/h5.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

const std::string kBin = CKV_BINARY;
const fs::path kModel = fs::path(CKV_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct CliRun {
  int status;
  std::string out;
};

// `model` empty: a subcommand that reads no model (merge, info).
CliRun run(const std::string& args, const fs::path& model_path = kModel) {
  // --model belongs to the subcommand (the first word of args).
  const size_t sub = args.find(' ');
  const std::string model = model_path.empty() ? "" : " --model " + model_path.string();
  const std::string cmd = kBin + " -q " + args.substr(0, sub) + model + args.substr(sub) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

fs::path tmp(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ckv_eval_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

using ckv::test::read_file;

class EvalCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(kModel)) return;
    records_ = tmp("niah.jsonl");
    const CliRun r = run("niah --length 320 --count 3 --seed 4 -o " + records_.string() + " --force");
    ASSERT_EQ(r.status, 0) << r.out;
  }
  void SetUp() override {
    if (!fs::exists(kModel)) GTEST_SKIP() << kModel << " absent";
  }
  static std::string eval_args() {
    return "eval -i " + records_.string() + " --methods 'snapkv,criticalkv(snapkv)' --budgets 0.1,0.3 "
           "--window 16 --max-new-tokens 10 ";
  }
  static fs::path records_;
};
fs::path EvalCli::records_;

TEST_F(EvalCli, OutputsAgreeWithTheSelection) {
  const std::string out = tmp("whole").string();
  const CliRun r = run(eval_args() + "-o " + out + " --force");
  ASSERT_EQ(r.status, 0) << r.out;
  {
  ckv::h5::File f = ckv::h5::File::open_read(out + ".h5");
  EXPECT_EQ(f.attr_string("schema"), "ckv.eval");
  const int64_t n_layer = f.attr_int("n_layer"), n_kv_head = f.attr_int("n_kv_head");
  const std::vector<std::string> ids = f.open_group("records").children();
  ASSERT_EQ(ids.size(), 3u);
  int64_t checked = 0, found = 0;
  for (const std::string& id : ids) {
    const ckv::h5::Group rec = f.open_group("records/" + id);
    EXPECT_EQ(rec.attr_string("task"), "niah");
    const int64_t n = rec.attr_int("n_tokens"), c = rec.attr_int("context_end");
    const ckv::h5::Group full = rec.open_group("runs/0");
    EXPECT_EQ(full.attr_string("method"), "full");
    EXPECT_EQ(full.attr_double("kl"), 0.0);
    EXPECT_EQ(full.attr_int("kept_entries"), c * n_layer * n_kv_head);
    found += full.attr_json("scores").at("score").get<double>() == 1.0;
    for (int k = 1; k <= 4; ++k) {
      const ckv::h5::Group g = rec.open_group("runs/" + std::to_string(k));
      const double fraction = g.attr_double("fraction");
      EXPECT_EQ(fraction, k <= 2 ? (k == 1 ? 0.1 : 0.3) : (k == 3 ? 0.1 : 0.3));
      // snapkv and criticalkv(snapkv) keep exactly the budget in every KV head.
      const int64_t b = ckv::budget_from_fraction(c, fraction);
      EXPECT_EQ(g.attr_int("budget"), b);
      const std::vector<int64_t> kept = g.open_dataset("kept").read<int64_t>();
      EXPECT_TRUE(std::all_of(kept.begin(), kept.end(), [&](int64_t x) { return x == b; }));
      EXPECT_EQ(g.attr_int("first_row"), n - 1);
      EXPECT_GE(g.attr_double("kl"), 0.0);
      EXPECT_GT(g.attr_double("mean_l1"), 0.0);
      const nlohmann::json s = g.attr_json("scores");
      EXPECT_EQ(s.at("task"), "niah");
      ++checked;
    }
  }
  EXPECT_EQ(checked, 12);
  // The model finds the needle in these short prompts with the full cache (deterministic).
  EXPECT_GE(found, 2);
  }
  // CSV: a header and one row per record x run (texts may hold quoted newlines).
  const std::string csv = read_file(out + ".csv");
  size_t rows = 0;
  for (size_t at = csv.find("\n\"niah_"); at != std::string::npos; at = csv.find("\n\"niah_", at + 1)) ++rows;
  EXPECT_EQ(rows, 3u * 5u) << csv;
  const nlohmann::json j = nlohmann::json::parse(read_file(out + ".json"));
  EXPECT_EQ(j.at("records"), 3);
  ASSERT_EQ(j.at("by_method_budget").size(), 5u);
  EXPECT_EQ(j.at("by_method_budget")[0].at("method"), "full");
  EXPECT_EQ(j.at("by_method_budget")[0].at("runs"), 3);
  EXPECT_TRUE(j.at("correlation").contains("snapkv"));

  // A resume of the finished file writes nothing new and leaves the CSV as it was.
  const CliRun again = run(eval_args() + "-o " + out + " --resume");
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(read_file(out + ".csv"), csv);

  // Two shards merged: the whole run's CSV, byte for byte.
  const std::string s0 = tmp("s0").string(), s1 = tmp("s1").string(), merged = tmp("merged").string();
  ASSERT_EQ(run(eval_args() + "--shard 0/2 -o " + s0 + " --force").status, 0);
  ASSERT_EQ(run(eval_args() + "--shard 1/2 -o " + s1 + " --force").status, 0);
  const CliRun m = run("merge " + merged + " " + s0 + ".h5 " + s1 + ".h5 --force", {});
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_EQ(read_file(merged + ".csv"), csv);
  const CliRun info = run("info " + merged + ".h5", {});
  EXPECT_EQ(info.status, 0) << info.out;
}

// Three short question-answering records for the tiny model (its 288-token vocabulary and
// 256-token context hold no NIAH template).
const fs::path kTinyModel = fs::path(CKV_TEST_DATA_DIR) / "models/tiny_qwen3.gguf";

fs::path tiny_records() {
  const fs::path p = tmp("tiny.jsonl");
  std::ofstream f(p);
  f << R"({"id": "a", "context": "The red key is under the mat. The blue key is in the box.", )"
       R"("question": " Question: Where is the red key? Answer:", "answers": ["under the mat"], "task": "qa"})"
    << "\n"
    << R"({"id": "b", "context": "Anna lives in Oslo. Ben lives in Rome. Cleo lives in Lima.", )"
       R"("question": " Question: Where does Ben live? Answer:", "answers": ["Rome"], "task": "qa"})"
    << "\n"
    << R"({"id": "c", "context": "The code is 4471. The door is green. The cat is asleep.", )"
       R"("question": " Question: What is the code? Answer:", "answers": ["4471"], "task": "qa"})"
    << "\n";
  return p;
}

TEST(EvalCliTiny, WritesResumesAndMergesLikeTheDefaultModelRun) {
  const std::string args = "eval -i " + tiny_records().string() +
                           " --methods 'snapkv,criticalkv(snapkv)' --budgets 0.2,0.5 --window 8 "
                           "--max-new-tokens 6 --track-steps 4 ";
  const std::string out = tmp("tiny_whole").string();
  const CliRun r = run(args + "-o " + out + " --force", kTinyModel);
  ASSERT_EQ(r.status, 0) << r.out;
  {
    ckv::h5::File f = ckv::h5::File::open_read(out + ".h5");
    EXPECT_EQ(f.attr_string("schema"), "ckv.eval");
    const std::vector<std::string> ids = f.open_group("records").children();
    ASSERT_EQ(ids.size(), 3u);
    for (const std::string& id : ids) {
      const ckv::h5::Group rec = f.open_group("records/" + id);
      const int64_t c = rec.attr_int("context_end");
      EXPECT_EQ(rec.open_group("runs/0").attr_string("method"), "full");
      EXPECT_EQ(rec.open_group("runs/0").attr_double("kl"), 0.0);
      for (int k = 1; k <= 4; ++k) {
        const ckv::h5::Group g = rec.open_group("runs/" + std::to_string(k));
        const int64_t b = ckv::budget_from_fraction(c, g.attr_double("fraction"));
        const std::vector<int64_t> kept = g.open_dataset("kept").read<int64_t>();
        EXPECT_TRUE(std::all_of(kept.begin(), kept.end(), [&](int64_t x) { return x == b; })) << id << " run " << k;
        EXPECT_GE(g.attr_double("kl"), 0.0);
      }
    }
  }
  const std::string csv = read_file(out + ".csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 3 * 5) << csv;  // no text holds a newline
  EXPECT_EQ(nlohmann::json::parse(read_file(out + ".json")).at("records"), 3);

  ASSERT_EQ(run(args + "-o " + out + " --resume", kTinyModel).status, 0);
  EXPECT_EQ(read_file(out + ".csv"), csv);

  const std::string s0 = tmp("tiny_s0").string(), s1 = tmp("tiny_s1").string(), merged = tmp("tiny_merged").string();
  ASSERT_EQ(run(args + "--shard 0/2 -o " + s0 + " --force", kTinyModel).status, 0);
  ASSERT_EQ(run(args + "--shard 1/2 -o " + s1 + " --force", kTinyModel).status, 0);
  const CliRun m = run("merge " + merged + " " + s0 + ".h5 " + s1 + ".h5 --force", {});
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_EQ(read_file(merged + ".csv"), csv);
}

void expect_refused(const std::string& args, int status, const std::string& needle) {
  const CliRun r = run(args);
  EXPECT_EQ(r.status, status) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST_F(EvalCli, RefusesBadInput) {
  const std::string base = "eval -i " + records_.string() + " -o " + tmp("bad").string() + " --force ";
  expect_refused(base + "--budgets 1.0", 2, "--budgets");
  expect_refused(base + "--budgets 0", 2, "--budgets");
  expect_refused(base + "--methods oracle", 2, "oracle");
  expect_refused(base + "--methods attn --compress prompt", 2, "--compress context");
  expect_refused(base + "--methods file", 2, "--selection-file");
  expect_refused(base + "--max-new-tokens 0", 2, "--max-new-tokens");
  const fs::path noq = tmp("noq.jsonl");
  std::ofstream(noq) << R"({"id": "a", "context": "The sky is blue and the grass is green today, as always here.", "answer": "blue"})" << "\n";
  expect_refused("eval -i " + noq.string() + " --window 4 -o " + tmp("noq").string() + " --force", 1, "no question");
  EXPECT_FALSE(fs::exists(tmp("noq.h5")));
}

}  // namespace

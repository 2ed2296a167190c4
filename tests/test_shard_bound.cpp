// Sharding, --resume and `ckv merge` for `ckv bound` / `ckv check` on the default model: the
// merge of two shards equals one unsharded run (HDF5 records, CSV bytes, JSON summary and
// the console Table 9 summary); a run killed mid-batch resumes to the uninterrupted result;
// resuming with another model, settings, command or shard and merging foreign shards are
// refused with one line.
#include <gtest/gtest.h>

#include "core/atomic_file.h"
#include "output/merge.h"
#include "test_shard_util.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;
using test::run_ckv;

class ShardBound : public test::DefaultModelTest {
 protected:
  ShardBound() : DefaultModelTest("ckv_shard_bound") {}
  void SetUp() override {
    DefaultModelTest::SetUp();
    if (!IsSkipped()) test::write_text(dir_ / "in.jsonl", test::small_batch(5, 12));
  }
  // `ckv <sub>` over in.jsonl with small settings; -o PREFIX in the scratch folder.
  test::RunResult run(const std::string& sub, const std::string& prefix, const std::string& extra = "",
                      const std::string& env = "") {
    const std::string settings = sub == "check" ? "--alpha 0.25,0.5" : "--methods 'snapkv,criticalkv(snapkv)'";
    return run_ckv(fmt::format("{} -m {} --input {} --layers 0-1 --window 4 --budgets 0.25,0.5 {} -t 1 -o {} {}", sub,
                               model_, (dir_ / "in.jsonl").string(), settings, (dir_ / prefix).string(), extra),
                   env);
  }
  test::RunResult merge(const std::string& out, const std::vector<std::string>& shards, const std::string& extra = "") {
    std::string cmd = "merge " + extra + " " + (dir_ / out).string();
    for (const std::string& s : shards) cmd += " " + (dir_ / s).string();
    return run_ckv(cmd);
  }
  void expect_same_outputs(const std::string& a, const std::string& b) {
    test::expect_same_records(dir_ / (a + ".h5"), dir_ / (b + ".h5"));
    EXPECT_EQ(test::read_text(dir_ / (a + ".csv")), test::read_text(dir_ / (b + ".csv")));
    EXPECT_EQ(test::summary_without_provenance(dir_ / (a + ".json")),
              test::summary_without_provenance(dir_ / (b + ".json")));
  }
};

TEST_F(ShardBound, ShardsMergeToTheSingleRun) {
  const test::RunResult full = run("bound", "full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  auto r = run("bound", "s0", "--shard 0/2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run("bound", "s1", "", "SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    const h5::File s1 = h5::File::open_read(dir_ / "s1.h5");
    EXPECT_EQ(s1.attr_string("shard"), "1/2");
    EXPECT_EQ(s1.attr_int("shard_index"), 1);
    EXPECT_EQ(s1.attr_int("input_records"), 5);
    EXPECT_EQ(s1.attr_string("input_sha256"), h5::File::open_read(dir_ / "full.h5").attr_string("input_sha256"));
    EXPECT_EQ(s1.open_group("records").children(), (std::vector<std::string>{"rec1", "rec3"}));
    EXPECT_EQ(s1.open_group("records/rec3").attr_int("index"), 3);
  }
  const test::RunResult m = merge("merged.h5", {"s1.h5", "s0.h5"});
  ASSERT_EQ(m.exit_code, 0) << m.output;
  expect_same_outputs("full", "merged");
  EXPECT_NE(test::table9_of(full.output), "");
  EXPECT_EQ(test::table9_of(full.output), test::table9_of(m.output));
  // A shard alone is not the whole run: the comparison can fail.
  EXPECT_NE(test::read_text(dir_ / "full.csv"), test::read_text(dir_ / "s0.csv"));
}

TEST_F(ShardBound, CheckShardsMergeAndKindsDoNotMix) {
  ASSERT_EQ(run("check", "full").exit_code, 0);
  ASSERT_EQ(run("check", "c0", "--shard 0/2").exit_code, 0);
  ASSERT_EQ(run("check", "c1", "--shard 1/2").exit_code, 0);
  auto r = merge("merged", {"c0.h5", "c1.h5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Assumption 3.4"), std::string::npos) << r.output;
  expect_same_outputs("full", "merged");

  ASSERT_EQ(run("bound", "b1", "--shard 1/2").exit_code, 0);
  r = merge("mixed.h5", {"c0.h5", "b1.h5"});
  test::expect_failure(r, "kind differs");
  EXPECT_FALSE(fs::exists(dir_ / "mixed.h5"));
  EXPECT_FALSE(fs::exists(dir_ / "mixed.csv"));
}

TEST_F(ShardBound, MergeReportsMissingDuplicateAndForeignShards) {
  ASSERT_EQ(run("bound", "s0", "--shard 0/2").exit_code, 0);
  ASSERT_EQ(run("bound", "s1", "--shard 1/2").exit_code, 0);
  auto r = merge("m.h5", {"s0.h5"});
  test::expect_failure(r, "2 of 5 input records missing");
  EXPECT_NE(r.output.find("rec1, rec3"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "m.h5"));
  EXPECT_FALSE(fs::exists(dir_ / "m.json"));
  r = merge("m.h5", {"s0.h5"}, "--allow-missing");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::summary_without_provenance(dir_ / "m.json")["records"], 3);

  r = merge("d.h5", {"s0.h5", "s1.h5", "s1.h5"});  // one file twice: refused as such
  test::expect_failure(r, "given twice as a shard");
  fs::copy_file(dir_ / "s1.h5", dir_ / "s1_copy.h5");  // two files of one shard
  r = merge("d.h5", {"s0.h5", "s1.h5", "s1_copy.h5"});
  test::expect_failure(r, "more than one shard");

  // Another command: the same settings, reached with a flag spelled out.
  ASSERT_EQ(run("bound", "c1", "--shard 1/2 --pool max").exit_code, 0);
  r = merge("c.h5", {"s0.h5", "c1.h5"});
  test::expect_failure(r, "command differs");
  // Another model: the same file with another model hash.
  fs::copy_file(dir_ / "s1.h5", dir_ / "x1.h5");
  h5::File::open_rw(dir_ / "x1.h5").set_attr_string("model_sha256", std::string(64, '0'));
  r = merge("x.h5", {"s0.h5", "x1.h5"});
  test::expect_failure(r, "model_sha256 differs");
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  // Another schema: a dump shard of the same input.
  r = run_ckv(fmt::format("-q dump -m {} --input {} --layers 0-1 -t 1 --shard 1/2 -o {}", model_,
                          (dir_ / "in.jsonl").string(), (dir_ / "dump1.h5").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = merge("y.h5", {"s0.h5", "dump1.h5"});
  test::expect_failure(r, "schema differs");
}

TEST_F(ShardBound, KilledRunResumesToTheUninterruptedResult) {
  test::write_text(dir_ / "in.jsonl", test::small_batch(6, 90));
  const std::vector<std::string> args = {CKV_BINARY, "bound", "-m", model_, "--input", (dir_ / "in.jsonl").string(),
                                         "-t", "2", "-o", (dir_ / "killed").string()};
  ASSERT_NO_FATAL_FAILURE(test::kill_after_two_records(args, dir_ / "killed.h5", 6));
  for (const char* ext : {".csv", ".json"})
    EXPECT_FALSE(fs::exists(dir_ / (std::string("killed") + ext))) << "a killed run must not leave " << ext;
  const fs::path partial = AtomicOutput::partial_path_for(dir_ / "killed.h5");
  // Without --resume the leftover is refused; --resume with other settings, another shard
  // or another model is refused with one line and leaves the partial file as it was.
  auto r = run_ckv(test::shell_args(args));
  test::expect_failure(r, "--resume");
  r = run_ckv(test::shell_args(args, "--resume --budgets 0.2,0.4"));
  test::expect_failure(r, "different settings: budgets");
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  r = run_ckv(test::shell_args(args, "--resume --shard 1/2"));
  test::expect_failure(r, "written by shard 0/1");
  r = run_ckv(test::shell_args(args, "--resume --gqa-reduce max"));
  test::expect_failure(r, "gqa_reduce");
  ASSERT_TRUE(fs::exists(partial));

  r = run_ckv(test::shell_args(args, "--resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("record \"rec0\""), std::string::npos) << "rec0 was complete:\n" << r.output;
  EXPECT_NE(r.output.find("record \"rec5\""), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_TRUE(h5::File::open_read(dir_ / "killed.h5").has_attr("resumed"));

  std::vector<std::string> whole = args;
  whole.back() = (dir_ / "whole").string();
  r = run_ckv(test::shell_args(whole));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_outputs("killed", "whole");
  EXPECT_EQ(test::records_of(dir_ / "whole.h5").data.size(), 6u * 4u);  // metrics, mean, kept mask and count

  // A finished output is never replaced without --force; --resume of it changes nothing.
  r = run_ckv(test::shell_args(whole));
  test::expect_failure(r, "output exists");
  r = run_ckv(test::shell_args(whole, "--resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("0 records analysed, 6 already complete"), std::string::npos) << r.output;
  expect_same_outputs("killed", "whole");
}

}  // namespace
}  // namespace ckv

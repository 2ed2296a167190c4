// ckv merge (lib/output/merge.h) and `ckv dump --shard`: shards of a small batch on the default
// model merged equal one single-process run of the same records; missing and duplicated
// records and shards of another model or command are refused.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "io/h5.h"
#include "output/merge.h"
#include "test_shard_util.h"

namespace ckv {
namespace {

using test::run_ckv;

TEST(MergeCommand, DropsOnlyPerShardFlags) {
  const auto a = shard_invariant_command("/a/ckv -q dump --input 'b c.jsonl' -o s0.h5 --shard 0/4 --layers 0-1 -t 2 --resume");
  const auto b = shard_invariant_command("/b/ckv dump --input 'b c.jsonl' --out=s1.h5 --layers 0-1 "
                                         "--threads=8 --force -v --csv=x.csv --timing-json t1.json");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, (std::vector<std::string>{"dump", "--input", "b c.jsonl", "--layers", "0-1"}));
  EXPECT_NE(a, shard_invariant_command("ckv dump --input 'b c.jsonl' --layers 0-2"));
  EXPECT_EQ(split_shell_words("x 'it'\"'\"'s' ''"), (std::vector<std::string>{"x", "it's", ""}));
}

class MergeTest : public test::DefaultModelTest {
 protected:
  MergeTest() : DefaultModelTest("ckv_merge") {}
  void SetUp() override {
    DefaultModelTest::SetUp();
    if (IsSkipped()) return;
    std::string lines;
    for (int i = 0; i < 5; ++i)
      lines += fmt::format("{{\"id\": \"r{}\", \"context\": \"Item {} is a {} stone. The sky is blue.\", "
                           "\"question\": \" Which item?\", \"spans\": {{\"needle\": [[0, 6]]}}}}\n",
                           i, i, i % 2 ? "red" : "green");
    test::write_text(dir_ / "in.jsonl", lines);
  }
  // `ckv dump` over in.jsonl with the test's fixed settings and extra arguments.
  test::RunResult dump(const std::string& out, const std::string& extra = "", const std::string& env = "") {
    return run_ckv(fmt::format("-q dump -m {} --input {} -o {} --layers 0-1 -t 1 {}", model_,
                               (dir_ / "in.jsonl").string(), (dir_ / out).string(), extra),
                   env);
  }
  test::RunResult merge(const std::string& args) {
    std::string full = "merge";
    for (const std::string& w : split_shell_words(args))
      full += " " + (w.starts_with("-") ? w : (dir_ / w).string());
    return run_ckv(full);
  }
};

TEST_F(MergeTest, ShardsMergeToTheSingleRun) {
  ASSERT_EQ(dump("full.h5").exit_code, 0);
  auto r = dump("s0.h5", "--shard 0/2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = dump("s1.h5", "", "SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_COUNT=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    const auto s1 = h5::File::open_read(dir_ / "s1.h5");
    EXPECT_EQ(s1.attr_string("shard"), "1/2");
    EXPECT_EQ(s1.attr_int("input_records"), 5);
    EXPECT_EQ(s1.open_group("records").children(), (std::vector<std::string>{"r1", "r3"}));
  }
  r = merge("merged.h5 s1.h5 s0.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  std::map<std::string, std::string> attrs_full, attrs_merged;
  std::map<std::string, std::vector<double>> data_full, data_merged;
  const auto full = h5::File::open_read(dir_ / "full.h5");
  const auto merged = h5::File::open_read(dir_ / "merged.h5");
  test::collect(full.open_group("records"), "", attrs_full, data_full);
  test::collect(merged.open_group("records"), "", attrs_merged, data_merged);
  EXPECT_EQ(attrs_full, attrs_merged);
  EXPECT_EQ(data_full.size(), data_merged.size());
  for (const auto& [path, values] : data_full) EXPECT_EQ(values, data_merged[path]) << path;
  test::collect(full.open_group("model"), "", attrs_full, data_full);
  std::map<std::string, std::string> model_merged;
  test::collect(merged.open_group("model"), "", model_merged, data_merged);
  for (const auto& [k, v] : model_merged) EXPECT_EQ(attrs_full[k], v) << k;
  for (const char* key : {"schema", "model_sha256", "settings", "input_sha256"})
    EXPECT_EQ(merged.attr_string(key), full.attr_string(key)) << key;
  EXPECT_FALSE(merged.has_attr("shard_index"));
  EXPECT_EQ(merged.attr_json("merged_from").size(), 2u);

  // Resuming a shard under another shard identity is refused.
  r = dump("s1.h5", "--shard 0/2 --resume");
  test::expect_failure(r, "shard");
}

TEST_F(MergeTest, MissingDuplicateAndForeignShardsAreRefused) {
  ASSERT_EQ(dump("s0.h5", "--shard 0/2").exit_code, 0);
  ASSERT_EQ(dump("s1.h5", "--shard 1/2").exit_code, 0);

  auto r = merge("m.h5 s0.h5");
  test::expect_failure(r, "2 of 5 input records missing");
  EXPECT_NE(r.output.find("r1, r3"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "m.h5"));
  r = merge("--allow-missing m.h5 s0.h5");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(h5::File::open_read(dir_ / "m.h5").open_group("records").children().size(), 3u);

  r = merge("d.h5 s0.h5 s1.h5 s1.h5");  // one file twice: refused as such
  test::expect_failure(r, "given twice as a shard");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "d.h5"));
  std::filesystem::copy_file(dir_ / "s1.h5", dir_ / "s1_copy.h5");  // two files of one shard
  r = merge("d.h5 s0.h5 s1.h5 s1_copy.h5");
  test::expect_failure(r, "more than one shard");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "d.h5"));

  // Another command (an extra flag that changes nothing recorded in the settings).
  ASSERT_EQ(dump("c1.h5", "--shard 1/2 --skip-bad").exit_code, 0);
  r = merge("c.h5 s0.h5 c1.h5");
  test::expect_failure(r, "command differs");
  // Other settings.
  ASSERT_EQ(dump("l1.h5", "--shard 1/2 --heads 0-3").exit_code, 0);
  r = merge("l.h5 s0.h5 l1.h5");
  test::expect_failure(r, "settings differs");
  // Another model: the same file with another model hash.
  std::filesystem::copy_file(dir_ / "s1.h5", dir_ / "x1.h5");
  h5::File::open_rw(dir_ / "x1.h5").set_attr_string("model_sha256", std::string(64, '0'));
  r = merge("x.h5 s0.h5 x1.h5");
  test::expect_failure(r, "model_sha256 differs");
  // A shard of a different split.
  ASSERT_EQ(dump("t1.h5", "--shard 1/3").exit_code, 0);
  r = merge("t.h5 s0.h5 t1.h5");
  test::expect_failure(r, "shard_count differs");
}

}  // namespace
}  // namespace ckv

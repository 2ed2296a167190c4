// Sharding, --resume and `ckv merge` for `ckv mask` on the default model: two shards merged
// equal one unsharded run (records and the tidy CSV), a run killed mid-batch resumes to the
// uninterrupted result, and mask files carry the model and input hashes merge checks.
#include <gtest/gtest.h>

#include "core/sha256.h"
#include "test_shard_util.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;
using test::run_ckv;

class ShardMask : public test::DefaultModelTest {
 protected:
  ShardMask() : DefaultModelTest("ckv_shard_mask") {}
  std::vector<std::string> args(const std::string& out, const std::string& csv) const {
    return {CKV_BINARY, "mask", "-m", model_, "--input", (dir_ / "in.jsonl").string(), "--span-name", "needle",
            "--layers", "0-3", "-t", "2", "-o", (dir_ / out).string(), "--csv", (dir_ / csv).string()};
  }
};

TEST_F(ShardMask, ShardsMergeToTheSingleRun) {
  test::write_text(dir_ / "in.jsonl", test::small_batch(5, 12));
  auto r = run_ckv(test::shell_args(args("full.h5", "full.csv")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ckv(test::shell_args(args("s0.h5", "s0.csv"), "--shard 0/2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ckv(test::shell_args(args("s1.h5", "s1.csv"), "--shard 1/2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    const h5::File full = h5::File::open_read(dir_ / "full.h5"), s1 = h5::File::open_read(dir_ / "s1.h5");
    EXPECT_EQ(full.attr_string("model_sha256"), sha256_file(model_));
    EXPECT_EQ(full.attr_string("input_sha256"), sha256_file(dir_ / "in.jsonl"));
    EXPECT_EQ(s1.attr_string("shard"), "1/2");
    EXPECT_EQ(s1.attr_int("input_records"), 5);
    EXPECT_EQ(s1.open_group("records").children(), (std::vector<std::string>{"rec1", "rec3"}));
    EXPECT_EQ(s1.open_group("records/rec3").attr_int("index"), 3);
  }
  r = run_ckv("merge --csv " + (dir_ / "merged.csv").string() + " " + (dir_ / "merged.h5").string() + " " +
              (dir_ / "s1.h5").string() + " " + (dir_ / "s0.h5").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::expect_same_records(dir_ / "full.h5", dir_ / "merged.h5");
  const std::string csv = test::read_text(dir_ / "full.csv");
  EXPECT_GT(std::count(csv.begin(), csv.end(), '\n'), 100);
  EXPECT_EQ(csv, test::read_text(dir_ / "merged.csv"));
  EXPECT_NE(csv, test::read_text(dir_ / "s0.csv"));

  // Another command: the same settings, reached with a flag spelled out.
  r = run_ckv(test::shell_args(args("p1.h5", "p1.csv"), "--shard 1/2 --pool max"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_ckv("merge " + (dir_ / "p.h5").string() + " " + (dir_ / "s0.h5").string() + " " + (dir_ / "p1.h5").string());
  test::expect_failure(r, "command differs");
}

TEST_F(ShardMask, KilledRunResumesToTheUninterruptedResult) {
  test::write_text(dir_ / "in.jsonl", test::small_batch(6, 90));
  const std::vector<std::string> killed = args("killed.h5", "killed.csv");
  ASSERT_NO_FATAL_FAILURE(test::kill_after_two_records(killed, dir_ / "killed.h5", 6));
  EXPECT_FALSE(fs::exists(dir_ / "killed.csv"));
  auto r = run_ckv(test::shell_args(killed, "--resume --sinks 2"));
  test::expect_failure(r, "different settings: sinks");
  r = run_ckv(test::shell_args(killed, "--resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("record \"rec0\""), std::string::npos) << "rec0 was complete:\n" << r.output;
  EXPECT_NE(r.output.find("record \"rec5\""), std::string::npos) << r.output;

  r = run_ckv(test::shell_args(args("whole.h5", "whole.csv")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::expect_same_records(dir_ / "killed.h5", dir_ / "whole.h5");
  EXPECT_EQ(test::read_text(dir_ / "killed.csv"), test::read_text(dir_ / "whole.csv"));
}

}  // namespace
}  // namespace ckv

// Streaming safety of ckv dump: a dump killed with SIGKILL in the middle of a batch leaves
// no final file, only the partial one; --resume skips the records that were complete and
// the result equals an uninterrupted run, record by record.
#include <gtest/gtest.h>

#include "output/dump_schema.h"
#include "test_shard_util.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;

constexpr int kRecords = 6;

std::vector<std::string> dump_args(const std::string& model, const fs::path& in, const fs::path& out) {
  return {CKV_BINARY, "-q", "dump", "--model", model, "-t", "2", "--input", in.string(), "-o",
          out.string(), "--what", "q,k,v,attn,nu,logits", "-v"};
}

TEST(DumpResume, KilledBatchResumesToTheUninterruptedResult) {
  const std::string model = test::default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model absent";
  const fs::path dir = test::scratch_dir("ckv_dump_resume");
  test::write_text(dir / "in.jsonl", test::small_batch(kRecords, 90));
  const fs::path killed = dir / "killed.h5", whole = dir / "whole.h5";

  const auto args = dump_args(model, dir / "in.jsonl", killed);
  ASSERT_NO_FATAL_FAILURE(test::kill_after_two_records(args, killed, kRecords));
  const fs::path partial = AtomicOutput::partial_path_for(killed);

  // Without --resume the leftover is refused; with it, only the missing records run.
  auto r = test::run_ckv(test::shell_args(args));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--resume"), std::string::npos) << r.output;
  r = test::run_ckv(test::shell_args(args, "--resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("\"rec0\""), std::string::npos) << "rec0 was complete:\n" << r.output;
  EXPECT_NE(r.output.find("\"rec5\""), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(killed));
  EXPECT_FALSE(fs::exists(partial));

  r = test::run_ckv(test::shell_args(dump_args(model, dir / "in.jsonl", whole)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::expect_same_records(killed, whole);
  // tokens, attn_rows, q/k/v/attn/nu_l1/nu_l2 of 30 layers, logits_last
  EXPECT_EQ(test::records_of(whole).data.size(), static_cast<size_t>(kRecords) * (2 + 30 * 6 + 1));
  EXPECT_TRUE(h5::File::open_read(killed).has_attr("resumed"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ckv

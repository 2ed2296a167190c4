// ckv dump's refusals: each bad input exits non-zero with one line naming the input, and
// nothing is left under the output name.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "output/batch_output.h"
#include "output/dump_schema.h"
#include "test_dump_util.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;
using test::run_ckv;

std::string tiny_model() { return (fs::path(CKV_TEST_DATA_DIR) / "models/tiny_llama_gqa").string(); }

class DumpCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir("ckv_dump_cli");
    test::write_text(dir_ / "tokens.txt", "1 2 3 4 5 6 7 8 9 10");
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A dump of the tiny model over 10 token ids, with extra flags.
  test::RunResult dump(const std::string& flags, const std::string& out = "out.h5") {
    return run_ckv(fmt::format("-q dump --model {} --tokens {} -t 1 -o {} {}",
                               tiny_model(), (dir_ / "tokens.txt").string(), (dir_ / out).string(), flags));
  }
  // Runs and expects failure with `needle` in the message.
  void expect_refused(const std::string& flags, const std::string& needle) {
    const auto r = dump(flags, "bad.h5");
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.output.find(needle), std::string::npos) << flags << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "bad.h5")) << flags;
  }
  fs::path dir_;
};

TEST_F(DumpCli, RefusesBadSelections) {
  expect_refused("--layers 0,2", "--layers: 2 is outside [0, 2)");
  expect_refused("--heads 4", "--heads: 4 is outside [0, 4)");
  expect_refused("--what q,attention", "--what: unknown item 'attention'");
  expect_refused("--window 11", "--window 11 is longer than the context (10 tokens)");
  expect_refused("--attn-rows 3,10", "--attn-rows: 10 is outside [0, 10) (rows past the end of its 10 tokens)");
  expect_refused("--attn-rows last:11", "last:11");
  expect_refused("--attn-rows all --max-bytes 1000", "above --max-bytes 1000");
  expect_refused("--dtype f64", "--dtype");
}

TEST_F(DumpCli, PrintsFullAttentionSizeAndWritesIt) {
  const auto r = run_ckv(fmt::format("dump --model {} --tokens {} -t 1 -o {} --attn-rows all --dtype f32",
                                     tiny_model(), (dir_ / "tokens.txt").string(), (dir_ / "full.h5").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 2 layers x 4 heads x 10 x 10 x 4 bytes.
  EXPECT_NE(r.output.find("full attention 2 layers x 4 heads x 10 x 10"), std::string::npos) << r.output;
  h5::File f = h5::File::open_read(dir_ / "full.h5");
  EXPECT_EQ(f.open_dataset("records/0/layers/1/attn").shape(), (std::vector<int64_t>{4, 10, 10}));
}

TEST_F(DumpCli, NeverOverwritesWithoutForce) {
  ASSERT_EQ(dump("").exit_code, 0);
  const auto size = fs::file_size(dir_ / "out.h5");
  const auto r = dump("--what q");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--force"), std::string::npos) << r.output;
  EXPECT_EQ(fs::file_size(dir_ / "out.h5"), size);
  EXPECT_EQ(dump("--what q --force").exit_code, 0);
  h5::File f = h5::File::open_read(dir_ / "out.h5");
  EXPECT_FALSE(f.exists("records/0/layers/0/k"));
}

TEST_F(DumpCli, RefusesUnwritableOutput) {
  const auto r = run_ckv(fmt::format("-q dump --model {} --tokens {} -o /nonexistent_ckv_dir/x.h5",
                                     tiny_model(), (dir_ / "tokens.txt").string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent_ckv_dir"), std::string::npos) << r.output;
}

// `ckv args` under a file-size limit of `kib` KiB with SIGXFSZ ignored (an ignored signal
// stays ignored across exec), so that writes past the limit fail with EFBIG the way they
// fail with ENOSPC on a full disk. Needs no root and no special file system.
test::RunResult run_ckv_limited(const std::string& args, int kib) {
  const std::string cmd = fmt::format("bash -c \"trap '' XFSZ; ulimit -f {}; exec {} {}\" 2>&1", kib,
                                      CKV_BINARY, args);
  test::RunResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  while (const size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void expect_one_error_line(const test::RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("ckv: error: ", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

// A full disk at each stage: creating the file, its first metadata flush, the first
// dataset, the middle of the record. One error line naming the file and the reason, exit
// 1 (not a crash in HDF5's exit-time clean-up), and nothing left: no output, no partial.
TEST_F(DumpCli, FullDiskIsOneLineAndLeavesNothing) {
  std::string tokens;
  for (int i = 1; i <= 200; ++i) tokens += std::to_string(i) + " ";
  test::write_text(dir_ / "long.txt", tokens);
  const std::string args = fmt::format("-q dump --model {} --tokens {} -t 1 -o {}",
                                       tiny_model(), (dir_ / "long.txt").string(), (dir_ / "full.h5").string());
  ASSERT_EQ(run_ckv_limited(args, 4096).exit_code, 0);  // the whole dump is about 270 KiB
  fs::remove(dir_ / "full.h5");
  for (const int kib : {0, 4, 16, 150}) {
    SCOPED_TRACE(fmt::format("limit {} KiB", kib));
    const auto r = run_ckv_limited(args, kib);
    expect_one_error_line(r, "full.h5");
    EXPECT_NE(r.output.find("File too large"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "full.h5"));
    EXPECT_FALSE(fs::exists(dir_ / ".full.h5.partial"));
  }
}

// A batch that fills the disk in its second record: the partial file keeps the complete
// first record (and says the second is not complete), and --resume with room again gives
// the same file as a run that never failed.
TEST_F(DumpCli, FullDiskInALaterRecordResumes) {
  const std::string model = test::default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model absent";
  test::write_text(dir_ / "in.jsonl",
                   "{\"id\": \"a\", \"context\": \"One two three four five six seven.\"}\n"
                   "{\"id\": \"b\", \"context\": \"Eight nine ten eleven twelve thirteen.\"}\n"
                   "{\"id\": \"c\", \"context\": \"Fourteen fifteen sixteen seventeen.\"}\n");
  const std::string base = fmt::format("-q dump --model {} -t 1 --input {} --what q,k,v,attn,nu -o ", model,
                                       (dir_ / "in.jsonl").string());
  ASSERT_EQ(run_ckv(base + (dir_ / "whole.h5").string()).exit_code, 0);
  // Three records of about the same size: half the file ends inside the second.
  const int kib = static_cast<int>(fs::file_size(dir_ / "whole.h5") / 2048);
  const auto r = run_ckv_limited(base + (dir_ / "out.h5").string(), kib);
  expect_one_error_line(r, "out.h5");
  EXPECT_NE(r.output.find("File too large"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "out.h5"));
  {
    const h5::File partial = h5::File::open_read(dir_ / ".out.h5.partial");
    EXPECT_EQ(complete_record_ids(partial), (std::set<std::string>{"a"}));
  }
  const auto resumed = run_ckv(base + (dir_ / "out.h5").string() + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  std::map<std::string, std::string> attrs_a, attrs_b;
  std::map<std::string, std::vector<double>> data_a, data_b;
  test::collect(h5::File::open_read(dir_ / "whole.h5").open_group("records"), "", attrs_a, data_a);
  test::collect(h5::File::open_read(dir_ / "out.h5").open_group("records"), "", attrs_b, data_b);
  EXPECT_EQ(attrs_a, attrs_b);
  EXPECT_EQ(data_a, data_b);
}

TEST_F(DumpCli, ResumeRefusesOtherSchemaVersionsAndSettings) {
  ASSERT_EQ(dump("").exit_code, 0);
  auto r = dump("--resume --what q");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("different settings: what"), std::string::npos) << r.output;
  r = run_ckv(fmt::format("-q dump --model {} --tokens {} -o {} --resume",
                          (fs::path(CKV_TEST_DATA_DIR) / "models/tiny_qwen2_bias").string(),
                          (dir_ / "tokens.txt").string(), (dir_ / "out.h5").string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--resume with another model"), std::string::npos) << r.output;
  {
    h5::File f = h5::File::open_rw(dir_ / "out.h5");
    f.set_attr_int("schema_version", kDumpSchemaVersion + 1);
  }
  // The refused resume left the finished file where it was.
  r = dump("--resume");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(fmt::format("dump schema version {}", kDumpSchemaVersion + 1)), std::string::npos)
      << r.output;
}

// The dump resumes under the checks of every batch output (check_resumable_output): an
// input file with another sha256, or another command beyond the per-shard and output flags,
// is refused with one line naming the file, which stays where it was.
TEST_F(DumpCli, ResumeRefusesAnotherInputOrCommand) {
  ASSERT_EQ(dump("").exit_code, 0);
  test::write_text(dir_ / "tokens.txt", "1 2 3 4 5 6 7 8 9 11");
  auto r = dump("--resume");
  expect_one_error_line(r, "out.h5: --resume with another input (the file's input sha256 is ");
  test::write_text(dir_ / "tokens.txt", "1 2 3 4 5 6 7 8 9 10");
  r = dump("--resume --max-bytes 1000000");
  expect_one_error_line(r, "out.h5: --resume with another command (beyond shard and output flags)");
  EXPECT_NE(r.output.find("--max-bytes 1000000"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "out.h5"));
  EXPECT_FALSE(fs::exists(dir_ / ".out.h5.partial"));
  // Threads, quiet and timing flags are not another command.
  r = run_ckv(fmt::format("dump --model {} --tokens {} --threads=2 -o {} --resume --timing-json {}",
                          tiny_model(), (dir_ / "tokens.txt").string(), (dir_ / "out.h5").string(),
                          (dir_ / "timing.json").string()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(complete_record_ids(h5::File::open_read(dir_ / "out.h5")), (std::set<std::string>{"0"}));
}

TEST_F(DumpCli, BadJsonlLineNamesItsLineAndSkipBadGoesOn) {
  const std::string model = test::default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model absent";
  test::write_text(dir_ / "in.jsonl",
                   "{\"id\": \"a\", \"context\": \"One two three.\"}\n\n"
                   "{\"id\": \"b\", \"context\": \"Four\", \"question\": 5}\n"
                   "{\"id\": \"c\", \"context\": \"Five six.\", \"question\": \" Seven?\"}\n");
  const std::string base = fmt::format("-q dump --model {} -t 1 --input {} --layers 0 --what q,attn,nu ",
                                       model, (dir_ / "in.jsonl").string());
  auto r = run_ckv(base + "-o " + (dir_ / "j.h5").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("in.jsonl:3: \"question\" must be a string"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "j.h5"));
  r = run_ckv(base + "--skip-bad -o " + (dir_ / "k.h5").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("in.jsonl:3"), std::string::npos) << r.output;  // the warning
  h5::File f = h5::File::open_read(dir_ / "k.h5");
  EXPECT_EQ(complete_record_ids(f), (std::set<std::string>{"a", "c"}));
  const h5::Group c = f.open_group("records/c");
  const int64_t n = c.attr_int("n_tokens"), ctx = c.attr_int("context_end");
  EXPECT_LT(ctx, n);  // a question follows the context
  // Default rows: the whole (short) context as window, then every question position.
  EXPECT_EQ(static_cast<int64_t>(c.open_dataset("attn_rows").shape().at(0)), n);
}

}  // namespace
}  // namespace ckv

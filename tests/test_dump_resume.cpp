// Streaming safety of ckv dump: a dump killed with SIGKILL in the middle of a batch leaves
// no final file, only the partial one; --resume skips the records that were complete and
// the result equals an uninterrupted run, record by record.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/atomic_file.h"
#include "io/dump_schema.h"
#include "test_dump_util.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;

constexpr int kRecords = 6;

std::string batch() {
  std::string out;
  const char* words[] = {"river", "stone", "lamp", "orbit", "seven", "garden", "copper", "window"};
  for (int r = 0; r < kRecords; ++r) {
    std::string context;
    for (int w = 0; w < 90; ++w) context += fmt::format("{} ", words[(w * (r + 3)) % 8]);
    out += fmt::format(R"({{"id": "rec{}", "context": "{}", "question": " Which word came first?"}})", r,
                       context) + "\n";
  }
  return out;
}

std::vector<std::string> dump_args(const std::string& model, const fs::path& in, const fs::path& out) {
  return {CKV_BINARY, "-q", "dump", "--model", model, "-t", "2", "--input", in.string(), "-o",
          out.string(), "--what", "q,k,v,attn,nu,logits", "-v"};
}

// Starts ckv, reads its per-record lines and SIGKILLs it after `after` finished records.
// Returns the number of records it reported.
int run_and_kill(const std::vector<std::string>& args, int after) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  FILE* in = ::fdopen(fds[0], "r");
  int seen = 0;
  char line[1024];
  while (seen < after && std::fgets(line, sizeof line, in) != nullptr)
    if (std::string_view(line).starts_with("record ")) ++seen;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::fclose(in);
  return seen;
}

std::string joined(const std::vector<std::string>& args, const std::string& extra) {
  std::string out;
  for (size_t i = 1; i < args.size(); ++i) out += "'" + args[i] + "' ";
  return out + extra;
}

TEST(DumpResume, KilledBatchResumesToTheUninterruptedResult) {
  const std::string model = test::default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model absent";
  const fs::path dir = test::scratch_dir("ckv_dump_resume");
  test::write_text(dir / "in.jsonl", batch());
  const fs::path killed = dir / "killed.h5", whole = dir / "whole.h5";

  const auto args = dump_args(model, dir / "in.jsonl", killed);
  ASSERT_EQ(run_and_kill(args, 2), 2);
  EXPECT_FALSE(fs::exists(killed)) << "a killed run must not leave the final name";
  const fs::path partial = AtomicOutput::partial_path_for(killed);
  ASSERT_TRUE(fs::exists(partial));
  {
    h5::File f = h5::File::open_read(partial);
    const auto done = complete_dump_records(f);
    EXPECT_GE(done.size(), 2u);
    EXPECT_LT(done.size(), static_cast<size_t>(kRecords)) << "killed too late to test resuming";
  }

  // Without --resume the leftover is refused; with it, only the missing records run.
  auto r = test::run_ckv(joined(args, ""));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--resume"), std::string::npos) << r.output;
  r = test::run_ckv(joined(args, "--resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("\"rec0\""), std::string::npos) << "rec0 was complete:\n" << r.output;
  EXPECT_NE(r.output.find("\"rec5\""), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(killed));
  EXPECT_FALSE(fs::exists(partial));

  r = test::run_ckv(joined(dump_args(model, dir / "in.jsonl", whole), ""));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  std::map<std::string, std::string> attrs_a, attrs_b;
  std::map<std::string, std::vector<double>> data_a, data_b;
  h5::File a = h5::File::open_read(killed), b = h5::File::open_read(whole);
  test::collect(a.open_group("records"), "", attrs_a, data_a);
  test::collect(b.open_group("records"), "", attrs_b, data_b);
  EXPECT_EQ(attrs_a, attrs_b);
  ASSERT_EQ(data_a.size(), data_b.size());
  EXPECT_EQ(data_a.size(), static_cast<size_t>(kRecords) * (2 + 30 * 6 + 1));  // tokens, attn_rows, layers, logits
  for (const auto& [name, values] : data_b) EXPECT_TRUE(data_a[name] == values) << name;
  EXPECT_TRUE(a.has_attr("resumed"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ckv

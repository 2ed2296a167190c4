#pragma once
// Helpers of the shard/resume/merge tests of dump, bound, check and mask: a fixture on the
// default model, a small JSONL batch, a run killed after N finished records, a refused run,
// and "the same results" for their HDF5 files.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "output/batch_output.h"
#include "test_dump_util.h"

namespace ckv::test {

// A test on the default model (skipped when it is not installed), in a fresh scratch folder
// that is removed afterwards.
class DefaultModelTest : public ::testing::Test {
 protected:
  explicit DefaultModelTest(std::string scratch) : scratch_(std::move(scratch)) {}
  void SetUp() override {
    model_ = default_model_or_empty();
    if (model_.empty()) GTEST_SKIP() << "default model not installed";
    dir_ = scratch_dir(scratch_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string model_;
  fs::path dir_;

 private:
  std::string scratch_;
};

// A refused run: a non-zero exit and `needle` in what it printed.
inline void expect_failure(const RunResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0) << "expected a refusal with: " << needle;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

// `n` records of `words` words each, with a question, an answer and a "needle" span.
inline std::string small_batch(int n, int words) {
  const char* vocab[] = {"river", "stone", "lamp", "orbit", "seven", "garden", "copper", "window"};
  std::string out;
  for (int r = 0; r < n; ++r) {
    std::string context = fmt::format("The key is {}.", 100 + r);
    for (int w = 0; w < words; ++w) context += fmt::format(" {}", vocab[(w * (r + 3)) % 8]);
    out += fmt::format(R"({{"id": "rec{}", "context": "{}", "question": " What is the key?", "answer": "{}", )"
                       R"("spans": {{"needle": [[0, 15]]}}}})",
                       r, context, 100 + r) + "\n";
  }
  return out;
}

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A JSON summary without its provenance (who, when, which shard: differs between runs).
inline nlohmann::json summary_without_provenance(const fs::path& p) {
  nlohmann::json j = nlohmann::json::parse(read_text(p));
  j.erase("provenance");
  return j;
}

// Every attribute and dataset under /records of an HDF5 file (test::collect).
struct RecordsContent {
  std::map<std::string, std::string> attrs;
  std::map<std::string, std::vector<double>> data;
};
inline RecordsContent records_of(const fs::path& p) {
  RecordsContent c;
  const h5::File f = h5::File::open_read(p);
  collect(f.open_group("records"), "", c.attrs, c.data);
  return c;
}
inline void expect_same_records(const fs::path& a, const fs::path& b) {
  const RecordsContent x = records_of(a), y = records_of(b);
  EXPECT_EQ(x.attrs, y.attrs) << a << " vs " << b;
  ASSERT_EQ(x.data.size(), y.data.size()) << a << " vs " << b;
  for (const auto& [name, values] : x.data) {
    const auto it = y.data.find(name);
    ASSERT_NE(it, y.data.end()) << name;
    // Bitwise through memcmp: NaN (oracle, bounds where S1 < 1/2) equals NaN.
    EXPECT_TRUE(values.size() == it->second.size() &&
                std::equal(values.begin(), values.end(), it->second.begin(),
                           [](double u, double v) { return std::memcmp(&u, &v, sizeof u) == 0; }))
        << name;
  }
}

// Runs `args` (argv, args[0] the binary) with stdout and stderr into a pipe and SIGKILLs it
// once `after` lines starting with "record " were printed. Returns how many it saw.
inline int run_and_kill(const std::vector<std::string>& args, int after) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
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
  char line[4096];
  while (seen < after && std::fgets(line, sizeof line, in) != nullptr)
    if (std::string_view(line).starts_with("record ")) ++seen;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::fclose(in);
  return seen;
}

// Runs `args` (which write `out` and print a "record ..." line per finished record) and
// SIGKILLs it after two records; checks that it left no `out`, only its partial file, with
// at least 2 and fewer than `records` complete records. Call in ASSERT_NO_FATAL_FAILURE.
inline void kill_after_two_records(const std::vector<std::string>& args, const fs::path& out,
                                   size_t records) {
  ASSERT_EQ(run_and_kill(args, 2), 2);
  EXPECT_FALSE(fs::exists(out)) << "a killed run must not leave the final name " << out;
  const fs::path partial = AtomicOutput::partial_path_for(out);
  ASSERT_TRUE(fs::exists(partial));
  const auto done = complete_record_ids(h5::File::open_read(partial));
  EXPECT_GE(done.size(), 2u);
  EXPECT_LT(done.size(), records) << "killed too late to test resuming";
}

// args[1..] as one shell command line for run_ckv.
inline std::string shell_args(const std::vector<std::string>& args, const std::string& extra = "") {
  std::string out;
  for (size_t i = 1; i < args.size(); ++i) out += "'" + args[i] + "' ";
  return out + extra;
}

// The console summary of a bound run or merge: from "Table 9 layout" to the closing
// "wrote ..." / "... records from ..." line.
inline std::string table9_of(const std::string& output) {
  const size_t start = output.find("Table 9 layout");
  if (start == std::string::npos) return "";
  size_t end = output.find("\nwrote ", start);
  end = std::min(end, output.find(" records from ", start));
  if (end != std::string::npos) end = output.rfind('\n', end);  // the line before the closing one
  std::string table = output.substr(start, end == std::string::npos ? std::string::npos : end - start);
  while (!table.empty() && (table.back() == '\n' || table.back() == ' ')) table.pop_back();
  return table;
}

}  // namespace ckv::test

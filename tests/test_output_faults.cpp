// Faults around outputs (issue 11): special files as outputs, a second writer, a --resume
// of a headerless partial or of a damaged finished file, a merge on a full disk or of
// damaged shards, niah's partial file, `ckv info` of every output. Each refusal is one
// `ckv: error:` line with exit status 1, and leaves every file as it was.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "output/batch_output.h"
#include "io/h5.h"
#include "output/validate.h"
#include "test_dump_util.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;
using test::run_ckv;

std::string tiny_model() { return (fs::path(CKV_TEST_DATA_DIR) / "models/tiny_llama_gqa").string(); }

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// `ckv args` under a file-size limit of `kib` KiB with SIGXFSZ ignored: writes past it fail
// with EFBIG as they fail with ENOSPC on a full disk (as in test_dump_cli.cpp).
// kib -1: no file-size limit, a 4 GiB address-space limit instead.
test::RunResult run_ckv_limited(const std::string& args, int kib) {
  const std::string limit = kib >= 0 ? fmt::format("ulimit -f {}", kib) : std::string("ulimit -v 4194304");
  const std::string cmd =
      fmt::format("bash -c \"trap '' XFSZ; {}; exec {} {}\" 2>&1", limit, CKV_BINARY, args);
  test::RunResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  while (const size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;  // -1: killed by a signal
  return r;
}

void expect_one_error_line(const test::RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("ckv: error: ", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "expected: " << needle << "\n" << r.output;
}

class OutputFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir("ckv_output_faults");
    test::write_text(dir_ / "tokens.txt", "1 2 3 4 5 6 7 8 9 10");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // A dump of the tiny model over 10 token ids to `out` (a name in dir_ or an absolute path).
  test::RunResult dump(const std::string& out, const std::string& flags = "") {
    const std::string o = out.starts_with("/") ? out : path(out);
    return run_ckv(fmt::format("-q dump --model {} --tokens {} -t 1 -o {} {}", tiny_model(), path("tokens.txt"), o,
                               flags));
  }
  test::RunResult bound(const std::string& prefix, const std::string& flags = "") {
    return run_ckv(fmt::format("-q bound --model {} --tokens {} -t 1 --window 4 -o {} {}", tiny_model(),
                               path("tokens.txt"), path(prefix), flags));
  }
  test::RunResult mask(const std::string& out, const std::string& flags = "") {
    return run_ckv(fmt::format("-q mask --model {} --tokens {} --context-end 8 --spans 2-4 -t 1 -o {} {}",
                               tiny_model(), path("tokens.txt"), path(out), flags));
  }
  // Nothing but `keep` (and tokens.txt) in the directory: no partial or lock file left.
  void expect_only(std::set<std::string> keep) {
    keep.insert("tokens.txt");
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
    EXPECT_EQ(names, keep);
  }
  fs::path dir_;
};

// Item 2: an output that is not a regular file is refused before any work, with or without
// --force, and is left as it was; so is a partial path that is not a regular file.
TEST_F(OutputFaults, SpecialFilesAreNeverReplaced) {
  auto r = dump("/dev/null", "--force");
  expect_one_error_line(r, "/dev/null: the output is a character device, not a regular file");
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";

  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  expect_one_error_line(dump("fifo", "--force"), "the output is a FIFO");
  ASSERT_EQ(::lstat(path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));

  test::write_text(dir_ / "target", "keep");
  fs::create_symlink(dir_ / "target", dir_ / "link");
  expect_one_error_line(dump("link", "--force"), "the output is a symbolic link");
  expect_one_error_line(dump("link", "--resume"), "the output is a symbolic link");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link"));
  EXPECT_EQ(bytes_of(dir_ / "target"), "keep");

  fs::create_directory(dir_ / "dir.h5");
  expect_one_error_line(dump("dir.h5", "--force"), "the output is a directory");

  // A symbolic link (to a file ckv must not write) under the partial name.
  fs::create_symlink(dir_ / "target", dir_ / ".p.h5.partial");
  expect_one_error_line(dump("p.h5", "--resume"), ".p.h5.partial is a symbolic link, not a partial file");
  expect_one_error_line(dump("p.h5", "--force"), ".p.h5.partial is a symbolic link");
  EXPECT_EQ(bytes_of(dir_ / "target"), "keep");
  fs::remove(dir_ / ".p.h5.partial");

  if (::geteuid() == 0) {
    // As root, a character device like /dev/null made in the scratch directory.
    ASSERT_EQ(::mknod(path("null").c_str(), S_IFCHR | 0666, ::makedev(1, 3)), 0);
    expect_one_error_line(dump("null", "--force"), "the output is a character device");
    ASSERT_EQ(::lstat(path("null").c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device was replaced";
    fs::remove(dir_ / "null");
  }
  expect_only({"fifo", "target", "link", "dir.h5"});
}

// Item 6: a second writer of one output is refused with one line naming the first one,
// whatever its flags; the first one's files are untouched.
TEST_F(OutputFaults, SecondWriterIsRefused) {
  {
    AtomicOutput first(dir_ / "out.h5");  // this process writes out.h5
    test::write_text(first.partial_path(), "being written");
    const std::string needle = fmt::format("out.h5: another ckv process (pid {}) is writing this output", ::getpid());
    expect_one_error_line(dump("out.h5", "--force"), needle);
    expect_one_error_line(dump("out.h5", "--resume"), needle);
    expect_one_error_line(dump("out.h5"), "out.h5");
    EXPECT_THROW(AtomicOutput(dir_ / "out.h5", {.force = true}), InputError);
    EXPECT_EQ(bytes_of(first.partial_path()), "being written");
    EXPECT_FALSE(fs::exists(dir_ / "out.h5"));
  }
  // The writer is gone (its lock with it): its partial file is an interrupted run's.
  expect_one_error_line(dump("out.h5"), "use --resume to continue it or --force to start over");
  ASSERT_EQ(dump("out.h5", "--force").exit_code, 0);
  expect_only({"out.h5"});
}

// Item 6: the partial file of a dead writer is found and resumed, even with the lock file
// of a killed run still there (a free lock).
TEST_F(OutputFaults, DeadWritersPartialIsResumed) {
  ASSERT_EQ(dump("whole.h5").exit_code, 0);
  fs::copy_file(dir_ / "whole.h5", dir_ / ".out.h5.partial");
  test::write_text(dir_ / ".out.h5.lock", "999999999\n");
  const auto r = dump("out.h5", "--resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(validate_output(h5::File::open_read(dir_ / "out.h5")).complete == 1);
  expect_only({"whole.h5", "out.h5"});
}

// The final name is never taken from under something that appeared during the run.
TEST_F(OutputFaults, CommitNeverReplacesWhatAppeared) {
  AtomicOutput out(dir_ / "out.h5");
  test::write_text(out.partial_path(), "result");
  ASSERT_EQ(::mkfifo(path("out.h5").c_str(), 0644), 0);
  EXPECT_THROW(out.commit(), IoError);
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(dir_ / "out.h5")));
  fs::remove(dir_ / "out.h5");
  test::write_text(dir_ / "out.h5", "someone else's");
  EXPECT_THROW(out.commit(), IoError);  // no --force: not replaced
  EXPECT_EQ(bytes_of(dir_ / "out.h5"), "someone else's");
  EXPECT_EQ(bytes_of(out.partial_path()), "result");
}

// Items 7 and 8: a --resume of a finished file that is damaged (n_kv_head 0, which divided
// by zero; /records not a group; no /model) is refused with one line before anything is
// moved or modified: the finished file stays under its name, byte for byte.
TEST_F(OutputFaults, FailedResumeLeavesTheFinishedFileAlone) {
  ASSERT_EQ(dump("good.h5").exit_code, 0);
  struct Damage {
    const char* what;
    std::function<void(h5::File&)> apply;
    const char* needle;
  };
  const std::vector<Damage> damages = {
      {"n_kv_head 0", [](h5::File& f) { f.open_group("model").set_attr_int("n_kv_head", 0); },
       "/model: attribute \"n_kv_head\" is 0, outside [1, 4]"},
      {"records not a group",
       [](h5::File& f) {
         f.remove("records");
         f.create_dataset("records", h5::DType::I32, {2}).write(std::vector<int32_t>{1, 2});
       },
       "/records: not a group"},
      {"no model", [](h5::File& f) { f.remove("model"); }, "/model: missing group"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    fs::copy_file(dir_ / "good.h5", dir_ / "out.h5", fs::copy_options::overwrite_existing);
    {
      h5::File f = h5::File::open_rw(dir_ / "out.h5");
      d.apply(f);
      f.close();
    }
    const std::string before = bytes_of(dir_ / "out.h5");
    expect_one_error_line(dump("out.h5", "--resume"), d.needle);
    EXPECT_EQ(bytes_of(dir_ / "out.h5"), before);
    expect_only({"good.h5", "out.h5"});
  }
}

// Item 5: a run killed inside its first record leaves a partial file without a header
// (bound: an empty HDF5 file; or a file not yet HDF5 at all): --resume starts it over
// instead of refusing it, and gives the output of a run never interrupted.
TEST_F(OutputFaults, HeaderlessPartialIsRestartedByResume) {
  ASSERT_EQ(bound("whole").exit_code, 0);
  for (const bool empty_hdf5 : {true, false}) {
    SCOPED_TRACE(empty_hdf5 ? "empty HDF5 file" : "zero-byte file");
    if (empty_hdf5) h5::File::create(dir_ / ".b.h5.partial").close();
    else test::write_text(dir_ / ".b.h5.partial", "");
    ASSERT_TRUE(has_no_header(dir_ / ".b.h5.partial"));
    const auto r = bound("b", "--resume");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, std::string> attrs_a, attrs_b;
    std::map<std::string, std::vector<double>> data_a, data_b;
    test::collect(h5::File::open_read(dir_ / "whole.h5").open_group("records"), "", attrs_a, data_a);
    test::collect(h5::File::open_read(dir_ / "b.h5").open_group("records"), "", attrs_b, data_b);
    EXPECT_EQ(attrs_a, attrs_b);
    EXPECT_EQ(data_a, data_b);
    for (const char* f : {"b.h5", "b.csv", "b.json"}) fs::remove(dir_ / f);
  }
  // The same for mask.
  ASSERT_EQ(mask("whole_mask.h5").exit_code, 0);
  h5::File::create(dir_ / ".m.h5.partial").close();
  const auto r = mask("m.h5", "--resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(validate_output(h5::File::open_read(dir_ / "m.h5")).complete, 1);
  // A partial file with a header is not thrown away: it is checked as before.
  EXPECT_FALSE(has_no_header(dir_ / "m.h5"));
  expect_only({"whole.h5", "whole.csv", "whole.json", "whole_mask.h5", "m.h5"});
}

// Item 4: a merge that fills the disk fails with one line (not a crash inside HDF5's
// H5Ocopy) and leaves nothing: no output, no partial file that would block the next run.
TEST_F(OutputFaults, MergeOnAFullDiskLeavesNothing) {
  ASSERT_EQ(dump("s.h5", "--what q,k,v,attn,nu,logits --dtype f32").exit_code, 0);
  const std::string args = fmt::format("merge {} {}", path("m.h5"), path("s.h5"));
  const auto size_kib = static_cast<int>(fs::file_size(dir_ / "s.h5") / 1024);
  for (const int kib : {4, 16, size_kib / 4, size_kib / 2, 3 * size_kib / 4}) {
    SCOPED_TRACE(fmt::format("limit {} KiB", kib));
    const auto r = run_ckv_limited(args, kib);
    expect_one_error_line(r, "File too large");
    expect_only({"s.h5"});
  }
  const auto r = run_ckv(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(run_ckv("info " + path("m.h5")).exit_code, 0);
}

// Item 10: a shard lacking what a reader needs, or holding it in another shape, is refused
// with one line naming the shard and the object; nothing is written.
TEST_F(OutputFaults, MergeValidatesEveryShard) {
  ASSERT_EQ(dump("good.h5", "--what q,k,v,attn").exit_code, 0);
  struct Damage {
    const char* what;
    std::function<void(h5::File&)> apply;
    const char* needle;
  };
  const std::vector<Damage> damages = {
      {"no model", [](h5::File& f) { f.remove("model"); }, "bad.h5:/model: missing group"},
      {"no q", [](h5::File& f) { f.remove("records/0/layers/1/q"); }, "bad.h5:/records/0/layers/1/q: missing dataset"},
      {"no tokens", [](h5::File& f) { f.remove("records/0/tokens"); }, "bad.h5:/records/0/tokens: missing dataset"},
      {"no layer", [](h5::File& f) { f.remove("records/0/layers/0"); }, "bad.h5:/records/0/layers/0: missing group"},
      {"tokens of another shape",
       [](h5::File& f) {
         f.remove("records/0/tokens");
         f.create_dataset("records/0/tokens", h5::DType::I32, {7}).write(std::vector<int32_t>(7, 1));
       },
       "bad.h5:/records/0/tokens: shape [7], expected [10]"},
      {"token id past the vocabulary",
       [](h5::File& f) {
         f.remove("records/0/tokens");
         f.create_dataset("records/0/tokens", h5::DType::I32, {10}).write(std::vector<int32_t>(10, 1 << 30));
       },
       "bad.h5:/records/0/tokens: holds 1073741824, outside"},
      {"k of another shape",
       [](h5::File& f) {
         f.remove("records/0/layers/0/k");
         f.create_dataset("records/0/layers/0/k", h5::DType::F16, {2, 9, 8}).write(std::vector<float>(144, 0));
       },
       "bad.h5:/records/0/layers/0/k: shape [2, 9, 8]"},
      {"spans not JSON", [](h5::File& f) { f.open_group("records/0").set_attr_string("spans", "{not json"); },
       "bad.h5:/records/0"},
      {"span past the end",
       [](h5::File& f) { f.open_group("records/0").set_attr_json("spans", {{"a", {{2, 11}}}}); },
       "span \"a\" [2, 11] is outside the record's 10 tokens"},
      {"n_kv_head 0", [](h5::File& f) { f.open_group("model").set_attr_int("n_kv_head", 0); },
       "bad.h5:/model: attribute \"n_kv_head\" is 0"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    fs::copy_file(dir_ / "good.h5", dir_ / "bad.h5", fs::copy_options::overwrite_existing);
    {
      h5::File f = h5::File::open_rw(dir_ / "bad.h5");
      d.apply(f);
      f.close();
    }
    expect_one_error_line(run_ckv(fmt::format("merge {} {}", path("m.h5"), path("bad.h5"))), d.needle);
    expect_only({"good.h5", "bad.h5"});
  }
  // The good shard merges, and the result passes `ckv info` (which checks it whole).
  ASSERT_EQ(run_ckv(fmt::format("merge {} {}", path("m.h5"), path("good.h5"))).exit_code, 0);
  const auto r = run_ckv("info " + path("m.h5"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Item 4: shards whose dataset object headers are damaged (bytes overwritten in place):
// every merge ends with exit 0 or one error line, never a crash inside HDF5.
TEST_F(OutputFaults, MergeOfDamagedDatasetHeadersNeverCrashes) {
#if defined(__SANITIZE_ADDRESS__)
  // The merges run under `ulimit -v`, and ASan cannot reserve its shadow memory there.
  GTEST_SKIP() << "needs ulimit -v, which AddressSanitizer builds cannot run under";
#endif
  ASSERT_EQ(dump("good.h5", "--what q,k,v").exit_code, 0);
  haddr_t header = HADDR_UNDEF;
  {
    const h5::File f = h5::File::open_read(dir_ / "good.h5");
    const h5::Dataset q = f.open_dataset("records/0/layers/0/q");
    H5O_info_t info;
    ASSERT_GE(H5Oget_info2(q.id(), &info, H5O_INFO_BASIC), 0);
    header = info.addr;
  }
  int crashes = 0, refused = 0;
  for (int offset = 0; offset < 320; offset += 5) {
    fs::copy_file(dir_ / "good.h5", dir_ / "bad.h5", fs::copy_options::overwrite_existing);
    {
      std::fstream f(dir_ / "bad.h5", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(header + static_cast<haddr_t>(offset)));
      const char junk[3] = {'\x7f', '\xff', '\x13'};
      f.write(junk, sizeof junk);
    }
    // Under a memory limit, so that a damaged size that asks for an absurd allocation fails
    // (one line, exit 1) instead of drawing the OOM killer on a busy machine.
    const auto r = run_ckv_limited(fmt::format("merge --force {} {}", path("m.h5"), path("bad.h5")), -1);
    if (r.exit_code != 0 && r.exit_code != 1) {
      ++crashes;
      ADD_FAILURE() << "offset " << offset << ": exit " << r.exit_code << "\n" << r.output;
    }
    if (r.exit_code == 1) {
      ++refused;
      EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
      EXPECT_FALSE(fs::exists(dir_ / "m.h5"));
    }
    fs::remove(dir_ / "m.h5");
    EXPECT_FALSE(fs::exists(dir_ / ".m.h5.partial"));
  }
  EXPECT_EQ(crashes, 0);
  EXPECT_GT(refused, 0) << "no damage was noticed: the test damages the wrong bytes";
}

// Item 17: an output given as an input, or one input given twice (by any name), is refused
// before anything is written; the shards stay as they were.
TEST_F(OutputFaults, MergeRefusesAnInputAsOutputAndRepeatedInputs) {
  ASSERT_EQ(dump("s0.h5").exit_code, 0);
  const std::string before = bytes_of(dir_ / "s0.h5");
  expect_one_error_line(run_ckv(fmt::format("merge --force {0} {0} {0}", path("s0.h5"))), "given twice as a shard");
  expect_one_error_line(run_ckv(fmt::format("merge --force {0} {0}", path("s0.h5"))),
                        "the output is the shard");
  fs::create_hard_link(dir_ / "s0.h5", dir_ / "alias.h5");
  expect_one_error_line(run_ckv(fmt::format("merge --force {} {}", path("alias.h5"), path("s0.h5"))),
                        "the output is the shard");
  expect_one_error_line(run_ckv(fmt::format("merge {} {} {}", path("m.h5"), path("s0.h5"), path("alias.h5"))),
                        "given twice as a shard");
  EXPECT_EQ(bytes_of(dir_ / "s0.h5"), before);
  expect_only({"s0.h5", "alias.h5"});
}

// Item 17: `ckv info` describes every ckv output, not only dumps.
TEST_F(OutputFaults, InfoDescribesEveryOutput) {
  ASSERT_EQ(bound("b").exit_code, 0);
  ASSERT_EQ(mask("m.h5").exit_code, 0);
  ASSERT_EQ(run_ckv(fmt::format("-q merge {} {}", path("merged"), path("b.h5"))).exit_code, 0);
  for (const auto& [file, needle] : std::vector<std::pair<std::string, std::string>>{
           {"b.h5", "schema ckv.bound version 3"},
           {"m.h5", "schema ckv.mask version 2"},
           {"merged.h5", "merged from   1 shard file(s)"}}) {
    const auto r = run_ckv("info " + path(file));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("records       1 (1 complete)"), std::string::npos) << r.output;
    const auto j = run_ckv("info --json " + path(file));
    EXPECT_EQ(j.exit_code, 0) << j.output;
    EXPECT_EQ(nlohmann::json::parse(j.output)["records"]["complete"], 1);
  }
}

// Item 16: niah cannot be resumed: a failed run removes its partial file, and the partial
// file of a killed one does not block the next run (nor is --resume suggested).
TEST_F(OutputFaults, NiahLeavesNoPartialAndIsNotBlockedByOne) {
  const std::string model = test::default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model absent";
  const std::string args = fmt::format("niah --model {} --length 200 --count 3 -o {}", model, path("n.jsonl"));
  const auto failed = run_ckv_limited(args, 1);  // the second prompt does not fit
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_EQ(failed.output.find("--resume"), std::string::npos) << failed.output;
  expect_only({});
  test::write_text(dir_ / ".n.jsonl.partial", "{\"id\": \"half");  // as a killed run leaves it
  const auto r = run_ckv(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_only({"n.jsonl"});
  const auto again = run_ckv(args);
  expect_one_error_line(again, "output exists; use --force to overwrite it");
  EXPECT_EQ(again.output.find("--resume"), std::string::npos) << again.output;
}

}  // namespace
}  // namespace ckv

// --resume after what a failed write leaves, and the refusals around it (issue 24 items 1, 2,
// 5, 6, 9): a run stopped by a full disk or a file-size limit resumes (bound, eval, mask) to
// the result of a run never interrupted, whatever libhdf5 left in its partial file; a
// finished file with damaged data is refused before it is moved; `ckv info` reads the data;
// a second writer is told the first one's pid whatever its flags; SIGXFSZ never kills ckv
// silently. The failed writes come from `ulimit -f` (EFBIG, as ENOSPC on a full disk).
#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/atomic_file.h"
#include "io/h5.h"
#include "output/validate.h"
#include "test_shard_util.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;
using test::run_ckv;
using test::RunResult;

// `ckv args` under a file-size limit of `kib` KiB; SIGXFSZ is left at its default unless
// `trap` (ckv itself must ignore it).
RunResult run_limited(const std::string& args, int kib, bool trap = false) {
  const std::string cmd = fmt::format("bash -c \"{}ulimit -f {}; exec {} {}\" 2>&1",
                                      trap ? "trap '' XFSZ; " : "", kib, CKV_BINARY, args);
  RunResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  while (const size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;  // -1: killed by a signal
  return r;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void expect_one_error_line(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("ckv: error: ", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "expected: " << needle << "\n" << r.output;
}

class ResumeFaults : public test::DefaultModelTest {
 protected:
  ResumeFaults() : DefaultModelTest("ckv_resume_faults") {}
  void SetUp() override {
    DefaultModelTest::SetUp();
    if (!model_.empty()) test::write_text(dir_ / "in.jsonl", test::small_batch(4, 40));
  }
  void resume_after_failed_write(const std::string& kind);
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string input() const { return path("in.jsonl"); }
  // The command of each batch output, writing `out` (bound and eval: a prefix).
  std::string command(const std::string& kind, const std::string& out) const {
    if (kind == "bound")
      return fmt::format("-q bound -m {} -i {} --layers 0-1 --window 4 --budgets 0.2 -t 1 -o {}",
                         model_, input(), path(out));
    if (kind == "eval")
      return fmt::format(
          "-q eval -m {} -i {} --methods snapkv --budgets 0.3 --window 4 --max-new-tokens 2 -t 1 "
          "-o {}",
          model_, input(), path(out));
    return fmt::format("-q mask -m {} -i {} --span-name needle --layers 0-1 -t 1 -o {}", model_,
                       input(), path(out + ".h5"));
  }
};

// Item 1: for bound, eval and mask, a run stopped by a failed write at any point (here:
// file-size limits from 8 KiB to most of the output; four, to keep the test short under
// the sanitizers), then `--resume` with the limit
// gone, gives the records of a run never interrupted.
// One test per output kind, so each stays inside CTest's 600 s under ASan.
void ResumeFaults::resume_after_failed_write(const std::string& kind) {
  {
    RunResult r = run_ckv(command(kind, kind + "_whole"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto size_kib = static_cast<int>(fs::file_size(dir_ / (kind + "_whole.h5")) / 1024);
    int failed = 0;
    for (const int kib : {8, size_kib / 3, 2 * size_kib / 3, 5 * size_kib / 6}) {
      SCOPED_TRACE(fmt::format("limit {} KiB of {}", kib, size_kib));
      const std::string out = kind + "_out";
      for (const auto& e : fs::directory_iterator(dir_))
        if (e.path().filename().string().find(out) != std::string::npos) fs::remove(e.path());
      r = run_limited(command(kind, out), kib, /*trap=*/true);
      if (r.exit_code == 0) continue;  // the limit was not reached
      ++failed;
      EXPECT_EQ(r.exit_code, 1) << r.output;
      EXPECT_NE(r.output.find("ckv: error: "), std::string::npos) << r.output;
      EXPECT_FALSE(fs::exists(dir_ / (out + ".h5")));
      r = run_ckv(command(kind, out) + " --resume");
      ASSERT_EQ(r.exit_code, 0) << r.output;
      test::expect_same_records(dir_ / (kind + "_whole.h5"), dir_ / (out + ".h5"));
      EXPECT_FALSE(fs::exists(dir_ / ("." + out + ".h5.partial.rebuild")));
    }
    EXPECT_GE(failed, 3) << "the limits stopped too few runs to test resuming";
  }
}

TEST_F(ResumeFaults, BoundResumeAfterAFailedWriteEqualsAnUninterruptedRun) { resume_after_failed_write("bound"); }
TEST_F(ResumeFaults, EvalResumeAfterAFailedWriteEqualsAnUninterruptedRun) { resume_after_failed_write("eval"); }
TEST_F(ResumeFaults, MaskResumeAfterAFailedWriteEqualsAnUninterruptedRun) { resume_after_failed_write("mask"); }

// The first chunk of a chunked dataset, as a byte range of the file.
std::pair<haddr_t, hsize_t> first_chunk(const fs::path& file, const std::string& dataset) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const hid_t space = H5Dget_space(d);
  std::vector<hsize_t> offset(static_cast<size_t>(H5Sget_simple_extent_ndims(space)));
  unsigned mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  H5Dget_chunk_info(d, space, 0, offset.data(), &mask, &addr, &size);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return {addr, size};
}

// Item 2: a finished bound shard whose compressed kept_mask has flipped bytes is refused by
// --resume before it is moved (out.h5 stays, byte for byte), and `ckv info` finds it too.
TEST_F(ResumeFaults, DamagedDataIsRefusedBeforeTheFileIsMoved) {
  const std::string cmd = command("bound", "out") + " --shard 0/2";
  RunResult r = run_ckv(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(run_ckv("info " + path("out.h5")).exit_code, 0);
  std::string id;
  {
    const h5::File f = h5::File::open_read(dir_ / "out.h5");
    id = f.open_group("records").children().front();
    ASSERT_FALSE(f.open_dataset("records/" + id + "/kept_mask").chunk_shape().empty());
  }
  const auto [addr, size] = first_chunk(dir_ / "out.h5", "records/" + id + "/kept_mask");
  ASSERT_NE(addr, HADDR_UNDEF);
  ASSERT_GT(size, 8u);
  {
    std::fstream f(dir_ / "out.h5", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(addr + size / 2));
    const char junk[4] = {'\x5a', '\xa5', '\x5a', '\xa5'};
    f.write(junk, sizeof junk);
  }
  const std::string before = bytes_of(dir_ / "out.h5");
  r = run_ckv(cmd + " --resume");
  expect_one_error_line(r, "kept_mask");
  EXPECT_EQ(bytes_of(dir_ / "out.h5"), before);
  EXPECT_FALSE(fs::exists(dir_ / ".out.h5.partial"));
  expect_one_error_line(run_ckv("info " + path("out.h5")), "kept_mask");
}

// Item 5: a second writer with no flags is told about the running one and its pid, not sent
// to --resume its partial file (bound, eval, mask, dump).
TEST_F(ResumeFaults, SecondWriterWithoutFlagsIsToldThePid) {
  const std::string needle =
      fmt::format("another ckv process (pid {}) is writing this output", ::getpid());
  for (const std::string kind : {"bound", "eval", "mask"}) {
    SCOPED_TRACE(kind);
    const fs::path out = dir_ / (kind + "_x.h5");
    AtomicOutput first(out);
    test::write_text(first.partial_path(), "being written");
    for (const char* flags : {"", " --resume", " --force"})
      expect_one_error_line(run_ckv(command(kind, kind + "_x") + flags), needle);
    EXPECT_EQ(bytes_of(first.partial_path()), "being written");
  }
  AtomicOutput first(dir_ / "d.h5");
  test::write_text(first.partial_path(), "being written");
  expect_one_error_line(run_ckv(fmt::format("-q dump -m {} -i {} --layers 0 -t 1 -o {}", model_,
                                            input(), path("d.h5"))),
                        needle);
}

// Item 6: past a file-size limit (SIGXFSZ at its default), dump, eval and merge fail with one
// line and exit 1, never killed by the signal; merge leaves no partial file.
TEST_F(ResumeFaults, FileSizeLimitIsAnErrorNotASignal) {
  const std::string dump = fmt::format("-q dump -m {} -i {} --layers 0-1 --what q,k,v -t 1 -o {}",
                                       model_, input(), path("d.h5"));
  RunResult r = run_limited(dump, 16);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ckv: error: "), std::string::npos) << r.output;
  r = run_limited(command("eval", "e"), 16);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ckv: error: "), std::string::npos) << r.output;
  ASSERT_EQ(run_ckv(dump).exit_code, 0);
  r = run_limited(fmt::format("merge {} {}", path("m.h5"), path("d.h5")), 16);
  expect_one_error_line(r, "File too large");
  EXPECT_FALSE(fs::exists(dir_ / "m.h5"));
  EXPECT_FALSE(fs::exists(dir_ / ".m.h5.partial"));
}

// Item 9: an eval shard whose record's question starts outside its tokens is refused by merge.
TEST_F(ResumeFaults, MergeRefusesAnEvalRecordOutsideItsTokens) {
  ASSERT_EQ(run_ckv(command("eval", "e") + " --shard 0/1").exit_code, 0);
  {
    h5::File f = h5::File::open_rw(dir_ / "e.h5");
    h5::Group records = f.open_group("records");
    h5::Group rec = records.open_group(records.children().front());
    rec.set_attr_int("question_start", rec.attr_int("n_tokens") + 5);
    f.close();
  }
  expect_one_error_line(run_ckv(fmt::format("merge {} {}", path("g.h5"), path("e.h5"))),
                        "question_start");
  EXPECT_FALSE(fs::exists(dir_ / "g.h5"));
}

}  // namespace
}  // namespace ckv

#pragma once
// Output safety for every file ckv writes (dump, bound, mask, merge).
//
// A run writes to a partial file beside the final one and renames it when complete, so an
// interrupted run never leaves a half file under a name that looks whole:
//
//     final:    out/run.h5
//     partial:  out/.run.h5.partial     (same directory, so the rename is atomic)
//
// The partial name is stable, not random, so that `--resume` finds what an interrupted
// run (even one killed by SIGKILL) left behind. Two runs writing the same output at once
// are not detected; that is the user's responsibility.
//
//   AtomicOutput out(path, {.force = opt.force, .resume = opt.resume});
//   auto file = out.continuing() ? open_rw(out.partial_path()) : create(out.partial_path());
//   ... write, close the file ...
//   out.commit();   // fsync, rename to the final name, fsync the directory
//
// Without commit() (an exception, a signal) the partial file stays for --resume and the
// final name is never created.
#include <filesystem>

namespace ckv {

struct AtomicOutputOptions {
  // Replace an existing output (the old one stays until commit() replaces it) and discard
  // a stale partial file.
  bool force = false;
  // Continue an existing partial file or, when only the final file exists, reopen that
  // (it is moved back to the partial name until the next commit()).
  bool resume = false;
  // With both, resume wins: an existing partial file is continued.
};

class AtomicOutput {
 public:
  // Checks the situation on disk before anything is written. Throws
  //   InputError  when the output (or a partial one) exists and neither force nor resume
  //               says what to do with it; the message names the path and the flags;
  //   IoError     when the directory does not exist or is not writable.
  AtomicOutput(std::filesystem::path final_path, AtomicOutputOptions options = {});
  ~AtomicOutput() = default;  // leaves the partial file; never creates the final name
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  AtomicOutput(AtomicOutput&&) = default;
  AtomicOutput& operator=(AtomicOutput&&) = default;

  // `.<name>.partial` in the directory of `final_path`.
  static std::filesystem::path partial_path_for(const std::filesystem::path& final_path);

  const std::filesystem::path& final_path() const { return final_path_; }
  // Where the run writes. Close every handle on it before commit().
  const std::filesystem::path& partial_path() const { return partial_path_; }
  // True when resume was asked and an earlier file exists at partial_path(): open it for
  // continuation instead of creating a new one.
  bool continuing() const { return continuing_; }
  bool committed() const { return committed_; }

  // Flushes the partial file to disk, renames it to the final path (replacing an old
  // output when force was given) and flushes the directory entry. Throws IoError naming
  // the path on failure (a full disk shows up here or in the writes before it).
  void commit();

 private:
  std::filesystem::path final_path_;
  std::filesystem::path partial_path_;
  bool continuing_ = false;
  bool committed_ = false;
};

}  // namespace ckv

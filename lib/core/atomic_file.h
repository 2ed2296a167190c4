#pragma once
// Output safety for every file ckv writes (dump, bound, mask, merge, niah).
//
// A run writes to a partial file beside the final one and renames it when complete, so an
// interrupted run never leaves a half file under a name that looks whole:
//
//     final:    out/run.h5
//     partial:  out/.run.h5.partial     (same directory, so the rename is atomic)
//     lock:     out/.run.h5.lock        (held while a run writes the output)
//
// The partial name is stable, not random, so that `--resume` finds what an interrupted
// run (even one killed by SIGKILL) left behind. Two runs writing the same output are kept
// apart by an exclusive flock(2) on the lock file, held from the constructor until the
// object goes: a second writer is refused with one line (naming the first one's pid), and
// a free lock beside a partial file means its writer is dead, so the partial file can be
// resumed. The lock file is removed when the lock is released; one left by a killed run
// is harmless (a free lock). File systems without flock (some Lustre mounts) get a warning
// and no protection.
//
// Outputs are regular files only: an output path that names a device, FIFO, socket,
// directory or symbolic link is refused (before any work, with or without --force), and
// so is a partial path that is not a regular file. A symbolic link is refused rather than
// followed: the rename would replace the link, not the file it points to, which is not
// what the user asked for. The output's directory must exist and be writable.
//
//   AtomicOutput::check(path, options);        // before the expensive work: refuses early
//   AtomicOutput out(path, {.force = opt.force, .resume = opt.resume});
//   auto file = out.continuing() ? open_rw(out.partial_path()) : create(out.partial_path());
//   ... write, close the file ...
//   out.commit();   // fsync, rename to the final name, fsync the directory
//
// Without commit() (an exception, a signal) the partial file stays for --resume and the
// final name is never created. Outputs that cannot be resumed (resumable = false: niah's
// JSONL, a merge) remove their partial file instead, and replace a stale one.
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
  //
  // False for outputs no command can continue: messages do not suggest --resume, a stale
  // partial file (its writer is dead: the lock is free) is replaced, and the partial file
  // is removed when the object goes without commit().
  bool resumable = true;
};

class AtomicOutput {
 public:
  // Checks the situation on disk and takes the lock. Throws
  //   InputError  when the output path is not a regular file (or a symbolic link), when
  //               another process holds the lock, or when the output (or a partial one)
  //               exists and neither force nor resume says what to do with it; the
  //               message names the path and the flags;
  //   IoError     when the directory does not exist or is not writable.
  AtomicOutput(std::filesystem::path final_path, AtomicOutputOptions options = {});
  // Releases the lock; leaves the partial file (resumable outputs); never creates the
  // final name.
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  AtomicOutput(AtomicOutput&& other) noexcept;
  AtomicOutput& operator=(AtomicOutput&& other) noexcept;

  // The constructor's checks and refusals without its effects (nothing is moved, removed
  // or kept locked): call it before loading models and hashing inputs, so that a run that
  // will be refused is refused at once.
  static void check(const std::filesystem::path& final_path, AtomicOutputOptions options = {});

  // `.<name>.partial` in the directory of `final_path`.
  static std::filesystem::path partial_path_for(const std::filesystem::path& final_path);
  // `.<name>.lock` in the directory of `final_path`.
  static std::filesystem::path lock_path_for(const std::filesystem::path& final_path);

  const std::filesystem::path& final_path() const { return final_path_; }
  // Where the run writes. Close every handle on it before commit().
  const std::filesystem::path& partial_path() const { return partial_path_; }
  // True when resume was asked and an earlier file exists at partial_path(): open it for
  // continuation instead of creating a new one.
  bool continuing() const { return continuing_; }
  bool committed() const { return committed_; }
  // True when continuing() a finished output that the constructor moved back to the partial
  // name (resume with no partial file there).
  bool reopened_final() const { return reopened_final_; }

  // Removes the partial file this run was going to continue (one that holds nothing worth
  // keeping, e.g. no header yet): the run starts the file over. continuing() becomes false.
  void restart();

  // Flushes the partial file to disk, renames it to the final path (replacing an old
  // output when force was given) and flushes the directory entry. Throws IoError naming
  // the path on failure (a full disk shows up here or in the writes before it), and
  // refuses to rename over anything but a regular file.
  void commit();

 private:
  struct Checked;
  static Checked inspect(const std::filesystem::path& final_path, const AtomicOutputOptions& options);
  static void refuse_without_flags(const std::filesystem::path& final_path, const AtomicOutputOptions& options,
                                   const Checked& checked);
  void release() noexcept;

  std::filesystem::path final_path_;
  std::filesystem::path partial_path_;
  std::filesystem::path lock_path_;
  AtomicOutputOptions options_;
  int lock_fd_ = -1;
  bool continuing_ = false;
  bool reopened_final_ = false;
  bool committed_ = false;
};

}  // namespace ckv

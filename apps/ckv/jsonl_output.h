#pragma once
// The JSONL a generator subcommand (`ckv niah`, `ckv ruler`) writes: to stdout for "-",
// else atomically into a file that is never continued (a failed or killed run's partial
// file is replaced, never offered to a --resume these subcommands do not have).
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ckv::app {

class JsonlOutput {
 public:
  // Refuses an output that may not be written before any work.
  static void check(const std::string& path, bool force) {
    if (path != "-") AtomicOutput::check(path, {.force = force, .resumable = false});
  }
  JsonlOutput(const std::string& path, bool force) {
    if (path == "-") return;
    out_.emplace(path, AtomicOutputOptions{.force = force, .resumable = false});
    file_.open(out_->partial_path(), std::ios::binary);
    if (!file_) fail<IoError>("{}: cannot be created", out_->partial_path().string());
  }
  void write(const std::string& line) {  // with its newline
    if (out_) file_ << line;
    else std::fwrite(line.data(), 1, line.size(), stdout);
  }
  void commit() {
    if (!out_) return;
    file_.close();
    if (!file_) fail<IoError>("{}: write failed", out_->partial_path().string());
    out_->commit();
  }

 private:
  std::optional<AtomicOutput> out_;
  std::ofstream file_;
};

}  // namespace ckv::app

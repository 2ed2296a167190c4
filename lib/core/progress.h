#pragma once
// A one-line progress bar on stderr, shown only when stderr is a terminal (or when forced),
// silent in batch jobs and with --quiet. Updates are rate-limited so hot loops can call
// advance() freely.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <cstdio>
#include <string>
#include <string_view>

namespace ckv {

enum class ProgressMode { Auto, Always, Never };

class Progress {
 public:
  // total <= 0 means unknown; unit names what is counted ("layers", "records", "tokens").
  Progress(std::string label, int64_t total, std::string unit, ProgressMode mode = ProgressMode::Auto);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t n = 1);
  void set_note(std::string note);  // extra text after the counters, e.g. "layer 12"
  void finish();                    // final redraw and newline; idempotent
  // Writes `text` to `out` above the bar: the bar's line is cleared first and redrawn after,
  // so results printed during the run do not mix with it (the bar stays on stderr).
  void print_above(std::FILE* out, std::string_view text);

  bool enabled() const { return enabled_; }
  static ProgressMode mode_from_flags(bool quiet, bool force);

 private:
  void draw(bool final_draw);

  std::string label_, unit_, note_;
  int64_t total_ = 0, done_ = 0;
  bool enabled_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::mutex mutex_;
};

}  // namespace ckv

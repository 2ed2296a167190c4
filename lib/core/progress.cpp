#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace ckv {

ProgressMode Progress::mode_from_flags(bool quiet, bool force) {
  if (quiet) return ProgressMode::Never;
  return force ? ProgressMode::Always : ProgressMode::Auto;
}

Progress::Progress(std::string label, int64_t total, std::string unit, ProgressMode mode)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total) {
  enabled_ = mode == ProgressMode::Always || (mode == ProgressMode::Auto && ::isatty(STDERR_FILENO));
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

void Progress::advance(int64_t n) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  done_ += n;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ >= std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::set_note(std::string note) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  note_ = std::move(note);
}

void Progress::finish() {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  if (finished_) return;
  finished_ = true;
  draw(true);
  std::fputc('\n', stderr);
}

void Progress::print_above(std::FILE* out, std::string_view text) {
  std::lock_guard lock(mutex_);
  if (enabled_ && !finished_) {
    std::fputs("\r\x1b[K", stderr);
    std::fflush(stderr);
  }
  std::fwrite(text.data(), 1, text.size(), out);
  std::fflush(out);
  if (enabled_ && !finished_) draw(false);
}

void Progress::draw(bool final_draw) {
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = seconds > 0 ? static_cast<double>(done_) / seconds : 0.0;
  std::string bar;
  if (total_ > 0) {
    constexpr int kWidth = 24;
    int filled = static_cast<int>(kWidth * std::min<int64_t>(done_, total_) / total_);
    bar = fmt::format("[{}{}] {}/{} ", std::string(filled, '#'), std::string(kWidth - filled, '.'),
                      done_, total_);
  } else {
    bar = fmt::format("{} ", done_);
  }
  std::string line = fmt::format("\r{} {}{} ({:.1f} {}/s, {:.1f} s) {}", label_, bar, unit_, rate,
                                 unit_, seconds, note_);
  std::fputs(line.c_str(), stderr);
  std::fputs("\x1b[K", stderr);  // clear the rest of the line
  if (!final_draw) std::fflush(stderr);
}

}  // namespace ckv

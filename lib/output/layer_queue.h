#pragma once
// The hand-off between `ckv dump`'s forward pass and its HDF5 writing. The forward pass
// runs on its own thread and pushes copies of what it records; the main thread pops them
// and does every HDF5 call (the Debian HDF5 build is not thread-safe, so HDF5 stays on
// one thread). The queue is bounded so memory stays at about two layers of copies: the one
// being written and the next, queued, while the forward pass computes a third.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "core/tensor.h"

namespace ckv {

// One recorder callback's tensors, copied out of the forward pass's reused buffers.
struct LayerItem {
  enum class Kind { qkv, attention, head_out, resid };
  Kind kind = Kind::qkv;
  int64_t layer = 0;
  Tensor a, b, c;  // qkv: q [n_head, seq, d_head], k, v [n_kv_head, seq, d_head];
                   // attention: probs [n_head, r, seq]; head_out: [n_head, r, d_model];
                   // resid: [seq, d_model]
};

// Thrown by push() into the forward pass once the writer has failed, so the forward pass
// stops instead of computing layers nobody will write; the writer's own error is reported.
struct WriterStopped : std::runtime_error {
  WriterStopped() : std::runtime_error("dump writer stopped") {}
};

class LayerQueue {
 public:
  explicit LayerQueue(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // Blocks while the queue is full. Throws WriterStopped after cancel().
  void push(LayerItem item) {
    std::unique_lock lock(mutex_);
    const auto start = std::chrono::steady_clock::now();
    not_full_.wait(lock, [&] { return cancelled_ || items_.size() < capacity_; });
    push_wait_ += std::chrono::steady_clock::now() - start;
    if (cancelled_) throw WriterStopped();
    items_.push_back(std::move(item));
    not_empty_.notify_one();
  }
  // Blocks until an item arrives; nullopt once close() was called and the queue is drained.
  std::optional<LayerItem> pop() {
    std::unique_lock lock(mutex_);
    const auto start = std::chrono::steady_clock::now();
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    pop_wait_ += std::chrono::steady_clock::now() - start;
    if (items_.empty()) return std::nullopt;
    LayerItem item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }
  // The producer is done (normally or not).
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
  }
  // The consumer failed: drop what is queued and make the producer's next push throw.
  void cancel() {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    items_.clear();
    not_full_.notify_all();
  }

  // Seconds the producer waited for room (the writer was behind) and the consumer waited
  // for an item (the writer was idle): where `ckv dump --timing-json` says the time went.
  double push_wait_seconds() {
    std::lock_guard lock(mutex_);
    return std::chrono::duration<double>(push_wait_).count();
  }
  double pop_wait_seconds() {
    std::lock_guard lock(mutex_);
    return std::chrono::duration<double>(pop_wait_).count();
  }

 private:
  std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<LayerItem> items_;
  size_t capacity_;
  bool closed_ = false, cancelled_ = false;
  std::chrono::steady_clock::duration push_wait_{}, pop_wait_{};
};

}  // namespace ckv

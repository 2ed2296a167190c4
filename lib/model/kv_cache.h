#pragma once
// The key/value cache of a forward pass: per layer and KV head, the post-RoPE keys and the
// values of the positions it holds, each with its original position (RoPE was applied at
// that position, so an entry keeps its meaning after others are evicted). Heads may hold
// different sets (AdaKV gives heads different budgets); positions are increasing in every
// head, and every head has seen the same tokens [0, next_position()).
//
//   KvCache cache(config);                        // empty, on the forward pass's device
//   fwd.run_cached(context, cache);               // prefill: appends [0, c)
//   cache.keep(layer, g, kept);                   // physically drops the rest of head g
//   fwd.run_cached(question, cache);              // appended at [c, n), attends to what is left
//   fwd.run_cached({next_token}, cache);          // one decoding step
//   cache.truncate(n);                            // back to the prompt (drops >= n)
//
// The interface names entries by position and hands out KvHeadView pointers for the
// attention op; nothing outside this class depends on how the rows are stored, so a device
// cache keeps the interface.
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "ops/attention.h"

namespace ckv {

class KvCache {
 public:
  KvCache() = default;
  KvCache(int64_t n_layer, int64_t n_kv_head, int64_t d_head);
  explicit KvCache(const ModelConfig& config)
      : KvCache(config.n_layer, config.n_kv_head, config.d_head) {}

  int64_t n_layer() const { return n_layer_; }
  int64_t n_kv_head() const { return n_kv_head_; }
  int64_t d_head() const { return d_head_; }
  // Tokens fed so far: the position of the next token.
  int64_t next_position() const { return next_; }
  // Entries held by (layer, kv_head), and all of them.
  int64_t size(int64_t layer, int64_t kv_head) const;
  int64_t entries() const;
  uint64_t bytes() const;  // of keys, values and positions held

  // Increasing positions held by (layer, kv_head), [size].
  std::span<const int64_t> positions(int64_t layer, int64_t kv_head) const;
  std::span<const float> keys(int64_t layer, int64_t kv_head) const;    // [size, d_head]
  std::span<const float> values(int64_t layer, int64_t kv_head) const;  // [size, d_head]
  KvHeadView view(int64_t layer, int64_t kv_head) const;

  // Appends rows [0, n) of k, v ([n_kv_head, n, d_head]) to every KV head of `layer` at
  // positions [first, first + n): first must be next_position() and every layer is appended
  // the same rows before advance(n) moves next_position(). (The forward pass does this.)
  void append(int64_t layer, const Tensor& k, const Tensor& v, int64_t first);
  void advance(int64_t n);

  // Keeps of (layer, kv_head) only the entries at `positions` (increasing, each held),
  // releasing the others' memory. Throws InputError for a position not held or out of order.
  void keep(int64_t layer, int64_t kv_head, std::span<const int64_t> positions);
  // Drops the entries at `positions` (increasing; positions not held are an InputError).
  void evict(int64_t layer, int64_t kv_head, std::span<const int64_t> positions);
  // Drops every entry at a position >= position in every head and sets next_position() to
  // it: undoes the tokens fed after it (teacher forcing, then decoding from the same point).
  void truncate(int64_t position);
  // On every sliding layer of `config` (window W), drops the entries at positions
  // <= next_position() - W, which no later query sees: such a layer then holds at most W - 1
  // entries per head between runs, whatever the length fed. Undoing tokens afterwards
  // (truncate) cannot bring them back, so a caller that rewinds does not trim.
  void trim_to_windows(const ModelConfig& config);

 private:
  struct Head {
    std::vector<int64_t> positions;  // [size]
    std::vector<float> k, v;         // [size, d_head]
  };
  Head& head(int64_t layer, int64_t kv_head);
  const Head& head(int64_t layer, int64_t kv_head) const;
  void keep_flags(Head& h, const std::vector<char>& keep);

  int64_t n_layer_ = 0, n_kv_head_ = 0, d_head_ = 0;
  int64_t next_ = 0;
  std::vector<Head> heads_;  // [n_layer * n_kv_head]
};

}  // namespace ckv

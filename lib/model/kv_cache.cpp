#include "model/kv_cache.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace ckv {

KvCache::KvCache(int64_t n_layer, int64_t n_kv_head, int64_t d_head)
    : n_layer_(n_layer), n_kv_head_(n_kv_head), d_head_(d_head) {
  if (n_layer <= 0 || n_kv_head <= 0 || d_head <= 0)
    fail<InputError>("KV cache: {} layers, {} KV heads, d_head {} invalid", n_layer, n_kv_head, d_head);
  heads_.resize(static_cast<size_t>(n_layer * n_kv_head));
}

KvCache::Head& KvCache::head(int64_t layer, int64_t kv_head) {
  return const_cast<Head&>(std::as_const(*this).head(layer, kv_head));
}

const KvCache::Head& KvCache::head(int64_t layer, int64_t kv_head) const {
  if (layer < 0 || layer >= n_layer_ || kv_head < 0 || kv_head >= n_kv_head_)
    fail<InputError>("KV cache: layer {} KV head {} outside {} layers, {} KV heads", layer, kv_head,
                     n_layer_, n_kv_head_);
  return heads_[static_cast<size_t>(layer * n_kv_head_ + kv_head)];
}

int64_t KvCache::size(int64_t layer, int64_t kv_head) const {
  return static_cast<int64_t>(head(layer, kv_head).positions.size());
}

int64_t KvCache::entries() const {
  int64_t n = 0;
  for (const Head& h : heads_) n += static_cast<int64_t>(h.positions.size());
  return n;
}

uint64_t KvCache::bytes() const {
  const auto n = static_cast<uint64_t>(entries());
  return n * (sizeof(int64_t) + 2 * sizeof(float) * static_cast<uint64_t>(d_head_));
}

std::span<const int64_t> KvCache::positions(int64_t layer, int64_t kv_head) const {
  return head(layer, kv_head).positions;
}
std::span<const float> KvCache::keys(int64_t layer, int64_t kv_head) const { return head(layer, kv_head).k; }
std::span<const float> KvCache::values(int64_t layer, int64_t kv_head) const { return head(layer, kv_head).v; }

KvHeadView KvCache::view(int64_t layer, int64_t kv_head) const {
  const Head& h = head(layer, kv_head);
  return {.k = h.k.data(), .v = h.v.data(), .positions = h.positions.data(),
          .count = static_cast<int64_t>(h.positions.size())};
}

void KvCache::append(int64_t layer, const Tensor& k, const Tensor& v, int64_t first) {
  if (k.rank() != 3 || k.shape() != v.shape() || k.dim(0) != n_kv_head_ || k.dim(2) != d_head_)
    fail<InputError>("KV cache: k {} / v {} do not fit {} KV heads of d_head {}", k.shape_string(),
                     v.shape_string(), n_kv_head_, d_head_);
  if (first != next_)
    fail<InputError>("KV cache: appending at position {}, but {} tokens are cached", first, next_);
  const int64_t n = k.dim(1);
  for (int64_t g = 0; g < n_kv_head_; ++g) {
    Head& h = head(layer, g);
    if (!h.positions.empty() && h.positions.back() >= first)
      fail<InputError>("KV cache: layer {} KV head {} already holds position {}", layer, g, h.positions.back());
    const float* kg = k.data() + g * n * d_head_;
    const float* vg = v.data() + g * n * d_head_;
    h.k.insert(h.k.end(), kg, kg + n * d_head_);
    h.v.insert(h.v.end(), vg, vg + n * d_head_);
    for (int64_t i = 0; i < n; ++i) h.positions.push_back(first + i);
  }
}

void KvCache::advance(int64_t n) {
  if (n < 0) fail<InputError>("KV cache: cannot advance by {}", n);
  next_ += n;
}

// Compacts head h to the entries flagged in `keep` ([size]) and gives back the memory.
void KvCache::keep_flags(Head& h, const std::vector<char>& keep) {
  size_t out = 0;
  const auto d = static_cast<size_t>(d_head_);
  for (size_t i = 0; i < h.positions.size(); ++i) {
    if (!keep[i]) continue;
    if (out != i) {
      h.positions[out] = h.positions[i];
      std::copy_n(h.k.begin() + static_cast<long>(i * d), d, h.k.begin() + static_cast<long>(out * d));
      std::copy_n(h.v.begin() + static_cast<long>(i * d), d, h.v.begin() + static_cast<long>(out * d));
    }
    ++out;
  }
  h.positions.resize(out);
  h.k.resize(out * d);
  h.v.resize(out * d);
  h.positions.shrink_to_fit();
  h.k.shrink_to_fit();
  h.v.shrink_to_fit();
}

namespace {

// Flags [size] of the held positions named in `wanted` (increasing, each held).
std::vector<char> flags_of(std::span<const int64_t> held, std::span<const int64_t> wanted, int64_t layer,
                           int64_t kv_head) {
  std::vector<char> flags(held.size(), 0);
  size_t j = 0;
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (i > 0 && wanted[i] <= wanted[i - 1])
      fail<InputError>("KV cache: layer {} KV head {}: positions are not increasing at {}", layer, kv_head, wanted[i]);
    while (j < held.size() && held[j] < wanted[i]) ++j;
    if (j == held.size() || held[j] != wanted[i])
      fail<InputError>("KV cache: layer {} KV head {} does not hold position {}", layer, kv_head, wanted[i]);
    flags[j++] = 1;
  }
  return flags;
}

}  // namespace

void KvCache::keep(int64_t layer, int64_t kv_head, std::span<const int64_t> positions) {
  Head& h = head(layer, kv_head);
  keep_flags(h, flags_of(h.positions, positions, layer, kv_head));
}

void KvCache::evict(int64_t layer, int64_t kv_head, std::span<const int64_t> positions) {
  Head& h = head(layer, kv_head);
  std::vector<char> flags = flags_of(h.positions, positions, layer, kv_head);
  for (char& f : flags) f = !f;
  keep_flags(h, flags);
}

void KvCache::truncate(int64_t position) {
  if (position < 0 || position > next_)
    fail<InputError>("KV cache: cannot truncate to position {} of {}", position, next_);
  const auto d = static_cast<size_t>(d_head_);
  for (Head& h : heads_) {
    const auto n = static_cast<size_t>(std::lower_bound(h.positions.begin(), h.positions.end(), position) -
                                       h.positions.begin());
    h.positions.resize(n);
    h.k.resize(n * d);
    h.v.resize(n * d);
  }
  next_ = position;
}

}  // namespace ckv

namespace ckv {

void KvCache::trim_to_windows(const ModelConfig& config) {
  if (config.n_layer != n_layer_)
    fail<InputError>("KV cache: {} layers, the config has {}", n_layer_, config.n_layer);
  for (int64_t l = 0; l < n_layer_; ++l) {
    const int64_t window = config.window_of(l);
    if (window == 0) continue;
    for (int64_t g = 0; g < n_kv_head_; ++g) {
      Head& h = head(l, g);
      std::vector<char> flags(h.positions.size());
      for (size_t i = 0; i < flags.size(); ++i) flags[i] = h.positions[i] > next_ - window ? 1 : 0;
      keep_flags(h, flags);
    }
  }
}

}  // namespace ckv

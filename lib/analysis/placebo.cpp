#include "analysis/placebo.h"

#include <cmath>

#include "core/error.h"

namespace ckv {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t n) {
  if (n == 0) fail<InputError>("SplitMix64::below: empty range");
  // The largest multiple of n that fits: values at or above it would favour small results.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x = next();
  while (x >= limit) x = next();
  return x % n;
}

PlaceboResult draw_placebos(std::span<const double> weights, const PlaceboRequest& r) {
  if (static_cast<int64_t>(weights.size()) != r.c)
    fail<InputError>("placebo: {} weights for a context of {}", weights.size(), r.c);
  if (r.length <= 0) fail<InputError>("--placebo: the target span is empty");
  if (r.count <= 0) fail<InputError>("--placebo: count must be positive, got {}", r.count);
  if (!(r.target > 0))
    fail<InputError>("--placebo: the target's Delta_theta is {}, nothing to match", r.target);
  if (!(r.tolerance >= 0)) fail<InputError>("--match-tol: must be >= 0, got {}", r.tolerance);
  const int64_t first = std::max<int64_t>(0, r.sinks), last = r.c - r.length;  // start range
  if (last < first)
    fail<InputError>("--placebo: a span of {} tokens does not fit in [{}, {}) beside the sinks",
                     r.length, first, r.c);
  std::vector<double> prefix(weights.size() + 1, 0.0);
  for (size_t i = 0; i < weights.size(); ++i) prefix[i + 1] = prefix[i] + weights[i];
  const auto overlaps = [](int64_t s, int64_t e, const SpanRange& x) { return s < x.end && x.start < e; };

  std::vector<int64_t> starts;
  for (int64_t s = first; s <= last; ++s) {
    bool ok = true;
    for (const SpanRange& x : r.exclude) ok = ok && !overlaps(s, s + r.length, x);
    if (ok) starts.push_back(s);
  }
  PlaceboResult out;
  out.candidates = static_cast<int64_t>(starts.size());
  // Fisher-Yates with the portable generator.
  SplitMix64 rng(r.seed);
  for (size_t i = starts.size(); i > 1; --i)
    std::swap(starts[i - 1], starts[static_cast<size_t>(rng.below(i))]);
  double best_gap = INFINITY;
  for (int64_t s : starts) {
    if (static_cast<int64_t>(out.spans.size()) == r.count) break;
    bool free = true;
    for (const PlaceboSpan& p : out.spans) free = free && !overlaps(s, s + r.length, p.span);
    if (!free) continue;
    ++out.searched;
    const double dt = prefix[static_cast<size_t>(s + r.length)] - prefix[static_cast<size_t>(s)];
    const double ratio = dt / r.target;
    if (std::abs(ratio - 1) < best_gap) {
      best_gap = std::abs(ratio - 1);
      out.best_ratio = ratio;
    }
    if (std::abs(ratio - 1) <= r.tolerance)
      out.spans.push_back({.span = {s, s + r.length}, .delta_theta = dt, .ratio = ratio});
  }
  return out;
}

}  // namespace ckv

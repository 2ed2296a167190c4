#pragma once
// Placebo spans for a span intervention (docs/MATH.md §6): control spans of the target's length
// whose Delta_theta matches the target's within a relative tolerance, so that a difference
// in effect is not just a difference in intervention strength.
//
// Candidates are every start s with [s, s + length) inside [sinks, c), overlapping neither
// the target ranges nor an already accepted placebo. They are visited in an order shuffled
// by a seeded SplitMix64 (a fixed integer recurrence, mapped to ranges by rejection, so the
// same seed gives the same spans on every machine and standard library); the first `count`
// within tolerance are taken.
#include <cstdint>
#include <span>
#include <vector>

#include "core/spans.h"

namespace ckv {

// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, one multiply-xorshift output per step.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [0, n), n > 0, without modulo bias (rejection of the top partial block).
  uint64_t below(uint64_t n);

 private:
  uint64_t state_;
};

struct PlaceboRequest {
  int64_t length = 0;              // span length (tokens)
  int64_t c = 0;                   // context end
  int64_t sinks = 4;               // positions [0, sinks) are never a placebo
  std::vector<SpanRange> exclude;  // the target ranges
  double target = 0;               // the target's Delta_theta
  double tolerance = 0.25;         // accept |Delta_theta / target - 1| <= tolerance
  int64_t count = 1;
  uint64_t seed = 0;
};

struct PlaceboSpan {
  SpanRange span;
  double delta_theta = 0;
  double ratio = 0;  // delta_theta / target
};

struct PlaceboResult {
  std::vector<PlaceboSpan> spans;  // at most count, in the order found
  int64_t candidates = 0;          // starts that were valid before any was accepted
  int64_t searched = 0;            // candidates examined
  double best_ratio = 0;           // closest ratio seen (to report when too few matched)
};

// weights: [c] per-position Delta_theta contributions (delta_theta_weights), so a span's
// Delta_theta is the sum over its positions. Throws InputError when the length does not
// fit, or the target's Delta_theta is not positive.
PlaceboResult draw_placebos(std::span<const double> weights, const PlaceboRequest& request);

}  // namespace ckv

#pragma once
// The needle-and-haystack machinery `ckv niah` (data/niah.h) and `ckv ruler` (data/ruler.h)
// share: the portable random stream, needle values, words of a haystack, RULER's key list
// form, and the search for the largest haystack whose prompt fits a token limit.
//
// Deterministic on every machine: std::mt19937_64's output sequence is fixed by the C++
// standard, and every mapping to a range below is ours (rejection sampling), never a
// std::*_distribution, whose algorithms differ between standard libraries.
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace ckv {

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  // Uniform in [0, n) by rejection (no modulo bias). n >= 1.
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x = g_();
    while (x >= limit) x = g_();
    return x % n;
  }
  // Uniform in [lo, hi], both included (Python's random.randint).
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }
  double unit() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t bits() { return g_(); }
  // Fisher-Yates, from the back.
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(below(i))]);
  }
  // `k` distinct indices of [0, n) in the order drawn (Python's random.sample(range(n), k)).
  std::vector<int64_t> sample(int64_t n, int64_t k);

 private:
  std::mt19937_64 g_;
};

uint64_t splitmix64(uint64_t x);

// The stream of record `index` of a set: splitmix64(seed XOR splitmix64(index)), so record
// i does not depend on the records before it.
inline uint64_t record_seed(uint64_t seed, int64_t index) {
  return splitmix64(seed ^ splitmix64(static_cast<uint64_t>(index)));
}

// RULER's needle values: a 7-digit number (10^6 .. 10^7 - 1) or a version-4 UUID
// (RFC 4122 variant), lowercase hex.
std::string random_number7(Rng& rng);
std::string random_uuid4(Rng& rng);

// Code points of UTF-8 text.
int64_t code_points(std::string_view s);

// Whitespace-separated words (Python's str.split()).
std::vector<std::string> split_words(std::string_view text);

// RULER's form of several keys: "a", "a, and b", "a, b, and c".
std::string join_keys(const std::vector<std::string>& keys);

// The largest n >= lo with fits(n) (fits(lo) must hold and fits must be monotone: once
// false, false for every larger n), by doubling then bisection, as RULER's binary search
// over the haystack size.
int64_t largest_fitting(int64_t lo, const std::function<bool(int64_t)>& fits);

}  // namespace ckv

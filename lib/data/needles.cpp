// Shared needle-and-haystack pieces (data/needles.h).
#include "data/needles.h"

#include <algorithm>

#include <fmt/format.h>

namespace ckv {

std::vector<int64_t> Rng::sample(int64_t n, int64_t k) {
  // Partial Fisher-Yates over [0, n): the first k of a random permutation.
  std::vector<int64_t> pool(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pool[static_cast<size_t>(i)] = i;
  for (int64_t i = 0; i < k; ++i)
    std::swap(
        pool[static_cast<size_t>(i)],
        pool[static_cast<size_t>(i + static_cast<int64_t>(below(static_cast<uint64_t>(n - i))))]);
  pool.resize(static_cast<size_t>(k));
  return pool;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::string random_number7(Rng& rng) {
  return std::to_string(1000000 + rng.below(9000000));
}

std::string random_uuid4(Rng& rng) {
  const uint64_t hi = rng.bits(), lo = rng.bits();
  std::string hex = fmt::format("{:016x}{:016x}", hi, lo);
  hex[12] = '4';                     // version 4
  hex[16] = "89ab"[(lo >> 62) & 3];  // RFC 4122 variant
  return fmt::format("{}-{}-{}-{}-{}", hex.substr(0, 8), hex.substr(8, 4), hex.substr(12, 4),
                     hex.substr(16, 4), hex.substr(20, 12));
}

int64_t code_points(std::string_view s) {
  int64_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : text) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::string join_keys(const std::vector<std::string>& keys) {
  if (keys.size() == 1) return keys[0];
  std::string s;
  for (size_t i = 0; i + 1 < keys.size(); ++i) s += keys[i] + ", ";
  return s + "and " + keys.back();
}

int64_t largest_fitting(int64_t lo, const std::function<bool(int64_t)>& fits) {
  int64_t hi = std::max<int64_t>(2 * lo, 64);
  while (fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace ckv

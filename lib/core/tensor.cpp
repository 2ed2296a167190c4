#include "core/tensor.h"

#include <bit>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace ckv {

int64_t Tensor::numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail("negative tensor dimension {}", d);
    if (d != 0 && n > INT64_MAX / d) fail("tensor shape [{}] overflows", fmt::join(shape, ", "));
    n *= d;
  }
  return n;
}

int64_t first_non_finite(std::span<const float> values) {
  uint32_t all_ones = 0;  // exponent bits all set: infinity or NaN
  for (const float x : values) {
    const auto bits = std::bit_cast<uint32_t>(x);
    all_ones |= static_cast<uint32_t>((bits & 0x7F800000u) == 0x7F800000u);
  }
  if (all_ones == 0) return -1;
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i])) return static_cast<int64_t>(i);
  return -1;
}

void check_finite(std::string_view name, std::span<const float> values) {
  const int64_t i = first_non_finite(values);
  if (i >= 0)
    fail<FormatError>("{}: non-finite value {} at element {} of {}", name, values[static_cast<size_t>(i)], i,
                      values.size());
}

std::string Tensor::shape_string() const { return fmt::format("[{}]", fmt::join(shape_, ", ")); }

}  // namespace ckv

#include "core/tensor.h"

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

std::string Tensor::shape_string() const { return fmt::format("[{}]", fmt::join(shape_, ", ")); }

}  // namespace ckv

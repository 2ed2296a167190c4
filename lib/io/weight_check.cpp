#include "io/weight_check.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/quant.h"

namespace ckv {

namespace {

uint16_t read_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
bool f16_non_finite(const uint8_t* p) { return (read_u16(p) & 0x7C00u) == 0x7C00u; }

// Whether any element of one stored row may be non-finite: exact for F32/F16/BF16 (exponent
// bits all ones), a test of the block scales for the block formats. Branch-free loops.
bool row_may_be_non_finite(DType t, const uint8_t* row, int64_t cols) {
  bool bad = false;
  switch (t) {
    case DType::F32:
      for (int64_t i = 0; i < cols; ++i) {
        uint32_t bits = 0;
        std::memcpy(&bits, row + 4 * i, 4);
        bad |= (bits & 0x7F800000u) == 0x7F800000u;
      }
      return bad;
    case DType::F16:
      for (int64_t i = 0; i < cols; ++i) bad |= (read_u16(row + 2 * i) & 0x7C00u) == 0x7C00u;
      return bad;
    case DType::BF16:
      for (int64_t i = 0; i < cols; ++i) bad |= (read_u16(row + 2 * i) & 0x7F80u) == 0x7F80u;
      return bad;
    default:
      break;
  }
  const int64_t blocks = cols / block_elements(t), bytes = block_bytes(t);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * bytes;
    switch (t) {
      case DType::Q8_0:
      case DType::Q4_0:
        bad |= f16_non_finite(blk);  // d
        break;
      case DType::Q4_1:
      case DType::Q4_K:
        bad |= f16_non_finite(blk) || f16_non_finite(blk + 2);  // d and m / d and dmin
        break;
      case DType::Q6_K:
        bad |= f16_non_finite(blk + 208);  // d (last)
        break;
      default:
        break;
    }
  }
  return bad;
}

}  // namespace

int64_t first_non_finite(const WeightMatrix& w) {
  std::vector<float> values;
  for (int64_t r = 0; r < w.rows(); ++r) {
    if (!row_may_be_non_finite(w.dtype(), w.row(r), w.cols())) continue;
    values.resize(static_cast<size_t>(w.cols()));  // rare path: convert the row to find the element
    w.rows_f32(r, 1, values.data());
    for (size_t c = 0; c < values.size(); ++c)
      if (!std::isfinite(values[c])) return r * w.cols() + static_cast<int64_t>(c);
  }
  return -1;
}

void check_finite(std::string_view name, const WeightMatrix& w) {
  const int64_t i = first_non_finite(w);
  if (i < 0) return;
  std::vector<float> row(static_cast<size_t>(w.cols()));
  w.rows_f32(i / w.cols(), 1, row.data());
  fail<FormatError>("{}: non-finite value {} at element {} of {}", name, row[static_cast<size_t>(i % w.cols())], i,
                    w.rows() * w.cols());
}

}  // namespace ckv

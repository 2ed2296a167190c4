#include "io/weight_check.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/quant.h"

namespace ckv {

namespace {

bool f16_non_finite(const uint8_t* p) {
  return (decode::u16(p) & 0x7C00u) == 0x7C00u;
}

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
      for (int64_t i = 0; i < cols; ++i) bad |= f16_non_finite(row + 2 * i);
      return bad;
    case DType::BF16:
      for (int64_t i = 0; i < cols; ++i) bad |= (decode::u16(row + 2 * i) & 0x7F80u) == 0x7F80u;
      return bad;
    default:
      break;
  }
  // A block format: its float16 scale fields (io/dtype.h), one or two per block.
  const DTypeTraits& traits = dtype_traits(t);
  const int64_t blocks = cols / traits.block_elements, bytes = traits.block_bytes;
  for (const int field : traits.f16_fields) {
    if (field < 0) continue;
    for (int64_t b = 0; b < blocks; ++b) bad |= f16_non_finite(row + b * bytes + field);
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
  fail<FormatError>("{}: non-finite value {} at element {} of {}", name,
                    row[static_cast<size_t>(i % w.cols())], i, w.rows() * w.cols());
}

}  // namespace ckv

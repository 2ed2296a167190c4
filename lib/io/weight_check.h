#pragma once
// Non-finite weights found in their stored form, without converting them: every element of
// F32/F16/BF16, only the f16 scales of the block formats (integer codes times finite
// scales are finite), then one row converted to name the element.
#include <cstdint>
#include <string_view>

#include "io/weight_matrix.h"

namespace ckv {

// Index (row * cols + col, HF order: the row map applied) of the first NaN or infinity in
// w, or -1.
int64_t first_non_finite(const WeightMatrix& w);

// Throws FormatError "<name>: non-finite value <x> at element <i> of <n>".
void check_finite(std::string_view name, const WeightMatrix& w);

}  // namespace ckv

#pragma once
// float32 -> IEEE binary16 conversion for float16 storage (HDF5 1.10 has no half type and
// converts through a slow generic path, so ckv converts before writing).
// Rounding is to nearest, ties to even, as numpy's astype(float16) and the F16C
// instructions do: values from 65520 up become inf, values up to 2^-25 become (signed)
// zero, subnormals are kept, NaN stays a quiet NaN with its sign. The inverse is
// ckv::f16_to_f32 in io/quant.h.
#include <cstdint>
#include <span>

namespace ckv {

uint16_t f32_to_f16(float value);

// dst.size() must equal src.size(). Uses F16C when the build targets it.
void f32_to_f16(std::span<const float> src, std::span<uint16_t> dst);

}  // namespace ckv

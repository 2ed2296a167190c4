#pragma once
// Conversion of stored element types to float32: F16, BF16 and the ggml block formats
// (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K; layouts in docs/MODELS.md and ggml-common.h).
#include <cstddef>
#include <cstdint>
#include <span>

#include "io/tensor_source.h"

namespace ckv {

// Elements per block (1 for F32/F16/BF16).
int64_t block_elements(DType t);
// Bytes per block (element size for F32/F16/BF16).
int64_t block_bytes(DType t);
// Bytes that n elements take; throws FormatError when n is not a whole number of blocks
// or the size overflows.
uint64_t storage_bytes(DType t, int64_t n);

float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t h);

// Converts n elements starting at src to float32 into dst (dst.size() == n). src must hold
// exactly storage_bytes(t, n) bytes; this is checked.
void dequantize(DType t, std::span<const uint8_t> src, std::span<float> dst);

}  // namespace ckv

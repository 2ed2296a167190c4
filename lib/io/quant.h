#pragma once
// Conversion of stored element types (io/dtype.h: F32, F16, BF16 and the ggml block formats)
// to float32, with the element decoders of io/dtype_decode.h; block layouts in docs/MODELS.md.
#include <cstddef>
#include <cstdint>
#include <span>

#include "io/dtype_decode.h"
#include "io/tensor_source.h"

namespace ckv {

// Bytes that n elements take; throws FormatError when n is not a whole number of blocks
// or the size overflows. (block_elements / block_bytes: io/dtype.h.)
uint64_t storage_bytes(DType t, int64_t n);

// Converts n elements starting at src to float32 into dst (dst.size() == n). src must hold
// exactly storage_bytes(t, n) bytes; this is checked.
void dequantize(DType t, std::span<const uint8_t> src, std::span<float> dst);

}  // namespace ckv

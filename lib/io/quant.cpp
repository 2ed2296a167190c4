// Dequantisation of the stored types to float32: each block group by group with the
// decoders of io/dtype_decode.h, which follow ggml's dequantize_row_* (and the gguf Python
// package's dequantize) operation by operation, so the results are equal bit for bit:
// products are rounded to float32 in the same order and never fused into FMAs
// (tests/test_quant.cpp checks every type against golden blocks).
#include "io/quant.h"

#include <cstring>

#include "core/error.h"

// A fused multiply-add rounds once where ggml rounds twice; keep the two roundings.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace ckv {
namespace {

// blocks whole blocks of T at src to float32 at dst, each group's scales read once.
template <DType T>
void convert_blocks(const uint8_t* __restrict src, float* __restrict dst, int64_t blocks) {
  using D = Decoder<T>;
  constexpr int64_t per_block = block_elements(T), bytes = block_bytes(T);
  if constexpr (T == DType::F32) {
    if (blocks > 0) std::memcpy(dst, src, static_cast<size_t>(blocks) * 4);
  } else {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* block = src + b * bytes;
      float* out = dst + b * per_block;
#pragma GCC unroll 16
      for (int g = 0; g < per_block / D::kGroup; ++g) {
        const auto scale = D::scale(block, g);
        for (int j = 0; j < D::kGroup; ++j) out[g * D::kGroup + j] = D::element(block, scale, g, j);
      }
    }
  }
}

}  // namespace

uint64_t storage_bytes(DType t, int64_t n) {
  const int64_t per_block = block_elements(t);
  if (n < 0) fail<FormatError>("negative element count {} for {}", n, dtype_name(t));
  if (n % per_block != 0) {
    fail<FormatError>("{} elements are not a whole number of {} blocks of {}", n, dtype_name(t),
                      per_block);
  }
  const auto blocks = static_cast<uint64_t>(n / per_block);
  const auto bytes = static_cast<uint64_t>(block_bytes(t));
  if (blocks > UINT64_MAX / bytes) fail<FormatError>("{} {} elements overflow", n, dtype_name(t));
  return blocks * bytes;
}

void dequantize(DType t, std::span<const uint8_t> src, std::span<float> dst) {
  const auto n = static_cast<int64_t>(dst.size());
  const uint64_t need = storage_bytes(t, n);
  if (src.size() != need) {
    fail<FormatError>("{} data of {} bytes does not hold {} elements ({} bytes expected)",
                      dtype_name(t), src.size(), n, need);
  }
  const int64_t blocks = n / block_elements(t);
  switch (t) {
#define CKV_DTYPE_CASE(name, ...) \
  case DType::name:               \
    return convert_blocks<DType::name>(src.data(), dst.data(), blocks);
    CKV_STORED_DTYPES(CKV_DTYPE_CASE)
#undef CKV_DTYPE_CASE
  }
  fail<FormatError>("no dequantiser for dtype {}", static_cast<int>(t));
}

}  // namespace ckv

// Dequantisation of the stored types to float32: each block group by group with the
// decoders of io/dtype_decode.h, which follow ggml's dequantize_row_* (and the gguf Python
// package's dequantize) operation by operation, so the results are equal bit for bit:
// products are rounded to float32 in the same order and never fused into FMAs
// (tests/test_quant.cpp checks every type against golden blocks).
#include "io/quant.h"

#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/error.h"

// A fused multiply-add rounds once where ggml rounds twice; keep the two roundings.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace ckv {
namespace {

// With AVX-512, the 32-element blocks of 4- and 5-bit codes (Q4_0, Q4_1, Q5_0, Q5_1) are
// converted in registers, 16 elements per instruction, with the Decoder's arithmetic: one
// product rounded on its own, then the min added (bench/bench_dequant.cpp: 0.18-0.19 ns an
// element against 0.23-0.56 through the Decoder, which the compiler did not vectorise well;
// docs/PERF.md "Dequantisation of the 32-element nibble blocks"). Elsewhere they take the
// generic loop below.
#if defined(__AVX512F__)
constexpr bool nibble_block(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1;
}

template <DType T>
void convert_nibble_block(const uint8_t* __restrict block, float* __restrict out) {
  constexpr bool five = T == DType::Q5_0 || T == DType::Q5_1;
  constexpr int qs_at = T == DType::Q4_0 ? 2 : T == DType::Q4_1 || T == DType::Q5_0 ? 4 + 2 * five : 8;
  const auto scale = Decoder<T>::scale(block, 0);
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + qs_at));
  const __m128i low_mask = _mm_set1_epi8(0x0F);
  // Group 0 is the low nibbles, group 1 the high ones; a 5-bit code's fifth bit is bit 16g + j
  // of qh.
  __m512i q[2] = {_mm512_cvtepu8_epi32(_mm_and_si128(bytes, low_mask)),
                  _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), low_mask))};
  for (int g = 0; g < 2; ++g) {
    if constexpr (five)
      q[g] = _mm512_mask_or_epi32(q[g], static_cast<__mmask16>(scale.qh >> (16 * g)), q[g], _mm512_set1_epi32(16));
    if constexpr (T == DType::Q4_0) q[g] = _mm512_sub_epi32(q[g], _mm512_set1_epi32(8));
    if constexpr (T == DType::Q5_0) q[g] = _mm512_sub_epi32(q[g], _mm512_set1_epi32(16));
    __m512 v = _mm512_mul_ps(_mm512_set1_ps(scale.d), _mm512_cvtepi32_ps(q[g]));
    if constexpr (T == DType::Q4_1 || T == DType::Q5_1) v = _mm512_add_ps(v, _mm512_set1_ps(scale.m));
    _mm512_storeu_ps(out + 16 * g, v);
  }
}
#else
constexpr bool nibble_block(DType) { return false; }
template <DType T>
void convert_nibble_block(const uint8_t*, float*) {}
#endif

// blocks whole blocks of T at src to float32 at dst, each group's scales read once.
template <DType T>
void convert_blocks(const uint8_t* __restrict src, float* __restrict dst, int64_t blocks) {
  using D = Decoder<T>;
  constexpr int64_t per_block = block_elements(T), bytes = block_bytes(T);
  if constexpr (nibble_block(T)) {
    static_assert(per_block == 32);
    for (int64_t b = 0; b < blocks; ++b) convert_nibble_block<T>(src + b * bytes, dst + b * per_block);
  } else if constexpr (T == DType::F32) {
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

#include "io/h5_float16.h"

#include <bit>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace ckv {

uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;

  if (magnitude >= 0x7F800000u) {  // inf or NaN
    if (magnitude == 0x7F800000u) return sign | 0x7C00u;
    // Keep the top payload bits and force the quiet bit so the NaN cannot become inf.
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  // 65520 is halfway between 65504 (largest half, odd mantissa) and 65536: ties to even
  // goes up, so everything from there on overflows to inf.
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;

  if (magnitude < 0x38800000u) {  // below 2^-14: a half subnormal or zero
    // 2^-25 and below is at most half the smallest subnormal 2^-24; the tie goes to 0.
    if (magnitude <= 0x33000000u) return sign;
    const uint32_t exponent = magnitude >> 23;  // 103..112
    const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // value = mantissa * 2^(exponent-150) = m * 2^-24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;  // may carry to 0x400
    return static_cast<uint16_t>(sign | half);
  }

  // Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits; a carry out of the
  // mantissa correctly bumps the exponent.
  uint32_t half = (magnitude - 0x38000000u) >> 13;
  const uint32_t rest = magnitude & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

void f32_to_f16(std::span<const float> src, std::span<uint16_t> dst) {
  if (src.size() != dst.size())
    fail<Error>("f32_to_f16: {} source values for {} destination slots", src.size(), dst.size());
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= src.size(); i += 8) {
    const __m256 v = _mm256_loadu_ps(src.data() + i);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst.data() + i), h);
  }
#endif
  for (; i < src.size(); ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace ckv

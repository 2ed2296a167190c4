// Dequantisation of the ggml block formats to float32. The arithmetic follows ggml's
// dequantize_row_* (and the gguf Python package's dequantize) operation by operation, so
// the results are equal bit for bit: products are rounded to float32 in the same order and
// never fused into FMAs (tests/test_quant.cpp checks every type against golden blocks).
#include "io/quant.h"

#include <bit>
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

constexpr int64_t kQK = 32;    // elements per Q8_0/Q4_0/Q4_1 block
constexpr int64_t kQKK = 256;  // elements per K-quant super-block

uint16_t read_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
float read_f16(const uint8_t* p) {
  return f16_to_f32(read_u16(p));
}

// Q8_0: f16 d; i8 qs[32].
void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

// Q4_0: f16 d; u8 qs[16]; low nibbles are elements 0..15, high nibbles 16..31.
void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    y[j + kQK / 2] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// Q4_1: f16 d; f16 m; u8 qs[16]; value q*d + m.
void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  const float m = read_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    const float lo = d * static_cast<float>(qs[j] & 0x0F);
    const float hi = d * static_cast<float>(qs[j] >> 4);
    y[j] = lo + m;
    y[j + kQK / 2] = hi + m;
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K super-block: ggml's
// get_scale_min_k4. Sub-blocks 0..3 keep them in the low 6 bits of bytes j and j+4;
// 4..7 split them between a nibble of byte j+4 and the top two bits of bytes j-4 and j.
void q4_k_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q4_K: f16 d; f16 dmin; u8 scales[12]; u8 qs[128]. Each 64-element chunk uses 32 bytes
// of qs: low nibbles are its first 32-element sub-block, high nibbles the second.
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  const float dmin = read_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int half = 0; half < 2; ++half) {
      const int sub = 2 * chunk + half;
      uint8_t sc = 0;
      uint8_t mn = 0;
      q4_k_scale_min(sub, scales, &sc, &mn);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(mn);
      for (int l = 0; l < 32; ++l) {
        const int q = half == 0 ? (qs[32 * chunk + l] & 0x0F) : (qs[32 * chunk + l] >> 4);
        const float scaled = dl * static_cast<float>(q);
        y[32 * sub + l] = scaled - ml;
      }
    }
  }
}

// Q6_K: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d (last). Each 128-element half uses
// 64 bytes of ql and 32 of qh; element l + 32*k of a half takes a nibble of ql and two
// bits of qh, minus 32, times d*scale of its 16-element group.
void dequant_q6_k(const uint8_t* b, float* y) {
  const float d = read_f16(b + 208);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b + 64 * half;
    const uint8_t* qh = b + 128 + 32 * half;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
    float* out = y + 128 * half;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q[4] = {((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32,
                        ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32,
                        ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32,
                        ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32};
      for (int k = 0; k < 4; ++k) {
        const float dl = d * static_cast<float>(sc[is + 2 * k]);
        out[l + 32 * k] = dl * static_cast<float>(q[k]);
      }
    }
  }
}

}  // namespace

int64_t block_elements(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return 1;
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
      return kQK;
    case DType::Q4_K:
    case DType::Q6_K:
      return kQKK;
  }
  fail<FormatError>("unknown dtype {}", static_cast<int>(t));
}

int64_t block_bytes(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::Q8_0:
      return 34;
    case DType::Q4_0:
      return 18;
    case DType::Q4_1:
      return 20;
    case DType::Q4_K:
      return 144;
    case DType::Q6_K:
      return 210;
  }
  fail<FormatError>("unknown dtype {}", static_cast<int>(t));
}

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

// IEEE binary16 to binary32, exact for every input (subnormals normalised, NaN payloads
// kept in the top mantissa bits as numpy does).
float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits = 0;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: shift the mantissa up until its leading one is the implicit bit.
    uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

void dequantize(DType t, std::span<const uint8_t> src, std::span<float> dst) {
  const auto n = static_cast<int64_t>(dst.size());
  const uint64_t need = storage_bytes(t, n);
  if (src.size() != need) {
    fail<FormatError>("{} data of {} bytes does not hold {} elements ({} bytes expected)",
                      dtype_name(t), src.size(), n, need);
  }
  const uint8_t* s = src.data();
  float* y = dst.data();
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(y, s, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(read_u16(s + 2 * i));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(read_u16(s + 2 * i));
      return;
    default:
      break;
  }
  const int64_t per_block = block_elements(t);
  const int64_t bytes = block_bytes(t);
  void (*kernel)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case DType::Q8_0:
      kernel = dequant_q8_0;
      break;
    case DType::Q4_0:
      kernel = dequant_q4_0;
      break;
    case DType::Q4_1:
      kernel = dequant_q4_1;
      break;
    case DType::Q4_K:
      kernel = dequant_q4_k;
      break;
    case DType::Q6_K:
      kernel = dequant_q6_k;
      break;
    default:
      fail<FormatError>("no dequantiser for {}", dtype_name(t));
  }
  for (int64_t blk = 0; blk < n / per_block; ++blk) kernel(s + blk * bytes, y + blk * per_block);
}

}  // namespace ckv

#pragma once
// The elements of a stored block as float32, for every type of io/dtype.h: the arithmetic the
// CPU conversion (io/quant.cpp), the few-rows dot's fallback (ops/linear_few_rows_cpu.cpp)
// and the CUDA kernel (kernels/dequantize.cu) all call, written once for host and device.
//
// Decoder<T> (below) reads one block of T (its stored bytes, little-endian). The operations
// follow ggml's dequantize_row_* and gguf-py's dequantize in their order: every product
// rounded to float32 on its own, never fused into an FMA (CKV_MUL / CKV_SUB are __fmul_rn /
// __fsub_rn on the device, where nvcc would fuse them; host files that call the decoders turn
// contraction off), so the values equal gguf-py's bit for bit (tests/test_quant.cpp).
//
// C++17 and no library headers beyond <cstdint>/<cstring>: nvcc parses this file.
#include <cstdint>
#include <cstring>

#include "io/dtype.h"

#if defined(__CUDA_ARCH__)
#define CKV_MUL(a, b) __fmul_rn((a), (b))
#define CKV_ADD(a, b) __fadd_rn((a), (b))
#define CKV_SUB(a, b) __fsub_rn((a), (b))
#else
#define CKV_MUL(a, b) ((a) * (b))
#define CKV_ADD(a, b) ((a) + (b))
#define CKV_SUB(a, b) ((a) - (b))
#endif

namespace ckv {

CKV_HD inline float bits_to_f32(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// IEEE binary16 to binary32, exact for every input (subnormals normalised, NaN payloads kept
// in the top mantissa bits as numpy does). Branch-free, so loops over it vectorise: the
// exponent is rebased by 112; inf/NaN (exponent 31) by 112 more; a subnormal m * 2^-24 is
// formed as the float 2^-14 * (1 + m/1024) minus 2^-14, which is exact.
CKV_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7FFFu) << 13;  // exponent and mantissa
  const uint32_t exp = shifted & 0x0F800000u;
  const uint32_t rebased = shifted + (112u << 23);
  const uint32_t special = exp == 0x0F800000u ? rebased + (112u << 23) : rebased;
  const float magnitude =
      exp == 0 ? bits_to_f32(rebased + (1u << 23)) - bits_to_f32(113u << 23) : bits_to_f32(special);
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t bits;
#if defined(__CUDA_ARCH__)
  bits = __float_as_uint(magnitude);
#else
  std::memcpy(&bits, &magnitude, sizeof bits);
#endif
  return bits_to_f32(bits | sign);
}
CKV_HD inline float bf16_to_f32(uint16_t h) {
  return bits_to_f32(static_cast<uint32_t>(h) << 16);
}

namespace decode {
CKV_HD inline uint16_t u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
CKV_HD inline uint32_t u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
CKV_HD inline float f16(const uint8_t* p) {
  return f16_to_f32(u16(p));
}
// The 6-bit scale and min of sub-block j (0..7) of a Q4_K (and Q5_K) super-block (ggml's
// get_scale_min_k4): sub-blocks 0..3 keep them in the low 6 bits of bytes j and j+4; 4..7
// split them between a nibble of byte j+4 and the top two bits of bytes j-4 and j.
CKV_HD inline void k4_scale_min(int j, const uint8_t* s, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
}  // namespace decode

// Decoder<T> for every type T of io/dtype.h: a block of T is groups of kGroup elements that
// share their scales; scale(b, g) reads group g's, element(b, s, g, j) is element j of group
// g (element g * kGroup + j of the block) given those scales s. The CPU conversion reads each
// group's scales once; the CUDA kernel, one thread per element, reads them per element
// (decode_element). A type without a Decoder does not compile (incomplete type).
template <DType T>
struct Decoder;

template <DType T>
CKV_HD inline float decode_element(const uint8_t* b, int i) {
  using D = Decoder<T>;
  return D::element(b, D::scale(b, i / D::kGroup), i / D::kGroup, i % D::kGroup);
}

struct NoScale {};
struct Scale1 {
  float d;
};
struct Scale2 {
  float d, m;
};

template <>
struct Decoder<DType::F32> {
  static constexpr int kGroup = 1;
  CKV_HD static NoScale scale(const uint8_t*, int) { return {}; }
  CKV_HD static float element(const uint8_t* b, NoScale, int, int) {
    return bits_to_f32(decode::u32(b));
  }
};
template <>
struct Decoder<DType::F16> {
  static constexpr int kGroup = 1;
  CKV_HD static NoScale scale(const uint8_t*, int) { return {}; }
  CKV_HD static float element(const uint8_t* b, NoScale, int, int) { return decode::f16(b); }
};
template <>
struct Decoder<DType::BF16> {
  static constexpr int kGroup = 1;
  CKV_HD static NoScale scale(const uint8_t*, int) { return {}; }
  CKV_HD static float element(const uint8_t* b, NoScale, int, int) {
    return bf16_to_f32(decode::u16(b));
  }
};

// Q8_0: f16 d; i8 qs[32]; d * q.
template <>
struct Decoder<DType::Q8_0> {
  static constexpr int kGroup = 32;
  CKV_HD static Scale1 scale(const uint8_t* b, int) { return {decode::f16(b)}; }
  CKV_HD static float element(const uint8_t* b, Scale1 s, int, int j) {
    return CKV_MUL(s.d, static_cast<float>(static_cast<int8_t>(b[2 + j])));
  }
};

// The 32-element blocks of Q4_0, Q4_1, Q5_0 and Q5_1 keep their 4-bit codes in 16 bytes: low
// nibbles are elements 0..15 (group 0), high nibbles 16..31 (group 1). Element j of group g:
CKV_HD inline int nibble_16(const uint8_t* qs, int g, int j) {
  return (qs[j] >> (4 * g)) & 0x0F;
}

// Q4_0: f16 d; u8 qs[16]; d * (q - 8).
template <>
struct Decoder<DType::Q4_0> {
  static constexpr int kGroup = 16;
  CKV_HD static Scale1 scale(const uint8_t* b, int) { return {decode::f16(b)}; }
  CKV_HD static float element(const uint8_t* b, Scale1 s, int g, int j) {
    return CKV_MUL(s.d, static_cast<float>(nibble_16(b + 2, g, j) - 8));
  }
};

// Q4_1: f16 d; f16 m; u8 qs[16]; d * q + m.
template <>
struct Decoder<DType::Q4_1> {
  static constexpr int kGroup = 16;
  CKV_HD static Scale2 scale(const uint8_t* b, int) { return {decode::f16(b), decode::f16(b + 2)}; }
  CKV_HD static float element(const uint8_t* b, Scale2 s, int g, int j) {
    return CKV_ADD(CKV_MUL(s.d, static_cast<float>(nibble_16(b + 4, g, j))), s.m);
  }
};

// Q4_K: f16 d; f16 dmin; u8 scales[12]; u8 qs[128]. Sub-block g = i / 32 (0..7) has a 6-bit
// scale sc and min mn (k4_scale_min); chunk g / 2 uses 32 bytes of qs, low nibbles for even
// g, high for odd: (d * sc) * q - (dmin * mn).
template <>
struct Decoder<DType::Q4_K> {
  static constexpr int kGroup = 32;
  CKV_HD static Scale2 scale(const uint8_t* b, int g) {
    int sc = 0, mn = 0;
    decode::k4_scale_min(g, b + 4, sc, mn);
    return {CKV_MUL(decode::f16(b), static_cast<float>(sc)),
            CKV_MUL(decode::f16(b + 2), static_cast<float>(mn))};
  }
  CKV_HD static float element(const uint8_t* b, Scale2 s, int g, int j) {
    const int q = (b[16 + 32 * (g / 2) + j] >> (4 * (g % 2))) & 0x0F;
    return CKV_SUB(CKV_MUL(s.d, static_cast<float>(q)), s.m);
  }
};

// Q6_K: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d (last). Half h = i / 128 uses 64 bytes
// of ql and 32 of qh; its element l + 32k (l < 32, k < 4) takes a nibble of ql and two bits
// of qh, minus 32; 16-element group g has scale scales[g]: (d * scale) * q.
template <>
struct Decoder<DType::Q6_K> {
  static constexpr int kGroup = 16;
  CKV_HD static Scale1 scale(const uint8_t* b, int g) {
    return {CKV_MUL(decode::f16(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + g])))};
  }
  CKV_HD static float element(const uint8_t* b, Scale1 s, int g, int j) {
    const int half = g / 8, k = (g % 8) / 2, l = 16 * (g % 2) + j;
    const uint8_t low = b[64 * half + 32 * (k % 2) + l];
    const int nibble = (low >> (4 * (k / 2))) & 0x0F;
    const int q = (nibble | (((b[128 + 32 * half + l] >> (2 * k)) & 3) << 4)) - 32;
    return CKV_MUL(s.d, static_cast<float>(q));
  }
};

// Q5_0: f16 d; u32 qh; u8 qs[16]. Element i's low four bits are a nibble (as Q4_0), its fifth
// bit is bit i of qh: d * (q - 16).
template <>
struct Decoder<DType::Q5_0> {
  static constexpr int kGroup = 16;
  struct Scale {
    float d;
    uint32_t qh;
  };
  CKV_HD static Scale scale(const uint8_t* b, int) { return {decode::f16(b), decode::u32(b + 2)}; }
  CKV_HD static float element(const uint8_t* b, Scale s, int g, int j) {
    const int q = nibble_16(b + 6, g, j) | static_cast<int>(((s.qh >> (16 * g + j)) & 1u) << 4);
    return CKV_MUL(s.d, static_cast<float>(q - 16));
  }
};

// Q5_1: f16 d; f16 m; u32 qh; u8 qs[16] (bits as Q5_0, no offset): d * q + m.
template <>
struct Decoder<DType::Q5_1> {
  static constexpr int kGroup = 16;
  struct Scale {
    float d, m;
    uint32_t qh;
  };
  CKV_HD static Scale scale(const uint8_t* b, int) {
    return {decode::f16(b), decode::f16(b + 2), decode::u32(b + 4)};
  }
  CKV_HD static float element(const uint8_t* b, Scale s, int g, int j) {
    const int q = nibble_16(b + 8, g, j) | static_cast<int>(((s.qh >> (16 * g + j)) & 1u) << 4);
    return CKV_ADD(CKV_MUL(s.d, static_cast<float>(q)), s.m);
  }
};

// Q2_K: u8 scales[16]; u8 qs[64]; f16 d; f16 dmin. Element i = 128h + 32k + l takes bits
// 2k, 2k+1 of qs[32h + l]; 16-element group g has scale scales[g] & 15 and min scales[g] >> 4:
// (d * sc) * q - (dmin * mn).
template <>
struct Decoder<DType::Q2_K> {
  static constexpr int kGroup = 16;
  CKV_HD static Scale2 scale(const uint8_t* b, int g) {
    return {CKV_MUL(decode::f16(b + 80), static_cast<float>(b[g] & 0x0F)),
            CKV_MUL(decode::f16(b + 82), static_cast<float>(b[g] >> 4))};
  }
  CKV_HD static float element(const uint8_t* b, Scale2 s, int g, int j) {
    const int q = (b[16 + 32 * (g / 8) + 16 * (g % 2) + j] >> (2 * ((g / 2) % 4))) & 3;
    return CKV_SUB(CKV_MUL(s.d, static_cast<float>(q)), s.m);
  }
};

// Q3_K: u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d. Element i = 128h + 32k + l takes bits
// 2k, 2k+1 of qs[32h + l], minus 4 where bit i / 32 of hmask[l] is clear. The 6-bit scale of
// 16-element group g is nibble g / 8 of byte g % 8 and bits 2(g / 4), 2(g / 4) + 1 of byte
// 8 + g % 4 (of scales), minus 32: (d * scale) * q.
template <>
struct Decoder<DType::Q3_K> {
  static constexpr int kGroup = 16;
  CKV_HD static Scale1 scale(const uint8_t* b, int g) {
    const uint8_t* scales = b + 96;
    const int low = (scales[g % 8] >> (4 * (g / 8))) & 0x0F;
    const int high = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    return {CKV_MUL(decode::f16(b + 108), static_cast<float>((low | (high << 4)) - 32))};
  }
  CKV_HD static float element(const uint8_t* b, Scale1 s, int g, int j) {
    const int l = 16 * (g % 2) + j;
    const int q =
        ((b[32 + 32 * (g / 8) + l] >> (2 * ((g / 2) % 4))) & 3) - (((b[l] >> (g / 2)) & 1) ? 0 : 4);
    return CKV_MUL(s.d, static_cast<float>(q));
  }
};

// Q5_K: f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]. As Q4_K, with a fifth bit:
// bit g of qh[l] for element i = 32g + l.
template <>
struct Decoder<DType::Q5_K> {
  static constexpr int kGroup = 32;
  CKV_HD static Scale2 scale(const uint8_t* b, int g) {
    int sc = 0, mn = 0;
    decode::k4_scale_min(g, b + 4, sc, mn);
    return {CKV_MUL(decode::f16(b), static_cast<float>(sc)),
            CKV_MUL(decode::f16(b + 2), static_cast<float>(mn))};
  }
  CKV_HD static float element(const uint8_t* b, Scale2 s, int g, int j) {
    const int q =
        ((b[48 + 32 * (g / 2) + j] >> (4 * (g % 2))) & 0x0F) | (((b[16 + j] >> g) & 1) << 4);
    return CKV_SUB(CKV_MUL(s.d, static_cast<float>(q)), s.m);
  }
};

// Element i (within one row) of a row stored as t at `row`: the CUDA kernel's entry point.
CKV_HD inline float decode_row_element(DType t, const uint8_t* row, int64_t i) {
  switch (t) {
#define CKV_DTYPE_CASE(name, ggml, elements, bytes, ...)                 \
  case DType::name:                                                      \
    return decode_element<DType::name>(row + (i / (elements)) * (bytes), \
                                       static_cast<int>(i % (elements)));
    CKV_STORED_DTYPES(CKV_DTYPE_CASE)
#undef CKV_DTYPE_CASE
  }
  return 0.0f;
}

}  // namespace ckv

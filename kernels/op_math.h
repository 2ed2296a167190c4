#pragma once
// The per-element arithmetic of the CUDA kernels, written once for host and device: nvcc
// compiles these functions into the kernels (CKV_HD = __host__ __device__), the host
// compiler into the CPU tests (tests/test_op_math.cpp), which compare them with the CPU ops
// and lib/io/quant's dequantisers. A formula or index mistake in a kernel is therefore
// caught on a machine without a GPU; what stays unchecked there is the launch geometry.
// C++17 and no library headers: nvcc parses this file.
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define CKV_HD __host__ __device__
#else
#define CKV_HD
#endif

namespace ckv::op_math {

// ---- RMSNorm (ops/rms_norm.h): y = x * inv_rms * w ---------------------------------------

// 1 / sqrt(mean(x^2) + eps) from the row's sum of squares, as rms_norm_cpu forms it.
CKV_HD inline float rms_inv(float sum_squares, int64_t cols, float eps) {
  return 1.0f / sqrtf(sum_squares / static_cast<float>(cols) + eps);
}
CKV_HD inline float rms_scale(float x, float inv_rms, float weight) {
  return x * inv_rms * weight;
}

// ---- RoPE (ops/rope.h, HF rotate_half): the pair (lo, hi) = (x[i], x[i + d_head/2]) ------

CKV_HD inline void rope_rotate(float& lo, float& hi, float cos_angle, float sin_angle) {
  const float lo_old = lo;
  lo = lo * cos_angle - hi * sin_angle;
  hi = hi * cos_angle + lo_old * sin_angle;
}

// ---- SwiGLU gating (ops/mlp.h): silu(gate) * up -------------------------------------------

CKV_HD inline float silu_mul(float gate, float up) {
  // exp(-gate) = inf for very negative gate gives 0, as on the CPU.
  return gate / (1.0f + expf(-gate)) * up;
}

// ---- Online softmax (attention): one pass over the keys, no [seq] row kept --------------
// State of one query row: the running maximum logit, the running sum of exp(logit - max).
// The output accumulator acc[d] (sum of p_j v_j) is rescaled by `rescale` before adding
// `weight` * v_j. A -inf logit (a masked key) changes nothing. After the last key the output
// is acc / sum, or 0 when every key was masked (sum == 0), as the CPU op gives.
struct SoftmaxState {
  float max;
  float sum;
};
CKV_HD inline SoftmaxState softmax_start() {
  return {-INFINITY, 0.0f};
}
struct SoftmaxStep {
  float rescale;  // factor for the accumulator so far
  float weight;   // exp(logit - new max), for this key's value row
};
CKV_HD inline SoftmaxStep softmax_update(SoftmaxState& state, float logit) {
  if (logit == -INFINITY) return {1.0f, 0.0f};
  const float new_max = logit > state.max ? logit : state.max;
  // state.max == -inf (nothing seen yet): exp(-inf) = 0 rescales the empty sum.
  const float rescale = expf(state.max - new_max);
  const float weight = expf(logit - new_max);
  state.sum = state.sum * rescale + weight;
  state.max = new_max;
  return {rescale, weight};
}
CKV_HD inline float softmax_finish(const SoftmaxState& state, float acc) {
  return state.sum > 0.0f ? acc / state.sum : 0.0f;
}

// ---- Stored element types: one element of a block ----------------------------------------
// Each function returns element i of the block at `b` (the stored bytes, little-endian), with
// lib/io/quant.cpp's operations in its order: products rounded to float32 one at a time
// (__fmul_rn / __fsub_rn on the device, where nvcc would otherwise fuse them into FMAs), so
// the values equal the CPU dequantiser's bit for bit.

#if defined(__CUDA_ARCH__)
#define CKV_MUL(a, b) __fmul_rn((a), (b))
#define CKV_ADD(a, b) __fadd_rn((a), (b))
#define CKV_SUB(a, b) __fsub_rn((a), (b))
#else
#define CKV_MUL(a, b) ((a) * (b))
#define CKV_ADD(a, b) ((a) + (b))
#define CKV_SUB(a, b) ((a) - (b))
#endif

CKV_HD inline float bits_to_f32(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// IEEE binary16 to binary32, exact (subnormals normalised, NaN payloads kept).
CKV_HD inline float f16_to_f32(uint16_t h) {
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
    uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3FFu) << 13);
  }
  return bits_to_f32(bits);
}
CKV_HD inline float bf16_to_f32(uint16_t h) {
  return bits_to_f32(static_cast<uint32_t>(h) << 16);
}
CKV_HD inline uint16_t read_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// Block geometry of the stored types (lib/io/quant.h's block_elements / block_bytes).
enum class Format : int { F32 = 0, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K };
CKV_HD inline int block_elements(Format f) {
  switch (f) {
    case Format::Q8_0:
    case Format::Q4_0:
    case Format::Q4_1:
      return 32;
    case Format::Q4_K:
    case Format::Q6_K:
      return 256;
    default:
      return 1;
  }
}
CKV_HD inline int block_bytes(Format f) {
  switch (f) {
    case Format::F32:
      return 4;
    case Format::F16:
    case Format::BF16:
      return 2;
    case Format::Q8_0:
      return 34;
    case Format::Q4_0:
      return 18;
    case Format::Q4_1:
      return 20;
    case Format::Q4_K:
      return 144;
    case Format::Q6_K:
      return 210;
  }
  return 0;
}

// Q8_0: f16 d; i8 qs[32].
CKV_HD inline float dequant_q8_0(const uint8_t* b, int i) {
  return CKV_MUL(f16_to_f32(read_u16(b)), static_cast<float>(static_cast<int8_t>(b[2 + i])));
}
// Q4_0: f16 d; u8 qs[16]; low nibbles are elements 0..15, high nibbles 16..31; q - 8.
CKV_HD inline float dequant_q4_0(const uint8_t* b, int i) {
  const uint8_t byte = b[2 + (i & 15)];
  const int q = (i < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
  return CKV_MUL(f16_to_f32(read_u16(b)), static_cast<float>(q));
}
// Q4_1: f16 d; f16 m; u8 qs[16]; q*d + m.
CKV_HD inline float dequant_q4_1(const uint8_t* b, int i) {
  const uint8_t byte = b[4 + (i & 15)];
  const int q = i < 16 ? (byte & 0x0F) : (byte >> 4);
  return CKV_ADD(CKV_MUL(f16_to_f32(read_u16(b)), static_cast<float>(q)),
                 f16_to_f32(read_u16(b + 2)));
}
// Q4_K: f16 d; f16 dmin; u8 scales[12]; u8 qs[128]. Sub-block j = i / 32 (0..7) has a 6-bit
// scale and min (ggml's get_scale_min_k4); chunk j / 2 uses 32 bytes of qs, low nibbles for
// even j, high for odd: (d * sc) * q - (dmin * mn).
CKV_HD inline float dequant_q4_k(const uint8_t* b, int i) {
  const int sub = i / 32, l = i % 32, chunk = sub / 2;
  const uint8_t* s = b + 4;
  int sc = 0, mn = 0;
  if (sub < 4) {
    sc = s[sub] & 63;
    mn = s[sub + 4] & 63;
  } else {
    sc = (s[sub + 4] & 0x0F) | ((s[sub - 4] >> 6) << 4);
    mn = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
  }
  const uint8_t byte = b[16 + 32 * chunk + l];
  const int q = (sub % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
  const float dl = CKV_MUL(f16_to_f32(read_u16(b)), static_cast<float>(sc));
  const float ml = CKV_MUL(f16_to_f32(read_u16(b + 2)), static_cast<float>(mn));
  return CKV_SUB(CKV_MUL(dl, static_cast<float>(q)), ml);
}
// Q6_K: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d (last). Half h = i / 128 uses 64 bytes
// of ql and 32 of qh; its element l + 32*k (l < 32, k < 4) takes a nibble of ql and two bits
// of qh, minus 32, times d * scale of its 16-element group.
CKV_HD inline float dequant_q6_k(const uint8_t* b, int i) {
  const int half = i / 128, r = i % 128, k = r / 32, l = r % 32;
  const uint8_t* ql = b + 64 * half;
  const uint8_t* qh = b + 128 + 32 * half;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
  const int low = (k % 2 == 0 ? ql[l] : ql[l + 32]);
  const int nibble = k < 2 ? (low & 0x0F) : (low >> 4);
  const int q = (nibble | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
  const float dl = CKV_MUL(f16_to_f32(read_u16(b + 208)), static_cast<float>(sc[l / 16 + 2 * k]));
  return CKV_MUL(dl, static_cast<float>(q));
}

// Element i (0-based, within one row) of a row stored in format f at `row`.
CKV_HD inline float dequant_element(Format f, const uint8_t* row, int64_t i) {
  const int per_block = block_elements(f);
  const uint8_t* b = row + (i / per_block) * block_bytes(f);
  const int j = static_cast<int>(i % per_block);
  switch (f) {
    case Format::F32:
      return bits_to_f32(static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
                         (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24));
    case Format::F16:
      return f16_to_f32(read_u16(b));
    case Format::BF16:
      return bf16_to_f32(read_u16(b));
    case Format::Q8_0:
      return dequant_q8_0(b, j);
    case Format::Q4_0:
      return dequant_q4_0(b, j);
    case Format::Q4_1:
      return dequant_q4_1(b, j);
    case Format::Q4_K:
      return dequant_q4_k(b, j);
    case Format::Q6_K:
      return dequant_q6_k(b, j);
  }
  return 0.0f;
}

}  // namespace ckv::op_math

// The few-row linear layer (decode): each output is one dot product of an input row with a
// weight row that is dequantised block by block in registers, never into a float32 tile.
//
// Every weight element is converted with the arithmetic of io/dtype_decode.h (the same
// operations, rounded in the same order, never fused), so the weights are bit-identical to
// rows_f32's: the types with a vectorised kernel below repeat that arithmetic in 16 lanes
// (tests/test_linear_few_rows.cpp checks them), the others call the Decoder itself. Only the
// summation differs from the tiled GEMM: products are accumulated with fused multiply-adds
// into four 16-lane partial sums (piece k of 16 elements goes to sum k mod 4), which are then
// added in a fixed tree. That order depends on `in` only, never on
// the thread count, the chunking or how many rows are computed together.
//
// Written with GCC/Clang vector extensions: one 16-lane vector is one AVX-512 register
// (the build targets -march=native), two AVX2 registers or four SSE ones elsewhere.
#include <cstring>

#include "core/thread_pool.h"
#include "io/quant.h"
#include "ops/linear.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

// Dequantisation must round as io/quant.cpp does: d*q and the following add stay two
// operations. The dot products use explicit fused multiply-adds (fma16 below).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

// The 16-lane vectors are passed between inlined helpers of this file only; GCC's note that
// their calling convention differs without AVX-512 does not concern them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace ckv::detail {
namespace {

using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = int32_t __attribute__((vector_size(64)));
using u32x16 = uint32_t __attribute__((vector_size(64)));
using u8x16 = uint8_t __attribute__((vector_size(16)));
using i8x16 = int8_t __attribute__((vector_size(16)));
using u16x16 = uint16_t __attribute__((vector_size(32)));

constexpr int kLanes = 16;  // elements per piece
constexpr int kSums = 4;    // partial sums per row: piece k goes to sum k % 4
constexpr int kRowGroup = 4;  // input rows that share one decoded weight piece

template <class V>
inline V load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

inline f32x16 splat(float s) {
  return f32x16{s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
}

// a*b + c rounded once where the ISA has FMA; elsewhere a*b then +c (still deterministic).
inline f32x16 fma16(f32x16 a, f32x16 b, f32x16 c) {
#if defined(__AVX512F__)
  return reinterpret_cast<f32x16>(_mm512_fmadd_ps(reinterpret_cast<__m512>(a),
                                                  reinterpret_cast<__m512>(b),
                                                  reinterpret_cast<__m512>(c)));
#elif defined(__FMA__)
  __m256 lo[3], hi[3];
  std::memcpy(lo, &a, 32), std::memcpy(hi, reinterpret_cast<const char*>(&a) + 32, 32);
  std::memcpy(lo + 1, &b, 32), std::memcpy(hi + 1, reinterpret_cast<const char*>(&b) + 32, 32);
  std::memcpy(lo + 2, &c, 32), std::memcpy(hi + 2, reinterpret_cast<const char*>(&c) + 32, 32);
  const __m256 r0 = _mm256_fmadd_ps(lo[0], lo[1], lo[2]), r1 = _mm256_fmadd_ps(hi[0], hi[1], hi[2]);
  f32x16 r;
  std::memcpy(&r, &r0, 32), std::memcpy(reinterpret_cast<char*>(&r) + 32, &r1, 32);
  return r;
#else
  return a * b + c;
#endif
}

inline float half_to_float(const uint8_t* p) {
  const auto h = static_cast<uint16_t>(p[0] | (p[1] << 8));
#if defined(__F16C__)
  return _cvtsh_ss(h);  // exact, as f16_to_f32 (they differ only in NaN payloads)
#else
  return f16_to_f32(h);
#endif
}

// 16 bytes (unsigned or signed) or 16 uint16 widened to 16 int32 lanes.
inline i32x16 widen_u8(const uint8_t* p) {
#if defined(__AVX512F__)
  return reinterpret_cast<i32x16>(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
  return __builtin_convertvector(load<u8x16>(p), i32x16);
#endif
}
inline i32x16 widen_i8(const uint8_t* p) {
#if defined(__AVX512F__)
  return reinterpret_cast<i32x16>(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
  return __builtin_convertvector(load<i8x16>(p), i32x16);
#endif
}
inline i32x16 widen_u16(const uint8_t* p) {
#if defined(__AVX512F__)
  return reinterpret_cast<i32x16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#else
  return __builtin_convertvector(load<u16x16>(p), i32x16);
#endif
}
inline f32x16 to_f32(i32x16 v) {
  return __builtin_convertvector(v, f32x16);
}

// The input rows of one call: row r of x starts at x + r*stride; `sums` are the partial sums.
template <int R>
struct Rows {
  const float* x;
  int64_t stride;
  f32x16 sums[R][kSums];

  // Piece k (of 16 elements at element offset `at`) of the weight row, for every row.
  inline void add(int k, int64_t at, f32x16 w) {
    for (int r = 0; r < R; ++r)
      sums[r][k % kSums] = fma16(w, load<f32x16>(x + r * stride + at), sums[r][k % kSums]);
  }
};

// Calls piece(k, p) for pieces p = 0..count-1 with k = p % 4 a constant after inlining
// (the partial sums stay in registers).
template <class F>
inline void for_pieces(int64_t count, F&& piece) {
  int64_t p = 0;
  for (; p + 4 <= count; p += 4) {
    piece(0, p), piece(1, p + 1), piece(2, p + 2), piece(3, p + 3);
  }
  if (p < count) piece(0, p);
  if (p + 1 < count) piece(1, p + 1);
  if (p + 2 < count) piece(2, p + 2);
}
// The same for 32-element blocks of two pieces: block(k, b) with k = 2 * (b % 2).
template <class F>
inline void for_blocks(int64_t count, F&& block) {
  int64_t b = 0;
  for (; b + 2 <= count; b += 2) {
    block(0, b), block(2, b + 1);
  }
  if (b < count) block(0, b);
}

// Each decoder visits the pieces of one weight row, in order, with exactly the values
// dequantize() gives; `tail` returns the elements past the last whole piece (F32/F16/BF16
// rows whose length is not a multiple of 16) as a scalar sum for row r.

template <int R>
inline void row_f32(const uint8_t* w, int64_t in, Rows<R>& rows, float* tail) {
  const auto* f = reinterpret_cast<const float*>(w);  // read with memcpy: may be unaligned
  const int64_t pieces = in / kLanes;
  for_pieces(pieces, [&](int k, int64_t p) { rows.add(k, p * kLanes, load<f32x16>(f + p * kLanes)); });
  for (int r = 0; r < R; ++r)
    for (int64_t i = pieces * kLanes; i < in; ++i)
      tail[r] = std::fma(load<float>(f + i), rows.x[r * rows.stride + i], tail[r]);
}

template <int R>
inline void row_f16(const uint8_t* w, int64_t in, Rows<R>& rows, float* tail) {
  const int64_t pieces = in / kLanes;
  for_pieces(pieces, [&](int k, int64_t p) {
    const uint8_t* h = w + 2 * p * kLanes;
    f32x16 v;
#if defined(__AVX512F__)
    v = reinterpret_cast<f32x16>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h))));
#elif defined(__F16C__)
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 16)));
    std::memcpy(&v, &lo, 32), std::memcpy(reinterpret_cast<char*>(&v) + 32, &hi, 32);
#else
    for (int j = 0; j < kLanes; ++j) v[j] = half_to_float(h + 2 * j);
#endif
    rows.add(k, p * kLanes, v);
  });
  for (int r = 0; r < R; ++r)
    for (int64_t i = pieces * kLanes; i < in; ++i)
      tail[r] = std::fma(half_to_float(w + 2 * i), rows.x[r * rows.stride + i], tail[r]);
}

template <int R>
inline void row_bf16(const uint8_t* w, int64_t in, Rows<R>& rows, float* tail) {
  const int64_t pieces = in / kLanes;
  for_pieces(pieces, [&](int k, int64_t p) {
    const u32x16 bits = reinterpret_cast<u32x16>(widen_u16(w + 2 * p * kLanes)) << 16;
    rows.add(k, p * kLanes, reinterpret_cast<f32x16>(bits));
  });
  for (int r = 0; r < R; ++r)
    for (int64_t i = pieces * kLanes; i < in; ++i)
      tail[r] = std::fma(bf16_to_f32(static_cast<uint16_t>(w[2 * i] | (w[2 * i + 1] << 8))),
                         rows.x[r * rows.stride + i], tail[r]);
}

// Q8_0 (34 bytes / 32): d * q.
template <int R>
inline void row_q8_0(const uint8_t* w, int64_t in, Rows<R>& rows, float*) {
  for_blocks(in / 32, [&](int k, int64_t b) {
    const uint8_t* blk = w + 34 * b;
    const f32x16 d = splat(half_to_float(blk));
    rows.add(k, 32 * b, d * to_f32(widen_i8(blk + 2)));
    rows.add(k + 1, 32 * b + 16, d * to_f32(widen_i8(blk + 18)));
  });
}

// Q4_0 (18 bytes / 32): d * (nibble - 8); low nibbles are elements 0..15.
template <int R>
inline void row_q4_0(const uint8_t* w, int64_t in, Rows<R>& rows, float*) {
  for_blocks(in / 32, [&](int k, int64_t b) {
    const uint8_t* blk = w + 18 * b;
    const f32x16 d = splat(half_to_float(blk));
    const i32x16 q = widen_u8(blk + 2);
    rows.add(k, 32 * b, d * __builtin_convertvector((q & 15) - 8, f32x16));
    rows.add(k + 1, 32 * b + 16, d * __builtin_convertvector((q >> 4) - 8, f32x16));
  });
}

// Q4_1 (20 bytes / 32): d * nibble, then + m.
template <int R>
inline void row_q4_1(const uint8_t* w, int64_t in, Rows<R>& rows, float*) {
  for_blocks(in / 32, [&](int k, int64_t b) {
    const uint8_t* blk = w + 20 * b;
    const f32x16 d = splat(half_to_float(blk)), m = splat(half_to_float(blk + 2));
    const i32x16 q = widen_u8(blk + 4);
    const f32x16 lo = d * __builtin_convertvector(q & 15, f32x16);
    const f32x16 hi = d * __builtin_convertvector(q >> 4, f32x16);
    rows.add(k, 32 * b, lo + m);
    rows.add(k + 1, 32 * b + 16, hi + m);
  });
}

// Q5_0 (22 bytes / 32): d * (q - 16); q is a nibble (as Q4_0) and, as its fifth bit, bit i
// of the block's u32 qh for element i.
template <int R>
inline void row_q5_0(const uint8_t* w, int64_t in, Rows<R>& rows, float*) {
  const u32x16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for_blocks(in / 32, [&](int k, int64_t b) {
    const uint8_t* blk = w + 22 * b;
    const f32x16 d = splat(half_to_float(blk));
    const u32x16 qh = u32x16{} + load<uint32_t>(blk + 2);
    const i32x16 q = widen_u8(blk + 6);
    const auto fifth_lo = reinterpret_cast<i32x16>(((qh >> lane) & 1) << 4);
    const auto fifth_hi = reinterpret_cast<i32x16>(((qh >> (lane + 16)) & 1) << 4);
    rows.add(k, 32 * b, d * __builtin_convertvector(((q & 15) | fifth_lo) - 16, f32x16));
    rows.add(k + 1, 32 * b + 16, d * __builtin_convertvector(((q >> 4) | fifth_hi) - 16, f32x16));
  });
}

// Q4_K (144 bytes / 256): sub-block s has dl = d*sc, ml = dmin*mn; value dl*q - ml.
template <int R>
inline void row_q4_k(const uint8_t* w, int64_t in, Rows<R>& rows, float*) {
  for (int64_t b = 0; b < in / 256; ++b) {
    const uint8_t* blk = w + 144 * b;
    const float d = half_to_float(blk), dmin = half_to_float(blk + 2);
    const uint8_t* s = blk + 4;
    const uint8_t* qs = blk + 16;
#pragma GCC unroll 8
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t sc = 0, mn = 0;
      if (sub < 4) {
        sc = s[sub] & 63;
        mn = s[sub + 4] & 63;
      } else {
        sc = static_cast<uint8_t>((s[sub + 4] & 0x0F) | ((s[sub - 4] >> 6) << 4));
        mn = static_cast<uint8_t>((s[sub + 4] >> 4) | ((s[sub] >> 6) << 4));
      }
      const f32x16 dl = splat(d * static_cast<float>(sc)), ml = splat(dmin * static_cast<float>(mn));
      const uint8_t* q = qs + 32 * (sub / 2);
      const int shift = 4 * (sub & 1);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const i32x16 n = (widen_u8(q + 16 * h) >> shift) & 15;
        const f32x16 scaled = dl * __builtin_convertvector(n, f32x16);
        rows.add(2 * sub + h, 256 * b + 32 * sub + 16 * h, scaled - ml);
      }
    }
  }
}

// Q6_K (210 bytes / 256): element l + 32k of half hf takes a nibble of ql and two bits of
// qh, minus 32, times d * scale[l/16 + 2k + 8hf].
template <int R>
inline void row_q6_k(const uint8_t* w, int64_t in, Rows<R>& rows, float*) {
  for (int64_t b = 0; b < in / 256; ++b) {
    const uint8_t* blk = w + 210 * b;
    const float d = half_to_float(blk + 208);
#pragma GCC unroll 2
    for (int hf = 0; hf < 2; ++hf) {
      const uint8_t* ql = blk + 64 * hf;
      const uint8_t* qh = blk + 128 + 32 * hf;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192 + 8 * hf);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const i32x16 lo = widen_u8(ql + 32 * (k & 1) + 16 * h);
          const i32x16 hb = widen_u8(qh + 16 * h);
          const i32x16 q = (((lo >> (4 * (k >> 1))) & 15) | (((hb >> (2 * k)) & 3) << 4)) - 32;
          const f32x16 dl = splat(d * static_cast<float>(sc[h + 2 * k]));
          rows.add(2 * k + h, 256 * b + 128 * hf + 32 * k + 16 * h, dl * __builtin_convertvector(q, f32x16));
        }
      }
    }
  }
}

// Any block type without a kernel of its own: each 16-lane piece decoded by the type's
// Decoder (io/dtype_decode.h, the values dequantize() gives), then multiplied. A piece lies in
// one group of shared scales (groups are 16 or 32 elements).
template <DType T, int R>
inline void row_decoded(const uint8_t* w, int64_t in, Rows<R>& rows, float*) {
  using D = Decoder<T>;
  constexpr int per_block = static_cast<int>(block_elements(T));
  static_assert(per_block % (2 * kLanes) == 0 && D::kGroup % kLanes == 0,
                "blocks of whole pairs of 16-element pieces, groups of whole pieces");
  auto block = [&](int k, int64_t b) {
    const uint8_t* blk = w + block_bytes(T) * b;
#pragma GCC unroll 16
    for (int p = 0; p < per_block / kLanes; ++p) {
      const int g = kLanes * p / D::kGroup, j0 = kLanes * p % D::kGroup;
      const auto scale = D::scale(blk, g);
      f32x16 v;
      for (int j = 0; j < kLanes; ++j) v[j] = D::element(blk, scale, g, j0 + j);
      rows.add(k + p, per_block * b + kLanes * p, v);
    }
  };
  if constexpr (per_block == 2 * kLanes) {
    for_blocks(in / per_block, block);  // k = 0 or 2: piece p of the row goes to sum p % 4
  } else {
    for (int64_t b = 0; b < in / per_block; ++b) block(0, b);  // 16 pieces a block
  }
}

// The row kernel of each stored type: its own where it has one, else row_decoded.
template <DType T, int R>
constexpr void (*row_kernel())(const uint8_t*, int64_t, Rows<R>&, float*) {
  if constexpr (T == DType::F32)
    return row_f32<R>;
  else if constexpr (T == DType::F16)
    return row_f16<R>;
  else if constexpr (T == DType::BF16)
    return row_bf16<R>;
  else if constexpr (T == DType::Q8_0)
    return row_q8_0<R>;
  else if constexpr (T == DType::Q4_0)
    return row_q4_0<R>;
  else if constexpr (T == DType::Q4_1)
    return row_q4_1<R>;
  else if constexpr (T == DType::Q4_K)
    return row_q4_k<R>;
  else if constexpr (T == DType::Q6_K)
    return row_q6_k<R>;
  else if constexpr (T == DType::Q5_0)
    return row_q5_0<R>;
  else
    return row_decoded<T, R>;
}

using f32x8 = float __attribute__((vector_size(32)));
using f32x4 = float __attribute__((vector_size(16)));

// The partial sums of one row added in a fixed tree, then the scalar tail.
inline float reduce(const f32x16 (&s)[kSums], float tail) {
  const f32x16 v = (s[0] + s[1]) + (s[2] + s[3]);
  f32x8 h[2];
  std::memcpy(h, &v, sizeof(v));
  const f32x8 v8 = h[0] + h[1];
  f32x4 q[2];
  std::memcpy(q, &v8, sizeof(v8));
  const f32x4 v4 = q[0] + q[1];
  return ((v4[0] + v4[2]) + (v4[1] + v4[3])) + tail;
}

// Outputs [begin, end) for R rows of x starting at x (row stride x_stride); Row decodes
// one weight row (inlined, so the partial sums stay in registers).
template <int R, void (*Row)(const uint8_t*, int64_t, Rows<R>&, float*)>
void few_rows(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias, float* y,
              int64_t y_stride, int64_t begin, int64_t end) {
  const int64_t in = w.cols();
  for (int64_t o = begin; o < end; ++o) {
    Rows<R> rows{x, x_stride, {}};
    float tail[R] = {};
    Row(w.row(o), in, rows, tail);
    for (int r = 0; r < R; ++r)
      y[r * y_stride + o] = reduce(rows.sums[r], tail[r]) + (bias != nullptr ? bias[o] : 0.0f);
  }
}

template <int R>
void few_rows(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias, float* y,
              int64_t y_stride, int64_t begin, int64_t end) {
  switch (w.dtype()) {
#define CKV_DTYPE_CASE(name, ...) \
  case DType::name:               \
    return few_rows<R, row_kernel<DType::name, R>()>(x, x_stride, w, bias, y, y_stride, begin, end);
    CKV_STORED_DTYPES(CKV_DTYPE_CASE)
#undef CKV_DTYPE_CASE
  }
}

}  // namespace

int64_t linear_few_rows_chunk(int64_t out, int64_t in) {
  // About 64 KiB of weights per task at 4 bits: enough work to hide the hand-out, and
  // enough tasks (at least ~16 per matrix) to balance the workers.
  const int64_t by_size = std::max<int64_t>(16, (int64_t{1} << 17) / std::max<int64_t>(1, in) / 16 * 16);
  const int64_t by_count = std::max<int64_t>(16, (out + 15) / 16 / 16 * 16);
  return std::min(by_size, by_count);
}

void linear_few_rows_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias,
                         float* y, int64_t y_stride, int64_t rows, ThreadPool& pool) {
  const int64_t out = w.rows();
  const int64_t chunk = linear_few_rows_chunk(out, w.cols());
  pool.parallel_for((out + chunk - 1) / chunk, [&](int64_t c) {
    const int64_t begin = c * chunk, end = std::min(out, begin + chunk);
    for (int64_t r0 = 0; r0 < rows; r0 += kRowGroup) {
      const float* xr = x + r0 * x_stride;
      float* yr = y + r0 * y_stride;
      switch (std::min<int64_t>(kRowGroup, rows - r0)) {
        case 1:
          few_rows<1>(xr, x_stride, w, bias, yr, y_stride, begin, end);
          break;
        case 2:
          few_rows<2>(xr, x_stride, w, bias, yr, y_stride, begin, end);
          break;
        case 3:
          few_rows<3>(xr, x_stride, w, bias, yr, y_stride, begin, end);
          break;
        default:
          few_rows<4>(xr, x_stride, w, bias, yr, y_stride, begin, end);
          break;
      }
    }
  });
}

}  // namespace ckv::detail

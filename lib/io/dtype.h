#pragma once
// The stored element types of weights: one table entry per type, in the style of ggml's type
// traits. Everything that handles a stored type reads its entry here: the GGUF reader (type
// id), the storage sizes (block geometry), the non-finite check (where a block keeps its
// float16 scales), the CPU conversion, the few-rows dot product and the CUDA decoder (which
// dispatch over this list). Block layouts are ggml's (ggml-common.h), as gguf-py reads them.
//
// Adding a stored type is one CKV_STORED_DTYPES line below plus its kernels:
//   - its Decoder<DType::X> in io/dtype_decode.h (the arithmetic the CPU conversion and the
//     CUDA kernel share; tests/test_quant.cpp checks it bit for bit against gguf-py on golden
//     blocks from tests/reference/make_quant_goldens.py);
//   - optionally a vectorised few-rows kernel in ops/linear_few_rows_cpu.cpp (without one,
//     the few-rows dot decodes each 16-element piece with the Decoder, then multiplies).
// New types go at the end: a DType's value is its position in the list.
//
// C++17 and no library headers beyond <cstdint>: nvcc parses this file (kernels/).
#include <cstdint>

#if !defined(CKV_HD)
#if defined(__CUDACC__)
#define CKV_HD __host__ __device__
#else
#define CKV_HD
#endif
#endif

// X(name, ggml type id, elements per block, bytes per block, byte offsets of the block's
//   float16 scale fields or -1). Float types are blocks of one element.
#define CKV_STORED_DTYPES(X)     \
  X(F32, 0, 1, 4, -1, -1)        \
  X(F16, 1, 1, 2, -1, -1)        \
  X(BF16, 30, 1, 2, -1, -1)      \
  X(Q8_0, 8, 32, 34, 0, -1)      \
  X(Q4_0, 2, 32, 18, 0, -1)      \
  X(Q4_1, 3, 32, 20, 0, 2)       \
  X(Q4_K, 12, 256, 144, 0, 2)    \
  X(Q6_K, 14, 256, 210, 208, -1) \
  X(Q5_0, 6, 32, 22, 0, -1)      \
  X(Q5_1, 7, 32, 24, 0, 2)       \
  X(Q2_K, 10, 256, 84, 80, 82)   \
  X(Q3_K, 11, 256, 110, 108, -1) \
  X(Q5_K, 13, 256, 176, 0, 2)

namespace ckv {

enum class DType : int {
#define CKV_DTYPE_ENUM(name, ...) name,
  CKV_STORED_DTYPES(CKV_DTYPE_ENUM)
#undef CKV_DTYPE_ENUM
};

struct DTypeTraits {
  DType type;
  const char* name;
  uint32_t ggml_type;      // GGUF's tensor type id
  int64_t block_elements;  // 1 for F32/F16/BF16
  int64_t block_bytes;
  int f16_fields[2];  // byte offsets of the float16 scales in a block (d, m/dmin), or -1
};

inline constexpr DTypeTraits kDTypeTraits[] = {
#define CKV_DTYPE_TRAITS(name, ggml, elements, bytes, f16_a, f16_b) \
  {DType::name, #name, ggml, elements, bytes, {f16_a, f16_b}},
    CKV_STORED_DTYPES(CKV_DTYPE_TRAITS)
#undef CKV_DTYPE_TRAITS
};
inline constexpr int kDTypeCount = static_cast<int>(sizeof kDTypeTraits / sizeof kDTypeTraits[0]);

// Host code: the entry of t (every DType value is one of the list).
constexpr const DTypeTraits& dtype_traits(DType t) {
  return kDTypeTraits[static_cast<int>(t)];
}

// Host and device (a device function cannot read the host table): switches over the list.
CKV_HD constexpr int64_t block_elements(DType t) {
  switch (t) {
#define CKV_DTYPE_CASE(name, ggml, elements, ...) \
  case DType::name:                               \
    return elements;
    CKV_STORED_DTYPES(CKV_DTYPE_CASE)
#undef CKV_DTYPE_CASE
  }
  return 1;
}
CKV_HD constexpr int64_t block_bytes(DType t) {
  switch (t) {
#define CKV_DTYPE_CASE(name, ggml, elements, bytes, ...) \
  case DType::name:                                      \
    return bytes;
    CKV_STORED_DTYPES(CKV_DTYPE_CASE)
#undef CKV_DTYPE_CASE
  }
  return 0;
}

}  // namespace ckv

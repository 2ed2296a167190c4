#pragma once
// Random weights in every stored dtype, and random float32 tensors, for tests and benchmarks
// (bench/bench_linear.cpp).
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "io/quant.h"

namespace ckv {

// A float32 tensor of N(0, scale^2) values: mt19937(seed) drawn in element order.
inline Tensor random_tensor(std::vector<int64_t> shape, uint32_t seed, float scale = 1.0f) {
  Tensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  for (float& x : t.span()) x = normal(rng);
  return t;
}

// Random blocks of dtype t for a [rows, cols] matrix: random bytes with every f16 scale
// replaced by a finite, moderate value (a random f16 may be inf or NaN).
inline std::vector<uint8_t> random_blocks(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(storage_bytes(t, rows * cols));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() & 0xFF);
  const int64_t bb = block_bytes(t);
  auto put_f16 = [&](size_t at) {  // exponent 10..13: 2^-5..2^-2, random sign and mantissa
    const auto h =
        static_cast<uint16_t>(((rng() & 1) << 15) | ((10 + rng() % 4) << 10) | (rng() & 0x3FF));
    bytes[at] = static_cast<uint8_t>(h & 0xFF);
    bytes[at + 1] = static_cast<uint8_t>(h >> 8);
  };
  for (size_t blk = 0; blk < bytes.size() / static_cast<size_t>(bb); ++blk) {
    const size_t at = blk * static_cast<size_t>(bb);
    switch (t) {
      case DType::F16:
        put_f16(at);
        break;
      case DType::BF16:
        bytes[at + 1] = static_cast<uint8_t>(0x3C + (rng() % 4));  // |x| in [2^-7, 2^1)
        break;
      case DType::F32: {
        const float v = std::uniform_real_distribution<float>(-1, 1)(rng);
        std::memcpy(bytes.data() + at, &v, 4);
        break;
      }
      default:  // a block format: its float16 scale fields (io/dtype.h)
        for (const int field : dtype_traits(t).f16_fields)
          if (field >= 0) put_f16(at + static_cast<size_t>(field));
        break;
    }
  }
  return bytes;
}

}  // namespace ckv

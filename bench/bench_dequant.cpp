// Dequantisation to float32 (io/quant.h's dequantize, the tiles of the prefill's GEMMs) per
// stored dtype, on a [2048, 640] matrix (Gemma 3 270M's gate/up projection) of random codes
// with the block scales set to 0.1: seconds per element (per_element), one thread.
//
//   build/ckv_bench_dequant --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "io/dtype.h"
#include "io/quant.h"

namespace {

constexpr int64_t kRows = 2048, kCols = 640;

void dequant(benchmark::State& state, ckv::DType t) {
  const int64_t n = kRows * kCols;
  const ckv::DTypeTraits& traits = ckv::dtype_traits(t);
  std::vector<uint8_t> src(ckv::storage_bytes(t, n));
  std::mt19937 rng(1);
  for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
  if (traits.block_elements > 1)  // normal scales: random float16 bits would hold NaN and subnormals
    for (size_t o = 0; o < src.size(); o += static_cast<size_t>(traits.block_bytes))
      for (const int field : traits.f16_fields)
        if (field >= 0) src[o + field] = 0x66, src[o + field + 1] = 0x2e;  // 0.1 as float16
  std::vector<float> dst(static_cast<size_t>(n));
  for (auto _ : state) {
    ckv::dequantize(t, src, dst);
    benchmark::DoNotOptimize(dst.data());
  }
  // Seconds per element, printed with an SI prefix (180p: 0.18 ns).
  state.counters["per_element"] = benchmark::Counter(
      static_cast<double>(n) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

const bool registered = [] {
  for (const ckv::DTypeTraits& t : ckv::kDTypeTraits)
    if (t.block_elements > 1) benchmark::RegisterBenchmark(t.name, dequant, t.type)->Unit(benchmark::kMicrosecond);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();

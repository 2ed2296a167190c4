// One linear layer y = x W^T of decode shape (few rows of x) per stored dtype: the tiled
// path (convert a float32 tile of W per chunk, then an Eigen GEMM) against the fused
// few-row path (dequantise in registers and dot), on the same weights and pool.
// Google Benchmark; docs/PERF.md "Decode" has results and the command:
//
//   cmake --build build --target ckv_bench_linear
//   build/ckv_bench_linear --benchmark_filter='576x1536' --benchmark_min_time=0.2
//
// Names: <path>/<dtype>/<out>x<in>/rows:<r>/threads:<t>; CPU time is the whole process's
// (all pool threads), the fair measure when the machine is shared. step/<path>/... runs every linear
// layer of one decode step of the default model ($CKV_MODEL or models/), in forward order,
// on one row: the ceiling that the linear layers put on decode tokens/s.
// Rows beyond kLinearFewRows show
// where the GEMM takes over (the threshold in ops/linear.h).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>

#include "core/thread_pool.h"
#include "io/weight_matrix.h"
#include "model/model.h"
#include "ops/linear.h"
#include "random_blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using ckv::DType;

struct Shape {
  const char* name;
  int64_t out, in;
};

// SmolLM2-135M (the default model): q/o, k/v, gate/up, down, lm_head; Llama-3.1-8B: q/o,
// gate/up, down.
constexpr Shape kShapes[] = {{"135M.q", 576, 576},      {"135M.kv", 192, 576},
                             {"135M.up", 1536, 576},    {"135M.down", 576, 1536},
                             {"135M.lm_head", 49152, 576}, {"8B.q", 4096, 4096},
                             {"8B.up", 14336, 4096},    {"8B.down", 4096, 14336}};

constexpr DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                            DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K};

ckv::ThreadPool& pool(int threads) {
  static std::unique_ptr<ckv::ThreadPool> pools[9];
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ckv::ThreadPool>(threads);
  return *p;
}

void run(benchmark::State& state, DType t, Shape s, bool fused) {
  const int64_t rows = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const std::vector<uint8_t> bytes = ckv::random_blocks(t, s.out, s.in, 1);
  const ckv::WeightMatrix w = ckv::WeightMatrix::view(t, s.out, s.in, bytes, nullptr);
  std::vector<float> x(static_cast<size_t>(rows * s.in)), y(static_cast<size_t>(rows * s.out));
  std::mt19937 rng(2);
  std::normal_distribution<float> n;
  for (float& v : x) v = n(rng);
  ckv::ThreadPool& p = pool(threads);
  for (auto _ : state) {
    if (fused)
      ckv::detail::linear_few_rows_cpu(x.data(), s.in, w, nullptr, y.data(), s.out, rows, p);
    else
      ckv::detail::linear_tiled_cpu(x.data(), s.in, w, nullptr, y.data(), s.out, rows, p);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  // Weight bytes streamed per second: what bounds a decode step.
  state.counters["weight_GBps"] = benchmark::Counter(
      static_cast<double>(w.stored_bytes()) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
// The alternative that llama.cpp takes, for comparison only (not in the product): the row of
// x quantised to 8 bits per 32-element block (scale dx, and dx * sum q8 for Q4_1's offset),
// then integer dot products (AVX512-VNNI vpdpbusd) per Q4_1 block:
//   sum_j (d q_j + m) dx x8_j = d dx sum_j q_j x8_j + m (dx sum_j x8_j).
// Rows of the output are split like the fused path's.
void q4_1_int8(benchmark::State& state, Shape s) {
  const int threads = static_cast<int>(state.range(1));
  const std::vector<uint8_t> bytes = ckv::random_blocks(DType::Q4_1, s.out, s.in, 1);
  std::vector<float> x(static_cast<size_t>(s.in)), y(static_cast<size_t>(s.out));
  std::mt19937 rng(2);
  std::normal_distribution<float> n;
  for (float& v : x) v = n(rng);
  const int64_t nb = s.in / 32;
  std::vector<int8_t> xq(static_cast<size_t>(s.in));
  std::vector<float> xd(static_cast<size_t>(nb)), xs(static_cast<size_t>(nb));
  ckv::ThreadPool& p = pool(threads);
  const int64_t chunk = ckv::detail::linear_few_rows_chunk(s.out, s.in);
  for (auto _ : state) {
    for (int64_t b = 0; b < nb; ++b) {  // quantise the activation row (timed: part of the cost)
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[static_cast<size_t>(32 * b + j)]));
      const float d = amax / 127, id = d > 0 ? 1 / d : 0;
      int sum = 0;
      for (int j = 0; j < 32; ++j) {
        const int q = static_cast<int>(std::lround(x[static_cast<size_t>(32 * b + j)] * id));
        xq[static_cast<size_t>(32 * b + j)] = static_cast<int8_t>(q);
        sum += q;
      }
      xd[static_cast<size_t>(b)] = d;
      xs[static_cast<size_t>(b)] = d * static_cast<float>(sum);
    }
    p.parallel_for((s.out + chunk - 1) / chunk, [&](int64_t c) {
      const __m256i low = _mm256_set1_epi8(0x0F);
      for (int64_t o = c * chunk; o < std::min(s.out, (c + 1) * chunk); ++o) {
        const uint8_t* row = bytes.data() + o * nb * 20;
        __m256 acc = _mm256_setzero_ps();
        float offset = 0;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = row + 20 * b;
          const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
          const __m256i qq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.data() + 32 * b));
          const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qq, xv);
          const float d = _cvtsh_ss(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
          const float m = _cvtsh_ss(static_cast<uint16_t>(blk[2] | (blk[3] << 8)));
          acc = _mm256_fmadd_ps(_mm256_set1_ps(d * xd[static_cast<size_t>(b)]), _mm256_cvtepi32_ps(dot), acc);
          offset += m * xs[static_cast<size_t>(b)];
        }
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        h = _mm_hadd_ps(h, h);
        h = _mm_hadd_ps(h, h);
        y[static_cast<size_t>(o)] = _mm_cvtss_f32(h) + offset;
      }
    });
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["weight_GBps"] = benchmark::Counter(
      static_cast<double>(bytes.size()) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate,
      benchmark::Counter::kIs1000);
}
#endif

// Every matrix one decode step multiplies: per layer q, k, v, o, gate, up, down; lm_head.
void step(benchmark::State& state, bool fused) {
  static const ckv::Model model = ckv::load_model(ckv::default_model_path());
  const ckv::ModelWeights& w = model.weights;
  std::vector<const ckv::WeightMatrix*> mats;
  for (const ckv::LayerWeights& l : w.layers)
    for (const ckv::WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) mats.push_back(m);
  mats.push_back(&w.lm_head());
  const int64_t rows = state.range(0);
  int64_t widest = 0;
  uint64_t bytes = 0;
  for (const ckv::WeightMatrix* m : mats) {
    widest = std::max({widest, m->rows(), m->cols()});
    bytes += m->stored_bytes();
  }
  std::vector<float> x(static_cast<size_t>(rows * widest), 0.01f), y(x.size() + static_cast<size_t>(rows * w.lm_head().rows()));
  ckv::ThreadPool& p = pool(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    for (const ckv::WeightMatrix* m : mats) {
      if (fused)
        ckv::detail::linear_few_rows_cpu(x.data(), m->cols(), *m, nullptr, y.data(), m->rows(), rows, p);
      else
        ckv::detail::linear_tiled_cpu(x.data(), m->cols(), *m, nullptr, y.data(), m->rows(), rows, p);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["steps_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["weight_GBps"] = benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(state.iterations()),
                                                     benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

const bool registered = [] {
  for (bool fused : {false, true})
    benchmark::RegisterBenchmark(fused ? "step/fused/default_model" : "step/tiled/default_model",
                                 [fused](benchmark::State& st) { step(st, fused); })
        ->ArgNames({"rows", "threads"})
        ->ArgsProduct({{1}, {1, 2}})
        ->Unit(benchmark::kMillisecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime();
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
  for (const Shape& s : kShapes)
    benchmark::RegisterBenchmark((std::string("int8/Q4_1/") + s.name + "/" + std::to_string(s.out) + "x" +
                                  std::to_string(s.in)).c_str(),
                                 [s](benchmark::State& st) { q4_1_int8(st, s); })
        ->ArgNames({"rows", "threads"})
        ->ArgsProduct({{1}, {1, 2}})
        ->Unit(benchmark::kMicrosecond)
        ->MeasureProcessCPUTime()
        ->UseRealTime();
#endif
  for (const Shape& s : kShapes)
    for (DType t : kTypes)
      for (bool fused : {false, true}) {
        if (s.in % ckv::block_elements(t) != 0) continue;  // K-quants need 256 | in
        const std::string name = std::string(fused ? "fused/" : "tiled/") + std::string(ckv::dtype_name(t)) +
                                 "/" + s.name + "/" + std::to_string(s.out) + "x" + std::to_string(s.in);
        benchmark::RegisterBenchmark(name.c_str(), [t, s, fused](benchmark::State& st) { run(st, t, s, fused); })
            ->ArgNames({"rows", "threads"})
            ->ArgsProduct({{1, 2, 4, 8, 16}, {1, 2}})
            ->Unit(benchmark::kMicrosecond)
            ->MeasureProcessCPUTime()
            ->UseRealTime();
      }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();

// The CPU attention kernel of a prefill (ops/attention_cpu.cpp) on the layer shapes of the
// models docs/PERF.md measures, with and without a sliding window, 2 threads by default.
// GFLOPS counts the logits and value products of the (query, key) pairs each row sees:
// 4 * d_head flops per pair and query head (a multiply-add in each product), so the kernels'
// own waste (tiles past a row's last key or before its window) does not count.
//
//   build/ckv_bench_attention --benchmark_min_time=1 [--benchmark_filter=gemma3]
// CKV_BENCH_THREADS (default 2) sets the pool's thread count.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "bench_util.h"
#include "core/thread_pool.h"
#include "ops/attention.h"

namespace {

struct Shape {
  const char* name;
  int64_t n_head, n_kv_head, d_head, window;
};

// Gemma 3 270M's local and global layers, SmolLM2-135M, a Llama-3-8B layer, Mistral-7B's window.
constexpr Shape kShapes[] = {{"gemma3.local", 4, 1, 256, 512},  {"gemma3.global", 4, 1, 256, 0},
                             {"smollm2", 9, 3, 64, 0},          {"llama8B", 32, 8, 128, 0},
                             {"mistral7B.window", 32, 8, 128, 4096}};

using ckv::bench::random_floats;
using ckv::bench::threads;

// The (query, key) pairs of a causal prefill of seq rows, each row seeing at most window keys.
double pairs(int64_t seq, int64_t window) {
  double total = 0;
  for (int64_t i = 0; i < seq; ++i) total += static_cast<double>(window > 0 ? std::min(i + 1, window) : i + 1);
  return total;
}

void attention(benchmark::State& state, Shape s) {
  const int64_t seq = state.range(0);
  const std::vector<float> q = random_floats(s.n_head * seq * s.d_head, 1),
                           k = random_floats(s.n_kv_head * seq * s.d_head, 2),
                           v = random_floats(s.n_kv_head * seq * s.d_head, 3);
  std::vector<float> out(static_cast<size_t>(seq * s.n_head * s.d_head));
  ckv::ThreadPool pool(threads());
  ckv::AttentionParams params;
  params.window = s.window;
  const ckv::detail::AttentionShape shape{s.n_head, s.n_kv_head, seq, s.d_head};
  for (auto _ : state) {
    ckv::detail::causal_attention_cpu(q.data(), k.data(), v.data(), out.data(), shape, params, {}, pool);
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 4.0 * static_cast<double>(s.d_head * s.n_head) * pairs(seq, s.window);
  state.counters["GFLOPS"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

const bool registered = [] {
  for (const Shape& s : kShapes)
    benchmark::RegisterBenchmark(s.name, attention, s)->Arg(512)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
  return true;
}();

}  // namespace

BENCHMARK_MAIN();

// The prefill GEMM engine, side by side in one run (issue 12, item 3): y = x W^T with
// x [rows, in] float32 and W [out, in] float32, on the layer shapes of the default model,
// Gemma 3 270M and an 8B model at 512 and 2048 rows, 2 threads by default.
//
//   eigen         ckv's ops/linear tiled path on a float32 weight (column chunks from the
//                 shape, one single-threaded Eigen GEMM per chunk on ckv's thread pool)
//   openblas      cblas_sgemm (Debian libopenblas-dev, pthreads build; it has no sbgemm)
//   dnnl_f32      oneDNN dnnl_sgemm (Debian libdnnl-dev, OpenMP runtime)
//   dnnl_bf16     oneDNN matmul with bf16 x and W (W reordered once, outside the timing;
//                 x converted inside it), float32 accumulation and output
//
// Built when Google Benchmark is installed; OpenBLAS and oneDNN each only when found.
//   build/ckv_bench_gemm --benchmark_min_time=1 [--benchmark_filter=8B]
// CKV_BENCH_THREADS (default 2) sets every engine's thread count.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/thread_pool.h"
#include "io/weight_matrix.h"
#include "ops/linear.h"

#if defined(CKV_BENCH_OPENBLAS)
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif
#if defined(CKV_BENCH_DNNL)
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

struct Shape {
  const char* name;
  int64_t out, in;
};

constexpr Shape kShapes[] = {{"135M.q", 576, 576},         {"135M.kv", 192, 576},
                             {"135M.up", 1536, 576},       {"135M.down", 576, 1536},
                             {"270M.q", 1024, 640},        {"270M.up", 2048, 640},
                             {"270M.down", 640, 2048},
                             {"8B.q", 4096, 4096},         {"8B.kv", 1024, 4096},
                             {"8B.up", 14336, 4096},       {"8B.down", 4096, 14336}};

using ckv::bench::random_floats;
using ckv::bench::threads;

void set_counters(benchmark::State& state, Shape s, int64_t rows) {
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * static_cast<double>(rows * s.out * s.in) *
                                                    static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void eigen(benchmark::State& state, Shape s) {
  const int64_t rows = state.range(0);
  const std::vector<float> x = random_floats(rows * s.in, 1, 1.0f), w = random_floats(s.out * s.in, 2, 0.05f);
  std::vector<float> y(static_cast<size_t>(rows * s.out));
  const auto bytes = std::span(reinterpret_cast<const uint8_t*>(w.data()), w.size() * sizeof(float));
  const ckv::WeightMatrix wm = ckv::WeightMatrix::view(ckv::DType::F32, s.out, s.in, bytes, nullptr);
  ckv::ThreadPool pool(threads());
  for (auto _ : state) {
    ckv::detail::linear_tiled_cpu(x.data(), s.in, wm, nullptr, y.data(), s.out, rows, pool);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, s, rows);
}

#if defined(CKV_BENCH_OPENBLAS)
void openblas(benchmark::State& state, Shape s) {
  const int64_t rows = state.range(0);
  const std::vector<float> x = random_floats(rows * s.in, 1, 1.0f), w = random_floats(s.out * s.in, 2, 0.05f);
  std::vector<float> y(static_cast<size_t>(rows * s.out));
  openblas_set_num_threads(threads());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(s.out),
                static_cast<int>(s.in), 1.0f, x.data(), static_cast<int>(s.in), w.data(),
                static_cast<int>(s.in), 0.0f, y.data(), static_cast<int>(s.out));
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, s, rows);
}
#endif

#if defined(CKV_BENCH_DNNL)
void dnnl_f32(benchmark::State& state, Shape s) {
  const int64_t rows = state.range(0);
  const std::vector<float> x = random_floats(rows * s.in, 1, 1.0f), w = random_floats(s.out * s.in, 2, 0.05f);
  std::vector<float> y(static_cast<size_t>(rows * s.out));
  omp_set_num_threads(threads());
  for (auto _ : state) {
    // Row-major y = x W^T: dnnl_sgemm is row-major, so transa 'N', transb 'T'.
    dnnl_sgemm('N', 'T', rows, s.out, s.in, 1.0f, x.data(), s.in, w.data(), s.in, 0.0f, y.data(), s.out);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, s, rows);
}

void dnnl_bf16(benchmark::State& state, Shape s) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  const int64_t rows = state.range(0);
  const std::vector<float> x = random_floats(rows * s.in, 1, 1.0f), w = random_floats(s.out * s.in, 2, 0.05f);
  omp_set_num_threads(threads());
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const dnnl::memory::desc x_f32({rows, s.in}, dt::f32, tag::ab), x_bf16({rows, s.in}, dt::bf16, tag::ab);
  const dnnl::memory::desc w_f32({s.in, s.out}, dt::f32, tag::ba);  // W [out, in] read as W^T [in, out]
  const dnnl::memory::desc w_any({s.in, s.out}, dt::bf16, tag::any), y_f32({rows, s.out}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_bf16, w_any, y_f32), eng);  // oneDNN 2.x API
  dnnl::memory xm(x_f32, eng, const_cast<float*>(x.data())), xb(x_bf16, eng);
  dnnl::memory wm(w_f32, eng, const_cast<float*>(w.data())), wb(pd.weights_desc(), eng), ym(y_f32, eng);
  dnnl::reorder(wm, wb).execute(strm, wm, wb);  // once: weights stored as bf16
  const dnnl::reorder to_bf16(xm, xb);
  const dnnl::matmul mm(pd);
  for (auto _ : state) {
    to_bf16.execute(strm, xm, xb);
    mm.execute(strm, {{DNNL_ARG_SRC, xb}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_DST, ym}});
    strm.wait();
    benchmark::DoNotOptimize(ym.get_data_handle());
  }
  set_counters(state, s, rows);
}
#endif

const bool registered = [] {
  using Fn = void (*)(benchmark::State&, Shape);
  std::vector<std::pair<const char*, Fn>> engines{{"eigen", eigen}};
#if defined(CKV_BENCH_OPENBLAS)
  engines.emplace_back("openblas", openblas);
#endif
#if defined(CKV_BENCH_DNNL)
  engines.emplace_back("dnnl_f32", dnnl_f32);
  engines.emplace_back("dnnl_bf16", dnnl_bf16);
#endif
  // Shape outermost, engines side by side for each shape and row count.
  for (const Shape& s : kShapes)
    for (int64_t rows : {512, 2048})
      for (const auto& [name, fn] : engines) {
        const std::string full =
            std::string(s.name) + "/" + std::to_string(s.out) + "x" + std::to_string(s.in) + "/" + name;
        benchmark::RegisterBenchmark(full.c_str(), [fn = fn, s](benchmark::State& st) { fn(st, s); })
            ->ArgName("rows")
            ->Arg(rows)
            ->Unit(benchmark::kMillisecond)
            ->MeasureProcessCPUTime()
            ->UseRealTime();
      }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();

// Benchmark of the `ckv bound` analysis kernels (issue 4, docs/PERF.md), on random tensors
// of the default model's shapes (SmolLM2-135M: 9 query heads, 3 KV heads, d_head 64,
// d_model 576):
//
//   nu      value_norms L1 and L2 for n keys, beside plain Eigen GEMMs of the same shapes
//           (L1: V_g W_h, [n, 64] x [64, 576] float per head; L2: V_g G_h, [n, 64] x
//           [64, 64] double), interleaved, best of --repeats; prints GFLOP/s and the ratio.
//   layer   the analysis of one layer (value_norms + analyze_layer with the four main
//           methods and five budgets) and that time x 30 layers.
//
//   ckv_bench_bound [--n 4096] [--threads 1] [--repeats 5] [--question 24] [--what nu,layer]
//                   [--block ROWS (value_norms tile)]
//
// FLOPs counted: nu_l1 2 n d D per head (the product; the |.| sum is not counted), nu_l2
// 2 n d^2 + 2 n d (the quadratic form) + 2 D d^2 (its Gram matrix W_h W_h^T) per head,
// GEMMs 2 m k n. Rates are per core, from the process CPU time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <sys/resource.h>
#include <functional>
#include <random>
#include <string>

#include "analysis/bound_layer.h"
#include "analysis/value_norms.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace {

using ckv::Tensor;
using Clock = std::chrono::steady_clock;
using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr int64_t kHeads = 9, kKvHeads = 3, kDHead = 64, kDModel = 576, kLayers = 30;

Tensor random_tensor(std::vector<int64_t> shape, std::mt19937& rng, float scale) {
  Tensor t(std::move(shape));
  std::normal_distribution<float> normal(0.0f, scale);
  for (float& x : t.span()) x = normal(rng);
  return t;
}

// CPU seconds of the whole process (all threads): on a machine shared with other jobs it
// counts only our own work, where wall time counts the waiting too.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Time {
  double wall = 1e300, cpu = 1e300;
};

// Runs the functions interleaved `repeats` times; the best wall and CPU time of each.
std::vector<Time> best_of(int repeats, const std::vector<std::function<void()>>& fs) {
  std::vector<Time> best(fs.size());
  for (int r = 0; r < repeats; ++r)
    for (size_t i = 0; i < fs.size(); ++i) {
      const double c0 = cpu_now();
      const auto t0 = Clock::now();
      fs[i]();
      best[i].wall = std::min(best[i].wall, std::chrono::duration<double>(Clock::now() - t0).count());
      best[i].cpu = std::min(best[i].cpu, cpu_now() - c0);
    }
  return best;
}

void for_heads(ckv::ThreadPool& pool, const std::function<void(int64_t)>& f) {
  pool.parallel_for(kHeads, f);
}

void bench_nu(int64_t n, int threads, int repeats, int64_t block) {
  std::mt19937 rng(1);
  const Tensor v = random_tensor({kKvHeads, n, kDHead}, rng, 1.0f);
  const Tensor wo = random_tensor({kDModel, kHeads * kDHead}, rng, 0.05f);
  ckv::ThreadPool pool(threads);
  const int64_t group = kHeads / kKvHeads;
  const ckv::ConstMatrixMap wo_map = wo.matrix();
  // What the plain GEMMs write: P = V_g W_h, [n, d_model] float, and V_g G_h, [n, d_head]
  // double, per head; their inputs are ready (V_g in double too).
  std::vector<ckv::RowMatrix> p(kHeads, ckv::RowMatrix(n, kDModel));
  std::vector<RowMatrixD> q(kHeads, RowMatrixD(n, kDHead));
  std::vector<RowMatrixD> gram(kHeads), v_d(kKvHeads);
  for (int64_t g = 0; g < kKvHeads; ++g)
    v_d[static_cast<size_t>(g)] = ckv::ConstMatrixMap(v.data() + g * n * kDHead, n, kDHead).cast<double>();
  for (int64_t h = 0; h < kHeads; ++h) {
    const RowMatrixD w = wo_map.middleCols(h * kDHead, kDHead).cast<double>();
    gram[static_cast<size_t>(h)] = w.transpose() * w;
  }
  float sink = 0;
  auto gemm_l1 = [&] {
    for_heads(pool, [&](int64_t h) {
      ckv::RowMatrix& out = p[static_cast<size_t>(h)];
      const ckv::ConstMatrixMap vg(v.data() + (h / group) * n * kDHead, n, kDHead);
      out.noalias() = vg * wo_map.middleCols(h * kDHead, kDHead).transpose();
    });
    sink += p[0](0, 0);
  };
  auto gemm_l2 = [&] {
    for_heads(pool, [&](int64_t h) {
      q[static_cast<size_t>(h)].noalias() = v_d[static_cast<size_t>(h / group)] * gram[static_cast<size_t>(h)];
    });
    sink += static_cast<float>(q[0](0, 0));
  };
  // The same product tile by tile into a cache-resident [128, d_model] buffer (what nu_l1
  // does, without the |.| sum): Eigen's rate for this shape when the output is not written
  // to memory.
  std::vector<ckv::RowMatrix> tiles(kHeads, ckv::RowMatrix(128, kDModel));
  auto gemm_tiled = [&] {
    for_heads(pool, [&](int64_t h) {
      ckv::RowMatrix& tile = tiles[static_cast<size_t>(h)];
      const ckv::ConstMatrixMap vg(v.data() + (h / group) * n * kDHead, n, kDHead);
      for (int64_t r0 = 0; r0 < n; r0 += 128) {
        const int64_t rows = std::min<int64_t>(128, n - r0);
        tile.topRows(rows).noalias() = vg.middleRows(r0, rows) * wo_map.middleCols(h * kDHead, kDHead).transpose();
      }
    });
    sink += tiles[0](0, 0);
  };
  auto nu_l1 = [&] { sink += ckv::value_norms(v, wo, kHeads, {}, {.l1 = true, .l2 = false, .block = block}, &pool).l1.data()[0]; };
  auto nu_l2 = [&] { sink += ckv::value_norms(v, wo, kHeads, {}, {.l1 = false, .l2 = true, .block = block}, &pool).l2.data()[0]; };
  const std::vector<Time> t = best_of(repeats, {nu_l1, gemm_l1, gemm_tiled, nu_l2, gemm_l2});
  const double f1 = 2.0 * static_cast<double>(n * kDHead * kDModel * kHeads);
  const double f2 = static_cast<double>(n * kHeads) * (2.0 * kDHead * kDHead + 2.0 * kDHead) +
                    2.0 * static_cast<double>(kDModel * kDHead * kDHead * kHeads);
  const double g2 = 2.0 * static_cast<double>(n * kDHead * kDHead * kHeads);
  std::printf("nu: n=%lld, %lld heads, d_head %lld, d_model %lld, %d thread(s), best of %d "
              "(GFLOP/s per core from CPU time; wall ms in brackets)\n",
              static_cast<long long>(n), static_cast<long long>(kHeads), static_cast<long long>(kDHead),
              static_cast<long long>(kDModel), threads, repeats);
  auto line = [](const char* what, double flops, const Time& x) {
    std::printf("  %-42s %7.2f ms CPU [%7.2f ms wall] %6.1f GFLOP/s\n", what, x.cpu * 1e3, x.wall * 1e3,
                flops / x.cpu / 1e9);
  };
  line("nu_l1 (value_norms, L1 only)", f1, t[0]);
  line("GEMM [n,64]x[64,576] f32, full output", f1, t[1]);
  line("GEMM [n,64]x[64,576] f32, 128-row tiles", f1, t[2]);
  line("nu_l2 (value_norms, L2 only)", f2, t[3]);
  line("GEMM [n,64]x[64,64] f64", g2, t[4]);
  std::printf("  nu_l1 / full GEMM %.0f%%, nu_l1 / tiled GEMM %.0f%%, nu_l2 / f64 GEMM %.0f%% (FLOP rates)\n",
              100.0 * t[1].cpu / t[0].cpu, 100.0 * t[2].cpu / t[0].cpu, 100.0 * (f2 / t[3].cpu) / (g2 / t[4].cpu));
  if (sink == 12345.0f) std::printf(" \n");
}

void bench_layer(int64_t n, int64_t n_question, int threads, int repeats) {
  std::mt19937 rng(2);
  const Tensor q = random_tensor({kHeads, n, kDHead}, rng, 0.6f);
  const Tensor k = random_tensor({kKvHeads, n, kDHead}, rng, 1.0f);
  const Tensor v = random_tensor({kKvHeads, n, kDHead}, rng, 1.0f);
  const Tensor wo = random_tensor({kDModel, kHeads * kDHead}, rng, 0.05f);
  ckv::ThreadPool pool(threads);
  ckv::LayerRequest r;
  for (const char* m : {"snapkv", "criticalkv(snapkv)", "adakv(snapkv)", "criticalkv(adakv(snapkv))"})
    r.methods.push_back(ckv::MethodSpec::parse(m));
  r.c = n - n_question;
  for (double f : {0.025, 0.05, 0.1, 0.2, 0.4}) r.budgets.push_back(ckv::budget_from_fraction(r.c, f));
  r.eval_rows = ckv::evaluation_rows(r.c, n);
  ckv::ValueNorms nu;
  double sink = 0;
  auto norms = [&] { nu = ckv::value_norms(v, wo, kHeads, {}, {}, &pool); };
  norms();
  auto layer = [&] {
    const ckv::LayerTensors t{&q, &k, &v, &wo, &nu.l1, &nu.l2};
    sink += ckv::analyze_layer(t, r, &pool).metrics[0][0];
  };
  const std::vector<Time> t = best_of(repeats, {norms, layer});
  std::printf("layer: n=%lld, %lld evaluation queries, 4 methods x 5 budgets, %d thread(s), best of %d\n",
              static_cast<long long>(n), static_cast<long long>(n_question), threads, repeats);
  std::printf("  value_norms %7.1f ms CPU [%7.1f wall], analyze_layer %7.1f ms CPU [%7.1f wall]\n",
              t[0].cpu * 1e3, t[0].wall * 1e3, t[1].cpu * 1e3, t[1].wall * 1e3);
  // Peak RSS of the process beside the layer's own inputs (q, k, v, o_proj): what the
  // analysis adds must grow linearly in n.
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double inputs = 4.0 * static_cast<double>(q.numel() + k.numel() + v.numel() + wo.numel()) / 1048576.0;
  std::printf("  peak RSS %.1f MiB, of which the layer's inputs %.1f MiB\n",
              static_cast<double>(usage.ru_maxrss) / 1024.0, inputs);
  const double cpu = (t[0].cpu + t[1].cpu) * static_cast<double>(kLayers);
  std::printf("  x %lld layers: %.2f s CPU, %.2f s wall; at %d busy cores: %.2f s\n",
              static_cast<long long>(kLayers), cpu, (t[0].wall + t[1].wall) * static_cast<double>(kLayers),
              threads, cpu / threads);
  if (sink == 12345.0) std::printf(" \n");
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 4096, n_question = 24;
  int threads = 1, repeats = 5;
  int64_t block = ckv::ValueNormOptions{}.block;
  std::string what = "nu,layer";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const char* val = argv[i + 1];
    if (key == "--n") n = std::atoll(val);
    else if (key == "--threads") threads = std::atoi(val);
    else if (key == "--repeats") repeats = std::atoi(val);
    else if (key == "--question") n_question = std::atoll(val);
    else if (key == "--what") what = val;
    else if (key == "--block") block = std::atoll(val);
    else {
      std::fprintf(stderr, "ckv_bench_bound: unknown option %s\n", key.c_str());
      return 2;
    }
  }
  if (what.find("nu") != std::string::npos) bench_nu(n, threads, repeats, block);
  if (what.find("layer") != std::string::npos) bench_layer(n, n_question, threads, repeats);
  return 0;
}

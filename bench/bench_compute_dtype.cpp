// --compute-dtype bf16 against float32 on a real model (issue 12, item 3; docs/PERF.md):
// the logits of every position of a prefill in both compute dtypes, from the same tokens,
// and the prefill's time in each (interleaved, best of --repeats, wall and process CPU).
//
//   ckv_bench_compute_dtype --model M.gguf [--text FILE] [--tokens N] [--threads 2] [--repeats 3]
//
// The tokens are the first N of FILE's text under the model's tokenizer (default README.md:
// natural English, where top-1 agreement means something), or N random ids without --text
// and a tokenizer. Printed: the largest |logit difference|, that relative to each row's logit
// range (max - min) and to the logits' RMS, the share of positions whose argmax agrees, and
// tok/s and tok per CPU-second per dtype.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/core.h>

#include "model/forward.h"
#include "model/model.h"

namespace {

double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ckv;
  std::string model_path, text_path = std::string(CKV_SOURCE_DIR) + "/README.md";
  int64_t n = 512;
  int threads = 2, repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model")
      model_path = v;
    else if (a == "--text")
      text_path = v;
    else if (a == "--tokens")
      n = std::stoll(v);
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--repeats")
      repeats = std::stoi(v);
    else {
      fmt::print(stderr, "unknown option {}\n", a);
      return 2;
    }
  }
  if (model_path.empty()) {
    fmt::print(stderr,
               "usage: {} --model M [--text FILE] [--tokens N] [--threads T] [--repeats R]\n",
               argv[0]);
    return 2;
  }
  if (!compute_dtype_available(ComputeDType::BF16)) {
    fmt::print(stderr, "this build has no bf16 GEMM (built without oneDNN)\n");
    return 1;
  }
  const Model model = load_model(model_path);
  std::ifstream f(text_path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> tokens = model.tokenizer->encode(ss.str(), true);
  while (static_cast<int64_t>(tokens.size()) < n)
    tokens.insert(tokens.end(), tokens.begin(), tokens.end());
  tokens.resize(static_cast<size_t>(n));

  ForwardRequest req;
  for (int64_t i = 0; i < n; ++i) req.logit_rows.push_back(i);
  Forward f32(model, {.threads = threads}),
      bf16(model, {.threads = threads, .compute = ComputeDType::BF16});
  Tensor l32, l16;
  double best_wall[2] = {1e30, 1e30}, best_cpu[2] = {1e30, 1e30};
  for (int r = 0; r < repeats; ++r)
    for (int d = 0; d < 2; ++d) {
      const double c0 = cpu_now();
      const auto t0 = std::chrono::steady_clock::now();
      Tensor logits = (d == 0 ? f32 : bf16).run(tokens, req).logits;
      best_wall[d] =
          std::min(best_wall[d],
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      best_cpu[d] = std::min(best_cpu[d], cpu_now() - c0);
      (d == 0 ? l32 : l16) = std::move(logits);
    }
  const int64_t vocab = l32.dim(1);
  double max_abs = 0, max_rel_range = 0, sum_sq = 0, sum_sq_diff = 0;
  int64_t agree = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* a = l32.data() + i * vocab;
    const float* b = l16.data() + i * vocab;
    const auto [lo, hi] = std::minmax_element(a, a + vocab);
    double row_abs = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      const double d = double{b[j]} - a[j];
      row_abs = std::max(row_abs, std::abs(d));
      sum_sq += double{a[j]} * a[j];
      sum_sq_diff += d * d;
    }
    max_abs = std::max(max_abs, row_abs);
    max_rel_range = std::max(max_rel_range, row_abs / (double{*hi} - *lo));
    agree += (std::max_element(a, a + vocab) - a) == (std::max_element(b, b + vocab) - b);
  }
  fmt::print("model {}, {} tokens of {}, {} threads, engine {}\n", model_path, n, text_path,
             threads, gemm_engine_name());
  fmt::print(
      "logits bf16 vs f32: max |diff| {:.4f}; max |diff| / row range {:.4f}; RMS diff / RMS logit "
      "{:.5f}; top-1 agreement {}/{} ({:.2f} %)\n",
      max_abs, max_rel_range, std::sqrt(sum_sq_diff / sum_sq), agree, n,
      100.0 * static_cast<double>(agree) / static_cast<double>(n));
  for (int d = 0; d < 2; ++d)
    fmt::print("{}: prefill best of {}: {:.1f} tok/s wall, {:.1f} tok per CPU-second\n",
               d == 0 ? "f32 " : "bf16", repeats, static_cast<double>(n) / best_wall[d],
               static_cast<double>(n) / best_cpu[d]);
  return 0;
}

// ckv mask's protocol (docs/MATH.md §2, §6) on the tiny golden models (4 heads over 2 or 4 KV
// heads): the masked attention output equals attention over physically reduced K/V (an
// independent double-precision recomputation from the recorded Q/K/V), Theorem 3.2 holds,
// context rows and layers below the first masked layer are bit-identical, and an empty
// mask reproduces the unmasked run exactly.
#include <gtest/gtest.h>

#include "keeping_recorder.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "analysis/mask_metrics.h"
#include "analysis/mask_plan.h"
#include "analysis/placebo.h"
#include "core/error.h"
#include "model/forward.h"
#include "model/model.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;

const Model& tiny(const std::string& name) {
  static std::map<std::string, Model> models;
  auto it = models.find(name);
  if (it == models.end())
    it = models.emplace(name, load_model(fs::path(CKV_TEST_DATA_DIR) / "models" / name)).first;
  return it->second;
}

using Keep = test::KeepingRecorder;

constexpr int64_t kSeq = 40, kC = 28;

std::vector<int32_t> tokens() {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < kSeq; ++i) t.push_back(static_cast<int32_t>((i * 37 + 11) % 256));
  return t;
}

std::vector<int64_t> eval_rows() {
  std::vector<int64_t> r;
  for (int64_t i = kC; i < kSeq; ++i) r.push_back(i);
  return r;
}

ForwardResult run(const Model& m, Keep& keep, const EvictionPlan* plan, std::vector<int64_t> logit_rows = {}) {
  Forward fwd(m, {.threads = 2, .query_block = 8});
  ForwardRequest req;
  req.record = {.layers = {}, .qkv = true, .attn_rows = eval_rows(), .head_out_rows = eval_rows(), .residual = true};
  req.recorder = &keep;
  req.logit_rows = std::move(logit_rows);
  if (plan != nullptr) req.mask = plan->to_mask(kSeq);
  return fwd.run(tokens(), req);
}

// Per-KV-head random kept sets of `budget` context entries (a small LCG: test data only).
EvictionPlan random_plan(const Model& m, int64_t budget, uint64_t seed) {
  EvictionPlan p = EvictionPlan::none(m.config.n_layer, m.config.n_kv_head, kC, kSeq);
  SplitMix64 rng(seed);
  for (int64_t l = 0; l < m.config.n_layer; ++l)
    for (int64_t g = 0; g < m.config.n_kv_head; ++g) {
      std::vector<int64_t> all;
      for (int64_t i = 0; i < kC; ++i) all.push_back(i);
      for (size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[static_cast<size_t>(rng.below(i))]);
      all.resize(static_cast<size_t>(budget));
      p.at(l, g) = complement(all, kC);
    }
  return p;
}

// Max |recorded masked head output - output over physically reduced K/V|, computed here in
// double from the recorded post-RoPE Q/K/V: the evicted rows are removed from K and V (and
// a sliding layer's keys outside each row's window).
double physical_gap(const Model& m, const Keep& keep, const EvictionPlan& plan, double& scale) {
  const ModelConfig& c = m.config;
  const int64_t d = c.d_head, group = c.n_head / c.n_kv_head, n_eval = kSeq - kC;
  double worst = 0;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const Keep::Layer& L = keep.layers.at(l);
    const Tensor wo = m.weights.layers[static_cast<size_t>(l)].wo.to_f32();
    for (int64_t h = 0; h < c.n_head; ++h) {
      const int64_t g = h / group;
      const std::vector<char> ev = plan.evicted_flags(l, g);
      const int64_t window = c.window_of(l);  // a sliding layer's row p sees (p - W, p]
      for (int64_t i = 0; i < n_eval; ++i) {
        const int64_t p = kC + i;
        std::vector<int64_t> keys;
        for (int64_t j = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0; j <= p; ++j)
          if (j >= kC || !ev[static_cast<size_t>(j)]) keys.push_back(j);
        Eigen::MatrixXd K(keys.size(), d), V(keys.size(), d);
        for (size_t r = 0; r < keys.size(); ++r)
          for (int64_t t = 0; t < d; ++t) {
            K(static_cast<Eigen::Index>(r), t) = L.k.data()[(g * kSeq + keys[r]) * d + t];
            V(static_cast<Eigen::Index>(r), t) = L.v.data()[(g * kSeq + keys[r]) * d + t];
          }
        Eigen::VectorXd q(d);
        for (int64_t t = 0; t < d; ++t) q[t] = L.q.data()[(h * kSeq + p) * d + t];
        Eigen::VectorXd s = K * q / std::sqrt(static_cast<double>(d));
        s = (s.array() - s.maxCoeff()).exp();
        s /= s.sum();
        const Eigen::VectorXd o = V.transpose() * s;  // [d_head]
        for (int64_t x = 0; x < c.d_model; ++x) {
          double y = 0;
          for (int64_t t = 0; t < d; ++t) y += double{wo.data()[x * c.n_head * d + h * d + t]} * o[t];
          const double got = L.head_out.data()[(h * n_eval + i) * c.d_model + x];
          worst = std::max(worst, std::abs(y - got));
          scale = std::max(scale, std::abs(y));
        }
      }
    }
  }
  return worst;
}

// A method selected inside one masked pass over every layer and KV head (ckv mask
// --method): its eviction plan, and the pass's recordings in `keep`.
EvictionPlan run_method(const Model& m, const char* method, int64_t budget, int64_t window, Keep& keep) {
  std::vector<int64_t> layers, heads;
  for (int64_t l = 0; l < m.config.n_layer; ++l) layers.push_back(l);
  for (int64_t g = 0; g < m.config.n_kv_head; ++g) heads.push_back(g);
  EvictionPlan plan = EvictionPlan::none(m.config.n_layer, m.config.n_kv_head, kC, kSeq);
  SelectionParams sp;
  sp.window = window;
  Forward fwd(m, {.threads = 1});
  ForwardRequest req;
  req.record = {.layers = {}, .qkv = true, .attn_rows = eval_rows(), .head_out_rows = eval_rows(), .residual = true};
  req.recorder = &keep;
  req.layer_mask = method_mask_source(m.config, m.weights, {.method = MethodSpec::parse(method), .budget = budget,
                                      .params = sp, .c = kC, .eval_rows = eval_rows(), .layers = layers,
                                      .kv_heads = heads, .pool = nullptr, .layer_totals = {}}, &plan);
  fwd.run(tokens(), req);
  return plan;
}

class MaskModels : public ::testing::TestWithParam<std::string> {};

TEST_P(MaskModels, MaskedOutputEqualsPhysicallyReducedCache) {
  const Model& m = tiny(GetParam());
  const int64_t nl = m.config.n_layer, nkv = m.config.n_kv_head;
  std::vector<int64_t> all_layers, all_heads;
  for (int64_t l = 0; l < nl; ++l) all_layers.push_back(l);
  for (int64_t g = 0; g < nkv; ++g) all_heads.push_back(g);
  std::vector<EvictionPlan> plans = {
      plan_from_spans({{3, 8}}, kC, kSeq, all_layers, all_heads, nl, nkv, "t"),
      plan_from_spans({{0, 4}, {10, 20}, {27, 28}}, kC, kSeq, all_layers, all_heads, nl, nkv, "t"),
      plan_from_spans({{5, 15}}, kC, kSeq, {1}, {nkv - 1}, nl, nkv, "t"),
  };
  for (int64_t budget : {int64_t{1}, kC / 4, kC / 2, kC - 1}) plans.push_back(random_plan(m, budget, 7 + static_cast<uint64_t>(budget)));
  for (const EvictionPlan& plan : plans) {
    Keep keep;
    run(m, keep, &plan);
    double scale = 0;
    const double gap = physical_gap(m, keep, plan, scale);
    EXPECT_LE(gap, 2e-6 * std::max(1.0, scale)) << "evicted " << plan.total_evicted();
    // The run's own check reports the same agreement.
    MaskCapture cap(m.config, m.weights, eval_rows(), kC, &plan, {.verify_physical = true});
    Forward fwd(m, {.threads = 1});
    ForwardRequest req = cap.request();
    req.mask = plan.to_mask(kSeq);
    fwd.run(tokens(), req);
    EXPECT_LE(cap.physical_max_diff, 2e-6 * std::max(1.0, cap.physical_max_abs));
    EXPECT_GT(cap.physical_max_abs, 0);
    for (double e : cap.renorm_err) EXPECT_LE(e, 1e-6);
  }
}

TEST_P(MaskModels, RenormalisationTheoremAndCorrectedWeights) {
  const Model& m = tiny(GetParam());
  const int64_t nl = m.config.n_layer, nkv = m.config.n_kv_head, group = m.config.n_head / nkv;
  // Only the last layer is masked, so its Q/K equal the unmasked run's and A is shared.
  const int64_t l = nl - 1;
  const EvictionPlan plan = plan_from_spans({{2, 9}, {15, 22}}, kC, kSeq, {l}, {0}, nl, nkv, "t");
  Keep full, masked;
  run(m, full, nullptr);
  run(m, masked, &plan);
  const Tensor &A = full.layers.at(l).attn, &Ap = masked.layers.at(l).attn;
  const int64_t n_eval = kSeq - kC;
  for (int64_t h = 0; h < m.config.n_head; ++h) {
    const std::vector<char> ev = plan.evicted_flags(l, h / group);
    for (int64_t i = 0; i < n_eval; ++i) {
      const float* a = A.data() + (h * n_eval + i) * kSeq;
      const float* ap = Ap.data() + (h * n_eval + i) * kSeq;
      double S = 0;
      for (int64_t j = 0; j < kSeq; ++j) S += j < kC && ev[static_cast<size_t>(j)] ? 0 : a[j];
      if (h / group != 0) {
        EXPECT_NEAR(S, 1.0, 1e-6);
      }
      for (int64_t j = 0; j < kSeq; ++j) {
        const bool kept = !(j < kC && ev[static_cast<size_t>(j)]);
        EXPECT_NEAR(ap[j], kept ? a[j] / S : 0.0, 1e-6) << "h " << h << " row " << i << " key " << j;
        if (kept) {
          EXPECT_NEAR(ap[j] * S, a[j], 1e-6);  // corrected = unmasked on kept entries
        }
      }
    }
  }
}

TEST_P(MaskModels, ContextRowsAndLowerLayersAreBitIdentical) {
  const Model& m = tiny(GetParam());
  const int64_t nl = m.config.n_layer, nkv = m.config.n_kv_head, d_model = m.config.d_model;
  Keep full, masked, top;
  run(m, full, nullptr);
  const EvictionPlan plan = random_plan(m, kC / 3, 3);
  run(m, masked, &plan);
  for (int64_t l = 0; l < nl; ++l)
    EXPECT_EQ(0, std::memcmp(full.layers.at(l).resid.data(), masked.layers.at(l).resid.data(),
                             sizeof(float) * static_cast<size_t>(kC * d_model))) << "layer " << l;
  // Some row >= c did change: the mask is applied.
  EXPECT_NE(0, std::memcmp(full.layers.at(nl - 1).resid.data(), masked.layers.at(nl - 1).resid.data(),
                           sizeof(float) * static_cast<size_t>(kSeq * d_model)));
  const EvictionPlan only_top = plan_from_spans({{1, 20}}, kC, kSeq, {nl - 1}, {0}, nl, nkv, "t");
  run(m, top, &only_top);
  for (int64_t l = 0; l < nl - 1; ++l)
    EXPECT_EQ(0, std::memcmp(full.layers.at(l).resid.data(), top.layers.at(l).resid.data(),
                             sizeof(float) * static_cast<size_t>(kSeq * d_model))) << "layer " << l;
}

TEST_P(MaskModels, EmptyMaskReproducesTheUnmaskedRun) {
  const Model& m = tiny(GetParam());
  const EvictionPlan none = EvictionPlan::none(m.config.n_layer, m.config.n_kv_head, kC, kSeq);
  EXPECT_TRUE(none.to_mask(kSeq).empty());
  Keep a, b, c;
  const ForwardResult fa = run(m, a, nullptr, eval_rows());
  const ForwardResult fb = run(m, b, &none, eval_rows());
  ASSERT_EQ(fa.logits.shape(), fb.logits.shape());
  EXPECT_EQ(0, std::memcmp(fa.logits.data(), fb.logits.data(), sizeof(float) * static_cast<size_t>(fa.logits.numel())));
  const auto vocab = static_cast<size_t>(m.config.vocab);
  const NextToken same = next_token(fa.logits.span().first(vocab), fb.logits.span().first(vocab));
  EXPECT_EQ(same.kl, 0.0);
  EXPECT_TRUE(same.top1_agree);
  const EvictionPlan plan = random_plan(m, 3, 11);
  const ForwardResult fc = run(m, c, &plan, eval_rows());
  const NextToken diff = next_token(fa.logits.span().first(vocab), fc.logits.span().first(vocab));
  EXPECT_GT(diff.kl, 0.0);
}

TEST_P(MaskModels, MetricsOfAnEmptyAndARealMask) {
  const Model& m = tiny(GetParam());
  MaskCapture full(m.config, m.weights, eval_rows(), kC, nullptr, {.nu = true});
  Forward fwd(m, {.threads = 1});
  fwd.run(tokens(), full.request());
  const EvictionPlan none = EvictionPlan::none(m.config.n_layer, m.config.n_kv_head, kC, kSeq);
  MaskCapture same(m.config, m.weights, eval_rows(), kC, &none, {});
  fwd.run(tokens(), same.request());
  const RunMetrics zero = compare_runs(full, same, none, {.sinks = 4});
  for (const LayerMaskMetrics& l : zero.layers) {
    EXPECT_EQ(l.resid_l1_mean(), 0.0);
    for (double x : l.head_l2) EXPECT_EQ(x, 0.0);
    for (double x : l.retained) EXPECT_EQ(x, 1.0);
    for (size_t i = 0; i < l.sink_raw.size(); ++i) EXPECT_NEAR(l.sink_raw[i], l.sink_full[i], 1e-7);
  }
  EXPECT_EQ(zero.delta_theta_total, 0.0);

  // Delta_theta of a span equals the sum of the per-position weights over it, and the
  // corrected masses equal the unmasked ones at the first masked layer.
  std::vector<int64_t> layers = {0}, heads;
  for (int64_t g = 0; g < m.config.n_kv_head; ++g) heads.push_back(g);
  const EvictionPlan plan = plan_from_spans({{6, 12}}, kC, kSeq, layers, heads, m.config.n_layer, m.config.n_kv_head, "t");
  MaskCapture masked(m.config, m.weights, eval_rows(), kC, &plan, {});
  ForwardRequest req = masked.request();
  req.mask = plan.to_mask(kSeq);
  fwd.run(tokens(), req);
  const RunMetrics rm = compare_runs(full, masked, plan, {.sinks = 4});
  const std::vector<double> w = delta_theta_weights(full, layers, heads);
  double want = 0;
  for (int64_t j = 6; j < 12; ++j) want += w[static_cast<size_t>(j)];
  EXPECT_NEAR(rm.delta_theta_total, want, 1e-9 * std::max(1.0, want));
  EXPECT_GT(want, 0);
  const LayerMaskMetrics& l0 = rm.layers[0];
  for (size_t i = 0; i < l0.sink_full.size(); ++i) {
    EXPECT_NEAR(l0.sink_corrected[i], l0.sink_full[i], 1e-6);
    EXPECT_LT(l0.retained[i], 1.0);
  }
  EXPECT_GT(rm.layers[0].resid_l2_mean(), 0.0);
}

TEST_P(MaskModels, MethodSelectedInsideThePassIsExactAndKeepsTheBudget) {
  const Model& m = tiny(GetParam());
  std::vector<int64_t> layers, heads;
  for (int64_t l = 0; l < m.config.n_layer; ++l) layers.push_back(l);
  for (int64_t g = 0; g < m.config.n_kv_head; ++g) heads.push_back(g);
  for (const char* method : {"attn", "snapkv", "criticalkv(snapkv)", "adakv(snapkv)", "streaming"}) {
    for (int64_t budget : {int64_t{4}, int64_t{14}}) {
      Keep keep;
      const EvictionPlan plan = run_method(m, method, budget, 8, keep);
      for (int64_t l = 0; l < m.config.n_layer; ++l) {
        int64_t kept = 0;
        for (int64_t g = 0; g < m.config.n_kv_head; ++g) kept += kC - static_cast<int64_t>(plan.at(l, g).size());
        EXPECT_EQ(kept, budget * m.config.n_kv_head) << method << " layer " << l;  // adakv: on average
      }
      double scale = 0;
      EXPECT_LE(physical_gap(m, keep, plan, scale), 2e-6 * std::max(1.0, scale)) << method;
    }
  }
  EvictionPlan plan = EvictionPlan::none(m.config.n_layer, m.config.n_kv_head, kC, kSeq);
  EXPECT_THROW(method_mask_source(m.config, m.weights, {.method = MethodSpec::parse("attn"), .budget = 0, .params = {},
                                  .c = kC, .eval_rows = eval_rows(), .layers = layers, .kv_heads = heads,
                                  .pool = nullptr, .layer_totals = {}}, &plan),
               InputError);
  EXPECT_THROW(parse_budget("0", kC), UsageError);
  EXPECT_THROW(parse_budget("28", kC), UsageError);  // counts go through --keep, as in bound
  EXPECT_THROW(parse_budget("1.0", kC), InputError);  // a fraction, as in bound: keeps all
  EXPECT_EQ(parse_budget("0.5", kC), 14);
  EXPECT_EQ(mask_budget("", 3, kC), 3);  // --keep 3
  EXPECT_THROW(mask_budget("", kC, kC), InputError);
}

INSTANTIATE_TEST_SUITE_P(Tiny, MaskModels, ::testing::Values("tiny_llama_gqa", "tiny_llama_tied", "tiny_qwen2_bias"));

// A model with sliding layers (tiny_qwen2_swa: layers 1-3, window 12; docs/MODELS.md
// "Sliding-window attention"): ckv mask's own recomputation (S, Theorem 3.2, the physically
// reduced cache) follows each row's window, and a method selected inside the pass keeps
// min(budget, held) entries among the 11 the first question row's window holds [17, 28).
TEST(MaskSliding, MetricsFollowTheWindowAndMethodsKeepWhatTheLayerHolds) {
  const Model& m = tiny("tiny_qwen2_swa");
  const int64_t nl = m.config.n_layer, nkv = m.config.n_kv_head, window = m.config.sliding_window;
  ASSERT_EQ(window, 12);
  ASSERT_EQ(m.config.window_of(0), 0);
  for (int64_t budget : {int64_t{3}, kC / 2, kC - 1}) {
    const EvictionPlan plan = random_plan(m, budget, 5 + static_cast<uint64_t>(budget));
    MaskCapture cap(m.config, m.weights, eval_rows(), kC, &plan, {.verify_physical = true});
    Forward fwd(m, {.threads = 1});
    ForwardRequest req = cap.request();
    req.mask = plan.to_mask(kSeq);
    fwd.run(tokens(), req);
    EXPECT_LE(cap.physical_max_diff, 2e-6 * std::max(1.0, cap.physical_max_abs)) << budget;
    for (double e : cap.renorm_err) EXPECT_LE(e, 1e-6) << budget;
    Keep keep;
    run(m, keep, &plan);
    double scale = 0;
    EXPECT_LE(physical_gap(m, keep, plan, scale), 2e-6 * std::max(1.0, scale)) << budget;
  }
  const int64_t held_from = kC - window + 1, held = kC - held_from;
  for (const char* method : {"snapkv", "criticalkv(snapkv)", "streaming", "h2o"})
    for (int64_t budget : {int64_t{5}, int64_t{14}}) {
      Keep keep;
      const EvictionPlan plan = run_method(m, method, budget, 4, keep);
      for (int64_t l = 0; l < nl; ++l)
        for (int64_t g = 0; g < nkv; ++g) {
          const std::vector<char> ev = plan.evicted_flags(l, g);
          int64_t kept = 0;
          for (int64_t i = 0; i < kC; ++i) {
            kept += ev[static_cast<size_t>(i)] ? 0 : 1;
            if (m.config.window_of(l) > 0 && i < held_from) {
              EXPECT_TRUE(ev[static_cast<size_t>(i)]) << method << " " << i;
            }
          }
          EXPECT_EQ(kept, m.config.window_of(l) > 0 ? std::min(budget, held) : budget) << method << " layer " << l;
        }
      double scale = 0;
      EXPECT_LE(physical_gap(m, keep, plan, scale), 2e-6 * std::max(1.0, scale)) << method;
    }
}

}  // namespace
}  // namespace ckv

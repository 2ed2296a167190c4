// Generation under eviction with a KV cache (analysis/cache_eval.h) against the two
// measurements it must agree with:
//   * the first decoded token's logits equal `ckv mask --method` with the same selection
//     (one -inf-masked pass over the whole prompt, the selection made inside it): physical
//     eviction from the cache is what the mask emulates;
//   * the per-layer, per-head L1/L2 at the first decoded token equal `ckv bound --eval
//     first-decode` for the same selection (analyze_layer over the unmasked pass of the
//     prompt and that token).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "analysis/bound_layer.h"
#include "analysis/cache_eval.h"
#include "analysis/layer_allocation.h"
#include "analysis/mask_plan.h"
#include "analysis/value_norms.h"
#include "output/eval_schema.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "keeping_recorder.h"
#include "logits_util.h"
#include "model/model.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;

const Model& model_named(const std::string& name) {
  static std::map<std::string, Model> models;
  auto it = models.find(name);
  if (it == models.end()) {
    const fs::path path = name == "default" ? fs::path(CKV_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
                                            : fs::path(CKV_TEST_DATA_DIR) / "models" / name;
    it = models.emplace(name, load_model(path)).first;
  }
  return it->second;
}

bool model_present(const std::string& name) {
  return name != "default" || fs::exists(fs::path(CKV_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf");
}

using test::random_tokens;
using test::relative_error;

struct CacheCase {
  std::string model;
  int64_t context, question;
};

class CacheEval : public ::testing::TestWithParam<CacheCase> {};

TEST_P(CacheEval, FirstTokenEqualsMaskAndPerturbationEqualsBound) {
  const CacheCase& k = GetParam();
  if (!model_present(k.model)) GTEST_SKIP() << "default model absent";
  const Model& model = model_named(k.model);
  const ModelConfig& cf = model.config;
  Forward fwd(model, {.threads = 2});
  ThreadPool pool(2);
  CacheEvalInput input;
  input.id = "t";
  input.prompt = random_tokens(k.context + k.question, cf.vocab, 21);
  input.context_end = k.context;
  input.answer_ids = random_tokens(3, cf.vocab, 22);
  CacheEvalSettings s;
  s.params.window = 8;
  for (const char* m : {"snapkv", "criticalkv(adakv(snapkv))", "attn", "streaming"}) s.methods.push_back(MethodSpec::parse(m));
  s.budgets = {0.25, 0.5};
  s.max_new_tokens = 4;
  s.ignore_eos = true;
  check_cache_eval_settings(s);
  const CacheEvalResult r = evaluate_with_cache(fwd, model, input, s, pool);
  ASSERT_EQ(r.runs.size(), 8u);
  const int64_t n = r.n, c = r.c;
  ASSERT_EQ(c, k.context);
  EXPECT_EQ(r.full.decoded.tokens.size(), 4u);
  // The full cache's kept entries: c per KV head, but a sliding layer of window W holds
  // only the W - 1 keys before the first reader at c (HF's window: W keys, itself included).
  int64_t full_kept = 0;
  for (int64_t l = 0; l < cf.n_layer; ++l)
    full_kept += cf.n_kv_head * (cf.window_of(l) > 0 ? std::min(c, cf.window_of(l) - 1) : c);
  EXPECT_EQ(r.full.kept_entries, full_kept);
  for (const CacheEvalRun& run : r.runs) EXPECT_LE(run.kept_entries, full_kept) << run.method;

  // The unmasked pass over the prompt and the probe's token: bound's first-decode inputs.
  std::vector<int32_t> with_token = input.prompt;
  with_token.push_back(r.first_token);
  test::KeepingRecorder rec;
  ForwardRequest req;
  req.record.qkv = true;
  req.recorder = &rec;
  fwd.run(with_token, req);

  for (const CacheEvalRun& run : r.runs) {
    SCOPED_TRACE(fmt::format("{} at {}", run.method, run.fraction));
    const MethodSpec method = MethodSpec::parse(run.method);
    // ckv mask --method: the selection inside one masked pass over the prompt.
    std::vector<int64_t> layers(static_cast<size_t>(cf.n_layer)), heads(static_cast<size_t>(cf.n_kv_head)), rows;
    std::iota(layers.begin(), layers.end(), 0);
    std::iota(heads.begin(), heads.end(), 0);
    for (int64_t i = c; i < n; ++i) rows.push_back(i);
    EvictionPlan plan = EvictionPlan::none(cf.n_layer, cf.n_kv_head, c, n);
    // The run's budget as eval gives it to the selection: with its fraction (Budget).
    const Budget budget = std::isnan(run.fraction) ? Budget(run.budget) : budget_of_fraction(c, run.fraction);
    const MethodMask mm{.method = method, .budget = budget, .params = s.params, .c = c, .eval_rows = rows,
                        .layers = layers, .kv_heads = heads, .pool = &pool, .layer_totals = {}};
    ForwardRequest masked;
    masked.layer_mask = method_mask_source(cf, model.weights, mm, &plan);
    const ForwardResult ref = fwd.run(input.prompt, masked);
    EXPECT_EQ(plan.evicted, run.plan.evicted);
    EXPECT_LE(relative_error(run.first_logits, ref.logits.span()), 1e-4);
    EXPECT_GT(run.first.kl, 0.0);

    // ckv bound --eval first-decode with this selection (the file method over the kept sets).
    for (int64_t l = 0; l < cf.n_layer; ++l) {
      const auto& L = rec.layers.at(l);
      const Tensor wo = model.weights.layers[static_cast<size_t>(l)].wo.to_f32();
      const ValueNorms nu = value_norms(L.v, wo, cf.n_head, {}, {.l1 = true, .l2 = true});
      const LayerTensors t{.q = &L.q, .k = &L.k, .v = &L.v, .wo = &wo, .nu_l1 = &nu.l1, .nu_l2 = &nu.l2};
      LayerRequest lr;
      lr.methods = {MethodSpec::parse("file")};
      lr.budgets = {budget};
      lr.c = c;
      lr.eval_rows = {n};
      lr.layer = l;
      lr.n_layer = cf.n_layer;
      lr.window = cf.window_of(l);  // a sliding layer: bound's attention is the window's
      for (int64_t g = 0; g < cf.n_kv_head; ++g) lr.file_kept.push_back(complement(run.plan.at(l, g), c));
      const LayerResult b = analyze_layer(t, lr);
      for (int64_t h = 0; h < cf.n_head; ++h) {
        const double l1 = b.at(0, 0, h, 0)[kL1], l2 = b.at(0, 0, h, 0)[kL2];
        EXPECT_NEAR(run.l1[static_cast<size_t>(l * cf.n_head + h)], l1, 1e-4 * std::max(1.0, l1)) << "layer " << l << " head " << h;
        EXPECT_NEAR(run.l2[static_cast<size_t>(l * cf.n_head + h)], l2, 1e-4 * std::max(1.0, l2)) << "layer " << l << " head " << h;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, CacheEval,
    ::testing::Values(CacheCase{"tiny_llama_gqa", 48, 6}, CacheCase{"tiny_qwen2_bias", 40, 5},
                      // layers 1-3 slide (window 12): eviction among the 11 held entries
                      CacheCase{"tiny_qwen2_swa", 40, 5}, CacheCase{"default", 160, 12}),
    [](const ::testing::TestParamInfo<CacheCase>& p) { return p.param.model; });

// --compress prompt: the whole prompt is evictable; the first row that reads the compressed
// cache is the first decoded token's, equal to a pass over prompt + that token with the
// evicted keys masked for its row only.
TEST(CacheEval, CompressPromptEqualsMaskOnTheDecodedRow) {
  const Model& model = model_named("tiny_llama_gqa");
  const ModelConfig& cf = model.config;
  Forward fwd(model, {.threads = 2});
  ThreadPool pool(2);
  CacheEvalInput input{.id = "p", .prompt = random_tokens(50, cf.vocab, 5), .context_end = 44, .answer_ids = {}};
  CacheEvalSettings s;
  s.params.window = 8;
  s.methods = {MethodSpec::parse("snapkv")};
  s.budgets = {0.3};
  s.compress_prompt = true;
  s.max_new_tokens = 3;
  s.ignore_eos = true;
  const CacheEvalResult r = evaluate_with_cache(fwd, model, input, s, pool);
  ASSERT_EQ(r.c, 50);
  const CacheEvalRun& run = r.runs.at(0);
  EXPECT_EQ(run.first_row, 50);
  std::vector<int32_t> with_token = input.prompt;
  with_token.push_back(r.first_token);
  ForwardRequest masked;
  masked.mask = run.plan.to_mask(51);
  const ForwardResult ref = fwd.run(with_token, masked);
  EXPECT_LE(relative_error(run.first_logits, ref.logits.span()), 1e-4);
  // The first generated token comes from the uncompressed prefill: the same as the full cache's.
  EXPECT_EQ(run.decoded.tokens.at(0), r.full.decoded.tokens.at(0));
}

// --track-steps: the full cache's answer teacher-forced over every cache. Each step's
// per-head L1/L2 equal `ckv bound`'s (analyze_layer, the file method over the run's kept
// sets) at that step's query over the unmasked pass of prompt + answer, step 1 equals the
// first-token probe, theta_hat bounds L1, and each step's next-token KL equals `ckv mask`'s:
// one -inf-masked pass over prompt + answer with the run's evictions.
class CacheEvalSteps : public ::testing::TestWithParam<bool> {};

TEST_P(CacheEvalSteps, EveryStepEqualsBoundAndMask) {
  const bool compress_prompt = GetParam();
  const Model& model = model_named(compress_prompt ? "tiny_qwen2_bias" : "tiny_llama_gqa");
  const ModelConfig& cf = model.config;
  Forward fwd(model, {.threads = 2});
  ThreadPool pool(2);
  CacheEvalInput input{.id = "s", .prompt = random_tokens(56, cf.vocab, 31), .context_end = 50, .answer_ids = {}};
  CacheEvalSettings s;
  s.params.window = 8;
  s.methods = {MethodSpec::parse("snapkv"), MethodSpec::parse("criticalkv(snapkv)")};
  s.budgets = {0.3};
  s.compress_prompt = compress_prompt;
  s.max_new_tokens = 6;
  s.track_steps = 5;
  s.ignore_eos = true;
  check_cache_eval_settings(s);
  const CacheEvalResult r = evaluate_with_cache(fwd, model, input, s, pool);
  const int64_t n = r.n, c = r.c, steps = 5;
  ASSERT_EQ(r.step_tokens.size(), 5u);
  EXPECT_TRUE(std::equal(r.step_tokens.begin(), r.step_tokens.end(), r.full.decoded.tokens.begin()));
  EXPECT_EQ(r.step_tokens[0], r.first_token);
  EXPECT_TRUE(r.full.step_next.empty());

  // The unmasked pass over prompt + answer: bound's inputs at every step's query.
  std::vector<int32_t> seq = input.prompt;
  seq.insert(seq.end(), r.step_tokens.begin(), r.step_tokens.end());
  test::KeepingRecorder rec;
  ForwardRequest req;
  req.record.qkv = true;
  req.recorder = &rec;
  req.logit_rows.resize(static_cast<size_t>(steps));
  std::iota(req.logit_rows.begin(), req.logit_rows.end(), n);
  const ForwardResult full = fwd.run(seq, req);
  const auto vocab = static_cast<size_t>(cf.vocab);
  const size_t per_step = static_cast<size_t>(cf.n_layer * cf.n_head);

  for (const CacheEvalRun& run : r.runs) {
    SCOPED_TRACE(fmt::format("{} at {}", run.method, run.fraction));
    ASSERT_EQ(run.step_next.size(), 5u);
    ASSERT_EQ(run.step_l1.size(), 5 * per_step);
    for (size_t i = 0; i < per_step; ++i) {  // step 1 is the first-token probe
      EXPECT_NEAR(run.step_l1[i], run.l1[i], 1e-5 * std::max(1.0f, run.l1[i]));
      EXPECT_NEAR(run.step_l2[i], run.l2[i], 1e-5 * std::max(1.0f, run.l2[i]));
    }
    for (size_t i = 0; i < run.step_l1.size(); ++i) {  // Theorem 3.5: theta_hat >= theta >= L1
      EXPECT_GE(run.step_theta_hat[i], run.step_l1[i] * (1 - 1e-5f) - 1e-6f) << i;
      EXPECT_GE(run.step_theta_hat_l2[i], run.step_l2[i] * (1 - 1e-5f) - 1e-6f) << i;
    }
    // ckv mask: the run's evictions as -inf logits for every row of prompt + answer that reads them.
    ForwardRequest masked;
    masked.mask = run.plan.to_mask(n + steps);
    masked.logit_rows = req.logit_rows;
    const ForwardResult ref = fwd.run(seq, masked);
    for (int64_t t = 0; t < steps; ++t) {
      const auto at = static_cast<size_t>(t) * vocab;
      const NextToken want = next_token(full.logits.span().subspan(at, vocab), ref.logits.span().subspan(at, vocab));
      EXPECT_NEAR(run.step_next[static_cast<size_t>(t)].kl, want.kl, 1e-4 * std::max(1e-2, want.kl)) << "step " << t + 1;
      EXPECT_EQ(run.step_next[static_cast<size_t>(t)].top1_masked, want.top1_masked) << "step " << t + 1;
    }
    EXPECT_GT(run.step_next.back().kl, 0.0);
    // ckv bound with the file method over this run's kept sets, at every step's query.
    for (int64_t l = 0; l < cf.n_layer; ++l) {
      const auto& L = rec.layers.at(l);
      const Tensor wo = model.weights.layers[static_cast<size_t>(l)].wo.to_f32();
      const ValueNorms nu = value_norms(L.v, wo, cf.n_head, {}, {.l1 = true, .l2 = true});
      const LayerTensors t{.q = &L.q, .k = &L.k, .v = &L.v, .wo = &wo, .nu_l1 = &nu.l1, .nu_l2 = &nu.l2};
      LayerRequest lr;
      lr.methods = {MethodSpec::parse("file")};
      lr.budgets = {Budget(run.budget)};
      lr.c = c;
      for (int64_t st = 0; st < steps; ++st) lr.eval_rows.push_back(n + st);
      lr.layer = l;
      lr.n_layer = cf.n_layer;
      lr.window = cf.window_of(l);  // a sliding layer: bound's attention is the window's
      for (int64_t g = 0; g < cf.n_kv_head; ++g) lr.file_kept.push_back(complement(run.plan.at(l, g), c));
      const LayerResult b = analyze_layer(t, lr);
      for (int64_t st = 0; st < steps; ++st)
        for (int64_t h = 0; h < cf.n_head; ++h) {
          const size_t at = static_cast<size_t>((st * cf.n_layer + l) * cf.n_head + h);
          const double l1 = b.at(0, 0, h, st)[kL1], l2 = b.at(0, 0, h, st)[kL2];
          EXPECT_NEAR(run.step_l1[at], l1, 1e-4 * std::max(1.0, l1)) << "step " << st + 1 << " layer " << l << " head " << h;
          EXPECT_NEAR(run.step_l2[at], l2, 1e-4 * std::max(1.0, l2)) << "step " << st + 1 << " layer " << l << " head " << h;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Compress, CacheEvalSteps, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "prompt" : "context"; });

TEST(CacheEval, RefusesWhatACacheCannotDo) {
  CacheEvalSettings s;
  s.budgets = {0.5};
  s.methods = {MethodSpec::parse("oracle")};
  EXPECT_THROW(check_cache_eval_settings(s), UsageError);
  s.methods = {MethodSpec::parse("attn")};
  s.compress_prompt = true;
  EXPECT_THROW(check_cache_eval_settings(s), UsageError);
  s.compress_prompt = false;
  s.budgets = {1.0};
  EXPECT_THROW(check_cache_eval_settings(s), UsageError);
  s.budgets = {0.5};
  s.methods = {MethodSpec::parse("file")};
  EXPECT_THROW(check_cache_eval_settings(s), UsageError);
  s.methods = {MethodSpec::parse("snapkv")};
  s.max_new_tokens = 4;
  s.track_steps = 5;  // more steps than the answer may have
  EXPECT_THROW(check_cache_eval_settings(s), UsageError);
  s.track_steps = -1;
  EXPECT_THROW(check_cache_eval_settings(s), UsageError);
  s.track_steps = 4;
  EXPECT_NO_THROW(check_cache_eval_settings(s));
}

}  // namespace
}  // namespace ckv

namespace ckv {
namespace {

// Every method `ckv mask --method` runs in its pass gives, inside `ckv eval`'s cache, the same
// evicted sets and the same first-token logits (layer-global allocations from the same
// pre-pass; DuoAttention from a head pattern).
class CacheEvalMethods : public ::testing::TestWithParam<std::string> {};

TEST_P(CacheEvalMethods, EqualMaskMethod) {
  const Model& model = model_named("tiny_llama_gqa");
  const ModelConfig& cf = model.config;
  Forward fwd(model, {.threads = 2});
  ThreadPool pool(2);
  CacheEvalInput input{.id = "m", .prompt = random_tokens(70, cf.vocab, 9), .context_end = 64, .answer_ids = {}};
  CacheEvalSettings s;
  s.params.window = 8;
  s.params.h2o_rows = 16;
  s.params.duo_sink = 4;
  s.params.duo_recent = 8;
  auto pattern = std::make_shared<std::vector<std::vector<double>>>();
  for (int64_t l = 0; l < cf.n_layer; ++l) {
    pattern->emplace_back();
    for (int64_t g = 0; g < cf.n_kv_head; ++g) pattern->back().push_back(static_cast<double>((l * 7 + g * 3) % 5) / 4.0);
  }
  s.params.duo_pattern = pattern;
  s.methods = {MethodSpec::parse(GetParam())};
  s.budgets = {0.3};
  s.max_new_tokens = 2;
  s.ignore_eos = true;
  const CacheEvalResult r = evaluate_with_cache(fwd, model, input, s, pool);
  const CacheEvalRun& run = r.runs.at(0);
  const int64_t c = r.c, n = r.n;
  std::vector<int64_t> layers(static_cast<size_t>(cf.n_layer)), heads(static_cast<size_t>(cf.n_kv_head)), rows;
  std::iota(layers.begin(), layers.end(), 0);
  std::iota(heads.begin(), heads.end(), 0);
  for (int64_t i = c; i < n; ++i) rows.push_back(i);
  const Budget budget = budget_of_fraction(c, run.fraction);  // as eval gives it to the selection
  MethodMask mm{.method = s.methods[0], .budget = budget, .params = s.params, .c = c, .eval_rows = rows,
                .layers = layers, .kv_heads = heads, .pool = &pool, .layer_totals = {}};
  if (mm.method.layer_global()) {
    DefensiveCollector col(model.weights, cf.n_head, c, s.params, &pool);
    ForwardRequest pre;
    pre.record.qkv = true;
    pre.recorder = &col;
    fwd.run(std::span(input.prompt).first(static_cast<size_t>(c)), pre);
    mm.layer_totals = col.totals(budget);
  }
  EvictionPlan plan = EvictionPlan::none(cf.n_layer, cf.n_kv_head, c, n);
  ForwardRequest masked;
  masked.layer_mask = method_mask_source(cf, model.weights, mm, &plan);
  const ForwardResult ref = fwd.run(input.prompt, masked);
  EXPECT_EQ(plan.evicted, run.plan.evicted);
  EXPECT_FALSE(run.plan.empty());
  EXPECT_LE(relative_error(run.first_logits, ref.logits.span()), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Methods, CacheEvalMethods,
                         ::testing::Values("h2o", "adakv(snapkv)", "criticalkv(h2o)", "pyramidkv", "defensivekv",
                                           "layer-defensivekv", "duoattention", "criticalkv(attn)", "adakv(attn)",
                                           "expectedattention", "criticalkv(expectedattention)", "obcache",
                                           "adakv(obcache)"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string name;
                           for (char ch : p.param) name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return name;
                         });

}  // namespace
}  // namespace ckv

namespace ckv {
namespace {

// Spearman's rho with average ranks for ties: scipy.stats.spearmanr's documented example
// ([1..5] vs [5, 6, 7, 8, 7]: 0.8207826816681233), a perfect inverse order, and the
// undefined cases.
TEST(EvalSummary, SpearmanAsScipy) {
  EXPECT_NEAR(spearman({1, 2, 3, 4, 5}, {5, 6, 7, 8, 7}), 0.8207826816681233, 1e-12);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {40, 30, 20, 10}), -1.0, 1e-12);
  EXPECT_TRUE(std::isnan(spearman({1, 2}, {2, 1})));
  EXPECT_TRUE(std::isnan(spearman({1, 2, 3}, {4, 4, 4})));
}

}  // namespace
}  // namespace ckv

// Selections against kvpress (SnapKVPress, CriticalKVPress, AdaKVPress, CriticalAdaKVPress)
// and the perturbation metrics against a float64 NumPy implementation of docs/MATH.md §3, both
// from tests/data/kvpress/selection_v1.h5 (tests/reference/make_kvpress_goldens.py); and
// kvpress run on tiny Qwen3, Phi-3, Qwen3-MoE and Gemma 3 models against ckv's forward pass and selections on the
// same tokens (tests/data/kvpress/families_v1.h5).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "analysis/bound_layer.h"
#include "analysis/perturbation.h"
#include "analysis/selection.h"
#include "analysis/value_norms.h"
#include "io/h5.h"
#include "keeping_recorder.h"
#include "model/forward.h"
#include "model/model.h"

namespace ckv {
namespace {

const std::filesystem::path kSelectionGolden =
    std::filesystem::path(CKV_TEST_DATA_DIR) / "kvpress/selection_v1.h5";

Tensor read_tensor(const h5::Group& g, const std::string& name) {
  const h5::Dataset ds = g.open_dataset(name);
  return Tensor(ds.shape(), ds.read<float>());
}

struct GoldenCase {
  Tensor q, k, v, wo;
  ValueNorms nu;
  LayerRequest request;
};

GoldenCase load_case(const h5::Group& g) {
  GoldenCase c;
  c.q = read_tensor(g, "q");
  c.k = read_tensor(g, "k");
  c.v = read_tensor(g, "v");
  c.wo = read_tensor(g, "wo");
  c.nu = value_norms(c.v, c.wo, c.q.dim(0), {});
  c.request.c = g.attr_int("c");
  c.request.eval_rows = evaluation_rows(c.request.c, g.attr_int("n"));
  c.request.params.window = g.attr_int("window");
  c.request.params.kernel = g.attr_int("kernel");
  c.request.params.pool = g.attr_string("pool") == "max" ? PoolKind::Max : PoolKind::Avg;
  c.request.params.alpha = g.attr_double("alpha");
  c.request.params.eps = g.attr_double("eps");
  c.request.params.alpha_safe = g.attr_double("alpha_safe");
  return c;
}

void expect_scores(const ScoreMatrix& ours, const h5::Dataset& ds, const std::string& what) {
  const std::vector<double> ref = ds.read<double>();
  ASSERT_EQ(ours.size(), static_cast<int64_t>(ref.size())) << what;
  for (int64_t i = 0; i < ours.size(); ++i) {
    const double r = ref[static_cast<size_t>(i)];
    // Both sides compute in float64 from the same float32 inputs: only summation order differs.
    EXPECT_NEAR(ours.data()[i], r, 1e-9 + 1e-9 * std::abs(r)) << what << " entry " << i;
  }
}

TEST(BoundGolden, SelectionsMatchKvpress) {
  h5::File f = h5::File::open_read(kSelectionGolden);
  ASSERT_EQ(f.attr_int("format_version"), 1);
  const h5::Group cases = f.open_group("cases");
  int compared = 0;
  for (const std::string& name : cases.children()) {
    const h5::Group g = cases.open_group(name);
    GoldenCase c = load_case(g);
    LayerTensors t{&c.q, &c.k, &c.v, &c.wo, &c.nu.l1, &c.nu.l2};
    const SelectionInputs in = selection_inputs(t, c.request, true, false);
    expect_scores(in.snapkv, g.open_dataset("snapkv_scores"), name + " snapkv scores");
    expect_scores(in.attn, g.open_dataset("fixed_scores"), name + " attn scores");
    const h5::Group kept = g.open_group("kept");
    for (const std::string& method : kept.children()) {
      const MethodSpec spec = MethodSpec::parse(method);
      const h5::Group per_budget = kept.open_group(method);
      for (const std::string& b : per_budget.children()) {
        const h5::Dataset ds = per_budget.open_dataset(b);
        const std::vector<int32_t> mask = ds.read<int32_t>();
        const Selection s = select(spec, in, std::stoll(b), c.request.params);
        std::vector<int32_t> ours(mask.size(), 0);
        for (size_t gi = 0; gi < s.kept.size(); ++gi)
          for (int64_t i : s.kept[gi]) ours[gi * static_cast<size_t>(c.request.c) + static_cast<size_t>(i)] = 1;
        EXPECT_EQ(ours, mask) << name << " " << method << " budget " << b;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 40);
}

// kvpress's presses ran inside HF's prefill of each tiny model; ckv's own forward pass gives
// q/k/v here and ckv's selections must keep the same positions in every layer and KV head.
// Returns how many (model, layer, method, budget) kept sets were compared.
int compare_model_cases(const std::string& file) {
  const std::filesystem::path golden = std::filesystem::path(CKV_TEST_DATA_DIR) / "kvpress" / file;
  h5::File f = h5::File::open_read(golden);
  if (f.attr_int("format_version") != 1) { ADD_FAILURE() << file << ": format_version"; return 0; }
  const h5::Group cases = f.open_group("model_cases");
  int compared = 0;
  for (const std::string& name : cases.children()) {
    SCOPED_TRACE(name);
    const h5::Group g = cases.open_group(name);
    const Model model = load_model(std::filesystem::path(CKV_TEST_DATA_DIR) / g.attr_string("model"));
    const std::vector<int32_t> tokens = g.open_dataset("tokens").read<int32_t>();
    const int64_t c = g.attr_int("c");
    if (static_cast<int64_t>(tokens.size()) != c) { ADD_FAILURE() << name << ": tokens"; continue; }
    test::KeepingRecorder rec;
    ForwardRequest req;
    req.recorder = &rec;
    req.record.qkv = true;
    Forward(model, {.threads = 2}).run(tokens, req);
    LayerRequest request;
    request.c = c;
    request.eval_rows = evaluation_rows(c, c);
    request.params.window = g.attr_int("window");
    request.params.kernel = g.attr_int("kernel");
    request.params.pool = PoolKind::Avg;
    request.params.alpha = g.attr_double("alpha");
    request.params.eps = g.attr_double("eps");
    request.params.alpha_safe = g.attr_double("alpha_safe");
    const h5::Group kept = g.open_group("kept");
    for (const std::string& method : kept.children()) request.methods.push_back(MethodSpec::parse(method));
    // The layers of the kept sets (every layer; Gemma 3: its full-attention ones).
    std::vector<int64_t> layers;
    if (g.has_attr("layers")) layers = g.attr_ints("layers");
    else for (int64_t l = 0; l < model.config.n_layer; ++l) layers.push_back(l);
    for (size_t li = 0; li < layers.size(); ++li) {
      const int64_t l = layers[li];
      EXPECT_EQ(model.config.window_of(l), 0) << "layer " << l;
      const test::KeepingRecorder::Layer& layer = rec.layers.at(l);
      const Tensor wo = model.weights.layers[static_cast<size_t>(l)].wo.to_f32();
      const ValueNorms nu = value_norms(layer.v, wo, model.config.n_head, {});
      LayerTensors t{&layer.q, &layer.k, &layer.v, &wo, &nu.l1, &nu.l2};
      const SelectionInputs in = selection_inputs(t, request, true, false);
      for (const std::string& method : kept.children()) {
        const MethodSpec spec = MethodSpec::parse(method);
        const h5::Group per_budget = kept.open_group(method);
        for (const std::string& b : per_budget.children()) {
          const std::vector<int32_t> all = per_budget.open_dataset(b).read<int32_t>();  // [n_layer, n_kv, c]
          const auto per_layer = static_cast<size_t>(model.config.n_kv_head * c);
          const std::vector<int32_t> mask(all.begin() + static_cast<std::ptrdiff_t>(li * per_layer),
                                          all.begin() + static_cast<std::ptrdiff_t>((li + 1) * per_layer));
          const Selection s = select(spec, in, std::stoll(b), request.params);
          std::vector<int32_t> ours(per_layer, 0);
          for (size_t gi = 0; gi < s.kept.size(); ++gi)
            for (int64_t i : s.kept[gi]) ours[gi * static_cast<size_t>(c) + static_cast<size_t>(i)] = 1;
          EXPECT_EQ(ours, mask) << name << " layer " << l << " " << method << " budget " << b;
          ++compared;
        }
      }
    }
  }
  return compared;
}

TEST(BoundGolden, FamilySelectionsMatchKvpress) {
  const int compared = compare_model_cases("families_v1.h5");
  EXPECT_EQ(compared, 4 * 2 * 4 * 3);  // models x compared layers x presses x budgets
}

// knorm and keydiff (layer_scores.h) alone and under criticalkv/adakv, against kvpress's
// KnormPress and KeyDiffPress in HF's prefill (tests/reference/make_scorer_goldens.py).
TEST(BoundGolden, KeyScorerSelectionsMatchKvpress) {
  const int compared = compare_model_cases("scorers_v1.h5");
  // tiny_llama_gqa 2 layers x 3 budgets, tiny_qwen3 2 x 1 (near-ties skipped), tiny_gemma3_kv 2 x 3; 5 presses.
  EXPECT_EQ(compared, (2 * 3 + 2 * 1 + 2 * 3) * 5);
}

TEST(BoundGolden, MetricsMatchNumpy) {
  h5::File f = h5::File::open_read(kSelectionGolden);
  const h5::Group all = f.open_group("perturb");
  int compared = 0;
  for (const std::string& name : all.children()) {
    const h5::Group g = all.open_group(name);
    const std::vector<double> attn = g.open_dataset("attn").read<double>();
    const std::vector<int32_t> keep32 = g.open_dataset("keep").read<int32_t>();
    const std::vector<int32_t> stage32 = g.open_dataset("stage1").read<int32_t>();
    const Tensor v = read_tensor(g, "v"), wo = read_tensor(g, "wo");
    const std::vector<double> nu1d = g.open_dataset("nu_l1").read<double>();
    const std::vector<double> nu2d = g.open_dataset("nu_l2").read<double>();
    const std::vector<double> ref = g.open_dataset("metrics").read<double>();
    std::vector<char> keep(keep32.begin(), keep32.end()), stage1(stage32.begin(), stage32.end());
    std::vector<float> nu1(nu1d.begin(), nu1d.end()), nu2(nu2d.begin(), nu2d.end());
    HeadQueryInput in;
    in.attn = attn;
    in.keep = keep;
    in.stage1 = stage1;
    in.nu_l1 = nu1;
    in.nu_l2 = nu2;
    in.v = v.data();
    in.wo = wo.data();
    in.d_head = v.dim(1);
    in.d_model = wo.dim(0);
    in.n_head = wo.dim(1) / v.dim(1);
    in.head = g.attr_int("head");
    const int64_t c = g.attr_int("c");
    for (int64_t i = 0; i < c; ++i) in.kept += keep[static_cast<size_t>(i)];
    const MetricRow m = perturbation(in);
    // The golden holds the first 15 metrics (L1 .. kept); the nu_min readings are checked
    // against tests/data/protocol (test_protocol_golden.cpp).
    ASSERT_EQ(ref.size(), static_cast<size_t>(kKept + 1));
    for (int k = 0; k <= kKept; ++k) {
      // nu passes through float32 here (as value_norms gives it): 1e-5 relative, with an
      // absolute floor of 3e-7 C for the bounds, which are differences of O(C) terms.
      const double scale = std::max({std::abs(ref[static_cast<size_t>(k)]), 3e-2 * ref[kValueMass], 1e-12});
      EXPECT_NEAR(m[static_cast<size_t>(k)], ref[static_cast<size_t>(k)], 1e-5 * scale)
          << "case " << name << " metric " << kMetricNames[static_cast<size_t>(k)];
    }
    ++compared;
  }
  EXPECT_EQ(compared, 40);
}

}  // namespace
}  // namespace ckv

// ckv mask's eviction against HF transformers (tests/reference/make_mask_goldens.py writes
// tests/data/mask/hf_masks_v1.h5: eager attention under the equivalent additive mask). Each
// golden case's eviction is rebuilt through the code `ckv mask` uses: --spans/--layers/
// --heads (parse_spans, plan_from_spans) when the case has spans, a selection file
// (plan_from_selection_file) otherwise, then EvictionPlan::to_mask. The masked forward pass
// must match with issue 2's tolerances: residuals <= 1e-4 x the reference's largest
// magnitude, attention probabilities of the evaluation rows <= 1e-5 absolute, logits
// <= 1e-3 x the row's range with the same argmax. A plan off by one position per head must
// fail them, so the comparison can fail.
#include <gtest/gtest.h>

#include "keeping_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/mask_plan.h"
#include "golden_file.h"
#include "model/forward.h"
#include "model/model.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;

const fs::path kHfMasksGolden = fs::path(CKV_TEST_DATA_DIR) / "mask" / "hf_masks_v1.h5";

std::vector<int64_t> as_vector(const test::Array<int32_t>& a) { return {a.data.begin(), a.data.end()}; }

// The golden's kept mask [n_layer, n_kv_head, c] (1 kept, 0 evicted) as ckv's
// selection-file JSON: one "kept" list per KV head for each layer that evicts anything.
fs::path write_selection_file(const test::Array<int32_t>& kept, const std::string& name) {
  const int64_t n_layer = kept.shape[0], n_kv = kept.shape[1], c = kept.shape[2];
  nlohmann::json layers = nlohmann::json::object();
  for (int64_t l = 0; l < n_layer; ++l) {
    nlohmann::json heads = nlohmann::json::array();
    bool evicts = false;
    for (int64_t g = 0; g < n_kv; ++g) {
      std::vector<int64_t> positions;
      for (int64_t i = 0; i < c; ++i) {
        if (kept.data[static_cast<size_t>((l * n_kv + g) * c + i)] != 0) positions.push_back(i);
        else evicts = true;
      }
      heads.push_back(positions);
    }
    if (evicts) layers[std::to_string(l)] = {{"kept", heads}};
  }
  const nlohmann::json j = {{"format", "ckv.selection"}, {"format_version", 1}, {"c", c}, {"layers", layers}};
  const fs::path path = fs::temp_directory_path() / fmt::format("ckv_mask_hf_{}_{}.json", ::getpid(), name);
  std::ofstream(path) << j.dump();
  return path;
}

// The plan `ckv mask` would build for this case.
EvictionPlan plan_of_case(const test::GoldenFile& g, const std::string& group, const ModelConfig& cf,
                          int64_t c, int64_t seq, const std::string& name) {
  const auto kept = g.ints(group + "/kept");  // [n_layer, n_kv_head, c]
  EXPECT_EQ(kept.shape, (std::vector<int64_t>{cf.n_layer, cf.n_kv_head, c}));
  EvictionPlan plan;
  if (g.has_attr(group, "spans")) {
    plan = plan_from_spans(parse_spans(g.attr_string(group, "spans"), "--spans"), c, seq,
                           as_vector(g.ints(group + "/span_layers")),
                           as_vector(g.ints(group + "/span_kv_heads")), cf.n_layer, cf.n_kv_head, "--spans");
  } else {
    std::vector<int64_t> layers, heads;
    for (int64_t l = 0; l < cf.n_layer; ++l) layers.push_back(l);
    for (int64_t h = 0; h < cf.n_kv_head; ++h) heads.push_back(h);
    const fs::path file = write_selection_file(kept, name);
    plan = plan_from_selection_file(file, c, seq, layers, heads, cf.n_layer, cf.n_kv_head);
    fs::remove(file);
  }
  // Whichever way it was built, it evicts exactly what transformers was told to.
  for (int64_t l = 0; l < cf.n_layer; ++l)
    for (int64_t h = 0; h < cf.n_kv_head; ++h) {
      const std::vector<char> ev = plan.evicted_flags(l, h);
      for (int64_t i = 0; i < c; ++i)
        EXPECT_EQ(ev[static_cast<size_t>(i)] != 0, kept.data[static_cast<size_t>((l * cf.n_kv_head + h) * c + i)] == 0)
            << group << " layer " << l << " KV head " << h << " position " << i;
    }
  return plan;
}

// Worst error / tolerance over residuals, attention rows and logits (infinity for an argmax
// that differs); each quantity's worst goes to `detail` for the failure message.
double worst_ratio(const Model& m, std::span<const int32_t> tokens, const EvictionPlan& plan,
                   const std::vector<int64_t>& eval_rows, const test::GoldenFile& g,
                   const std::string& group, std::string& detail) {
  const int64_t seq = static_cast<int64_t>(tokens.size());
  Forward fwd(m, {.threads = 2, .query_block = 5});
  test::KeepingRecorder rec;
  ForwardRequest req;
  req.recorder = &rec;
  req.record.attn_rows = eval_rows;
  req.record.residual = true;
  for (int64_t i = 0; i < seq; ++i) req.logit_rows.push_back(i);
  req.mask = plan.to_mask(seq);
  const ForwardResult res = fwd.run(tokens, req);

  const auto max_error = [](const Tensor& ours, const test::Array<float>& ref, double& scale) {
    EXPECT_EQ(ours.shape(), ref.shape);
    if (ours.shape() != ref.shape) return double{INFINITY};
    double worst = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      worst = std::max(worst, double{std::abs(ours.data()[i] - ref.data[static_cast<size_t>(i)])});
      scale = std::max(scale, double{std::abs(ref.data[static_cast<size_t>(i)])});
    }
    return worst;
  };
  double resid = 0, attn = 0, logits = 0;
  for (int64_t l = 0; l < m.config.n_layer; ++l) {
    const std::string lg = fmt::format("{}/layers/{}", group, l);
    double scale = 0, unused = 0;
    const double e = max_error(rec.layers[l].resid, g.floats(lg + "/resid"), scale);
    resid = std::max(resid, e / (1e-4 * scale));
    attn = std::max(attn, max_error(rec.layers[l].attn, g.floats(lg + "/attn"), unused) / 1e-5);
  }
  const auto ref = g.floats(group + "/logits");  // [seq, vocab]
  EXPECT_EQ(res.logits.shape(), ref.shape);
  if (res.logits.shape() != ref.shape) return INFINITY;
  const int64_t vocab = ref.shape[1];
  for (int64_t r = 0; r < seq; ++r) {
    const Eigen::Map<const Eigen::VectorXf> theirs(ref.data.data() + r * vocab, vocab);
    const auto ours = res.logits.matrix().row(r);
    const double range = theirs.maxCoeff() - theirs.minCoeff();
    logits = std::max(logits, double{(ours.transpose() - theirs).cwiseAbs().maxCoeff()} / (1e-3 * range));
    Eigen::Index a = 0, b = 0;
    ours.maxCoeff(&a);
    theirs.maxCoeff(&b);
    if (a != b) logits = INFINITY;
  }
  detail = fmt::format("resid {:.3g}, attn {:.3g}, logits {:.3g}", resid, attn, logits);
  return std::max({resid, attn, logits});
}

// The plan with the first evicted position of every (layer, KV head) kept instead: an
// off-by-one in span bounds or head mapping that the comparison must catch.
EvictionPlan off_by_one(EvictionPlan plan) {
  for (auto& layer : plan.evicted)
    for (auto& head : layer)
      if (!head.empty()) head.erase(head.begin());
  return plan;
}

TEST(MaskHf, MatchesTransformersEagerWithAdditiveMasks) {
  if (!fs::exists(kHfMasksGolden)) GTEST_SKIP() << kHfMasksGolden << " not generated";
  const test::GoldenFile g(kHfMasksGolden);
  ASSERT_EQ(g.attr_int("/", "format_version"), 1);
  const int64_t c = g.attr_int("/", "c");
  int checked = 0;
  for (const std::string& model : g.members("/")) {
    const fs::path path = fs::path(CKV_TEST_DATA_DIR) / g.attr_string("/" + model, "model");
    const Model m = load_model(path);
    ASSERT_EQ(m.config.n_kv_head, g.attr_int("/" + model, "n_kv_head"));
    const auto tokens = g.ints("/" + model + "/tokens").data;
    const std::vector<int64_t> eval_rows = as_vector(g.ints("/" + model + "/eval_rows"));
    const int64_t seq = static_cast<int64_t>(tokens.size());
    ASSERT_EQ(eval_rows.front(), c);
    for (const std::string& name : g.members("/" + model + "/cases")) {
      const std::string group = "/" + model + "/cases/" + name;
      SCOPED_TRACE(group + " (transformers mask via " + g.attr_string(group, "via") + ")");
      const EvictionPlan plan = plan_of_case(g, group, m.config, c, seq, model + "_" + name);
      ASSERT_FALSE(plan.empty());
      std::string detail;
      EXPECT_LE(worst_ratio(m, tokens, plan, eval_rows, g, group, detail), 1.0) << "error / tolerance: " << detail;
      RecordProperty(model + "/" + name, detail);  // in --gtest_output=xml, for the README
      EXPECT_GT(worst_ratio(m, tokens, off_by_one(plan), eval_rows, g, group, detail), 1.0)
          << "a wrong mask passes: " << detail;
      RecordProperty(model + "/" + name + "/off_by_one", detail);
      ++checked;
    }
  }
  EXPECT_GE(checked, 8);
}

}  // namespace
}  // namespace ckv

// DefensiveKV and Layer-DefensiveKV selections against the official presses of
// github.com/FFY0/DefensiveKV (their torch path, float64, CPU) and, for the two readings
// the official code does not implement, a NumPy implementation checked against it;
// PyramidKV against kvpress 0.5.5's PyramidKVPress: from
// tests/data/kvpress/methods_v1.h5 (tests/reference/make_methods_goldens.py). Cases:
// synthetic GQA/MHA tensors, and the q/k/v of the default model and tiny_llama_gqa on a
// text no other test uses. ExpectedAttention (plain, adakv(...), criticalkv(...)) against
// kvpress 0.5.5's ExpectedAttentionPress: tests/data/kvpress/expected_attention_v1.h5
// (tests/reference/make_expected_attention_goldens.py). HeadKV against a NumPy
// implementation of its code's allocation: tests/data/kvpress/headkv_v1.h5
// (tests/reference/make_headkv_goldens.py); its retrieval-score profile on constructed cases.
// OBCache on SnapKV's window against a NumPy implementation of its scores:
// tests/data/kvpress/obcache_v1.h5 (tests/reference/make_obcache_goldens.py). Both on
// synthetic tensors, tiny_llama_gqa and the default model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "analysis/bound_layer.h"
#include "analysis/defensivekv.h"
#include "analysis/expected_attention.h"
#include "analysis/headkv.h"
#include "analysis/selection.h"
#include "core/error.h"
#include "io/h5.h"

namespace ckv {
namespace {

const std::filesystem::path kMethodsGolden =
    std::filesystem::path(CKV_TEST_DATA_DIR) / "kvpress/methods_v1.h5";

Tensor read_tensor(const h5::Group& g, const std::string& name) {
  const h5::Dataset ds = g.open_dataset(name);
  return Tensor(ds.shape(), ds.read<float>());
}

// "defensivekv:share=window,nu=positions" -> the method and its readings.
SelectionParams params_for(const std::string& label, const h5::Group& c) {
  SelectionParams p;
  p.window = c.attr_int("window");
  p.defensive_kernel = c.attr_int("kernel");
  p.kernel = c.attr_int("kernel");
  p.pool = PoolKind::Avg;
  p.pyramid_beta = c.attr_double("pyramid_beta");
  p.duo_sink = c.attr_int("duo_sink");
  p.duo_recent = c.attr_int("duo_recent");
  const std::vector<double> duo = c.open_dataset("duo_scores").read<double>();  // [n_layer, n_kv_head]
  const int64_t n_layer = c.attr_int("n_layer"), n_kv = static_cast<int64_t>(duo.size()) / n_layer;
  auto pattern = std::make_shared<std::vector<std::vector<double>>>();
  for (int64_t l = 0; l < n_layer; ++l)
    pattern->emplace_back(duo.begin() + l * n_kv, duo.begin() + (l + 1) * n_kv);
  p.duo_pattern = pattern;
  if (label.find("share=window") != std::string::npos) p.defensive_share = DefensiveShare::Window;
  if (label.find("nu=positions") != std::string::npos) p.defensive_nu = DefensiveNu::AcrossPositions;
  if (const size_t at = label.find("mass="); at != std::string::npos) p.defensive_mass = std::stod(label.substr(at + 5));
  return p;
}

struct LayerCase {
  int64_t layer = 0;
  Tensor q, k, v, wo, nu;  // wo: only its first dimension is read
  h5::Group group;
};

std::vector<int32_t> mask_of(const Selection& s, int64_t c) {
  std::vector<int32_t> out(s.kept.size() * static_cast<size_t>(c), 0);
  for (size_t g = 0; g < s.kept.size(); ++g)
    for (int64_t i : s.kept[g]) out[g * static_cast<size_t>(c) + static_cast<size_t>(i)] = 1;
  return out;
}

// A case's budgets as a user gives them (its fractions; the references receive the ratio
// 1 - f), each checked to keep the case's kept-per-head count (kvpress's compute_n_kept).
std::vector<Budget> budgets_of(const h5::Group& cg) {
  const int64_t c = cg.attr_int("c");
  const std::vector<double> fractions = cg.attr_doubles("fractions");
  const std::vector<int64_t> kept = cg.attr_ints("budgets");
  EXPECT_EQ(fractions.size(), kept.size());
  std::vector<Budget> out;
  for (size_t i = 0; i < fractions.size() && i < kept.size(); ++i) {
    out.push_back(budget_of_fraction(c, fractions[i]));
    EXPECT_EQ(out.back().kept, kept[i]) << cg.where() << " fraction " << fractions[i];
  }
  return out;
}

TEST(MethodsGolden, DefensiveKvMatchesOfficialCode) {
  h5::File f = h5::File::open_read(kMethodsGolden);
  ASSERT_EQ(f.attr_int("format_version"), 1);
  const h5::Group cases = f.open_group("cases");
  int compared = 0, layer_global = 0;
  for (const std::string& name : cases.children()) {
    const h5::Group cg = cases.open_group(name);
    const int64_t c = cg.attr_int("c"), n = cg.attr_int("n");
    std::vector<LayerCase> layers;
    for (const std::string& l : cg.open_group("layers").children()) {
      LayerCase lc;
      lc.layer = std::stoll(l);
      lc.group = cg.open_group("layers/" + l);
      lc.q = read_tensor(lc.group, "q");
      lc.k = read_tensor(lc.group, "k");
      lc.v = read_tensor(lc.group, "v");
      lc.wo = Tensor({1, lc.q.dim(0) * lc.q.dim(2)});
      // nu_l1 [n_head, c] float64 -> [n_head, n] as LayerTensors holds it.
      const std::vector<double> nu = lc.group.open_dataset("nu_l1").read<double>();
      lc.nu = Tensor({lc.q.dim(0), n});
      for (int64_t h = 0; h < lc.q.dim(0); ++h)
        for (int64_t i = 0; i < c; ++i)
          lc.nu.data()[h * n + i] = static_cast<float>(nu[static_cast<size_t>(h * c + i)]);
      layers.push_back(std::move(lc));
    }
    // Every label's scores per layer, then each budget's selection.
    std::map<std::string, std::vector<std::shared_ptr<const DefensiveScores>>> scores;
    for (const LayerCase& lc : layers)
      for (const std::string& label : lc.group.open_group("kept").children()) {
        if (label == "pyramidkv" || label == "duoattention") continue;
        LayerTensors t{&lc.q, &lc.k, &lc.v, &lc.wo, &lc.nu, nullptr};
        LayerRequest r;
        r.methods = {MethodSpec::parse("defensivekv")};
        r.params = params_for(label, cg);
        r.c = c;
        r.eval_rows = evaluation_rows(c, n);
        scores[label].push_back(selection_inputs(t, r, false, false).defensive);
      }
    const std::vector<Budget> budgets = budgets_of(cg);
    const std::vector<int64_t> totals = cg.open_dataset("layer_totals").read<int64_t>();        // [budget, layer]
    const std::vector<int32_t> determined = cg.open_dataset("layer_determined").read<int32_t>();  // [budget, layer]
    for (size_t li = 0; li < layers.size(); ++li) {
      const h5::Group kept = layers[li].group.open_group("kept");
      for (const std::string& label : kept.children()) {
        if (label == "pyramidkv" || label == "duoattention") continue;
        const bool global = label == "layer-defensivekv";
        const MethodSpec spec = MethodSpec::parse(global ? "layer-defensivekv" : "defensivekv");
        const std::vector<int32_t> ref = kept.open_dataset(label).read<int32_t>();  // [budget, n_kv_head, c]
        const int64_t n_kv = layers[li].k.dim(0);
        ASSERT_EQ(ref.size(), budgets.size() * static_cast<size_t>(n_kv * c));
        for (size_t bi = 0; bi < budgets.size(); ++bi) {
          const Budget budget = budgets[bi];
          SelectionInputs in;
          in.c = c;
          in.n_kv_head = n_kv;
          in.defensive = scores[label][li];
          if (global) {
            std::vector<const DefensiveScores*> all;
            for (const auto& s : scores[label]) all.push_back(s.get());
            in.layer_totals[budget] = layer_defensive_totals(all, budget)[li];
            const size_t at = bi * layers.size() + li;
            EXPECT_EQ(in.layer_totals[budget], totals[at]) << name << " layer " << layers[li].layer << " budget " << budget.kept;
            if (!determined[at]) continue;  // the official kept set cuts through tied scores
            ++layer_global;
          }
          const Selection s = select(spec, in, budget, params_for(label, cg));
          const auto first = ref.begin() + static_cast<std::ptrdiff_t>(bi * static_cast<size_t>(n_kv * c));
          EXPECT_EQ(mask_of(s, c), std::vector<int32_t>(first, first + n_kv * c))
              << name << " layer " << layers[li].layer << " " << label << " budget " << budget.kept;
          ++compared;
        }
      }
    }
  }
  EXPECT_GE(compared, 5 * 3 * 11 - 3);
  EXPECT_GE(layer_global, 3 * 11 - 3);
}

TEST(MethodsGolden, DuoAttentionMatchesKvpress) {
  h5::File f = h5::File::open_read(kMethodsGolden);
  const h5::Group cases = f.open_group("cases");
  int compared = 0, streaming = 0;
  for (const std::string& name : cases.children()) {
    const h5::Group cg = cases.open_group(name);
    const int64_t c = cg.attr_int("c");
    const std::vector<Budget> budgets = budgets_of(cg);
    const SelectionParams p = params_for("duoattention", cg);
    for (const std::string& l : cg.open_group("layers").children()) {
      const h5::Group lg = cg.open_group("layers/" + l);
      SelectionInputs in;
      in.c = c;
      in.n_kv_head = lg.open_dataset("k").shape()[0];
      in.layer = std::stoll(l);
      in.n_layer = cg.attr_int("n_layer");
      const std::vector<int32_t> ref = lg.open_dataset("kept/duoattention").read<int32_t>();  // [budget, n_kv_head, c]
      const int64_t size = in.n_kv_head * c;
      ASSERT_EQ(ref.size(), budgets.size() * static_cast<size_t>(size));
      for (size_t bi = 0; bi < budgets.size(); ++bi) {
        const Selection s = select(MethodSpec::parse("duoattention"), in, budgets[bi], p);
        const auto first = ref.begin() + static_cast<std::ptrdiff_t>(bi * static_cast<size_t>(size));
        EXPECT_EQ(mask_of(s, c), std::vector<int32_t>(first, first + size))
            << name << " layer " << l << " duoattention budget " << budgets[bi].kept;
        for (const auto& kept : s.kept) streaming += static_cast<int64_t>(kept.size()) < c;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 33);
  EXPECT_GE(streaming, 20);
}

TEST(MethodsGolden, PyramidKvMatchesKvpress) {
  h5::File f = h5::File::open_read(kMethodsGolden);
  const h5::Group cases = f.open_group("cases");
  int compared = 0, pyramid = 0;
  for (const std::string& name : cases.children()) {
    const h5::Group cg = cases.open_group(name);
    const int64_t c = cg.attr_int("c"), n = cg.attr_int("n");
    for (const std::string& l : cg.open_group("layers").children()) {
      const h5::Group lg = cg.open_group("layers/" + l);
      const Tensor q = read_tensor(lg, "q"), k = read_tensor(lg, "k"), v = read_tensor(lg, "v");
      const Tensor wo({1, q.dim(0) * q.dim(2)}), nu({q.dim(0), n});
      LayerTensors t{&q, &k, &v, &wo, &nu, nullptr};
      LayerRequest r;
      r.methods = {MethodSpec::parse("pyramidkv")};
      r.params = params_for("pyramidkv", cg);
      r.c = c;
      r.layer = std::stoll(l);
      r.n_layer = cg.attr_int("n_layer");
      r.eval_rows = evaluation_rows(c, n);
      const SelectionInputs in = selection_inputs(t, r, true, false);
      const std::vector<int32_t> ref = lg.open_dataset("kept/pyramidkv").read<int32_t>();  // [budget, n_kv_head, c]
      const std::vector<Budget> budgets = budgets_of(cg);
      const int64_t size = k.dim(0) * c;
      ASSERT_EQ(ref.size(), budgets.size() * static_cast<size_t>(size));
      for (size_t bi = 0; bi < budgets.size(); ++bi) {
        const Selection s = select(r.methods[0], in, budgets[bi], r.params);
        const auto first = ref.begin() + static_cast<std::ptrdiff_t>(bi * static_cast<size_t>(size));
        EXPECT_EQ(mask_of(s, c), std::vector<int32_t>(first, first + size))
            << name << " layer " << l << " pyramidkv budget " << budgets[bi].kept;
        // Cases where the layer's budget differs from the uniform one (the pyramid proper).
        pyramid += static_cast<int64_t>(s.kept[0].size()) != budgets[bi].kept;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 33);
  EXPECT_GE(pyramid, 6);
}

// "criticalkv(expectedattention)|future=512,sinks=4,cov=1,vnorm=1,eps=0" -> method, params.
std::pair<MethodSpec, SelectionParams> expected_label(const std::string& label) {
  const size_t bar = label.find('|');
  SelectionParams p;
  std::stringstream ss(label.substr(bar + 1));
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    if (key == "future") p.ea_future = std::stoll(val);
    else if (key == "sinks") p.ea_sinks = std::stoll(val);
    else if (key == "cov") p.ea_covariance = val == "1";
    else if (key == "vnorm") p.ea_vnorm = val == "1";
    else if (key == "eps") p.ea_epsilon = std::stod(val);
    else ADD_FAILURE() << "unknown setting " << key;
  }
  return {MethodSpec::parse(label.substr(0, bar)), p};
}

TEST(MethodsGolden, ExpectedAttentionMatchesKvpress) {
  h5::File f = h5::File::open_read(std::filesystem::path(CKV_TEST_DATA_DIR) / "kvpress/expected_attention_v1.h5");
  ASSERT_EQ(f.attr_int("format_version"), 1);
  const h5::Group cases = f.open_group("cases");
  int compared = 0;
  std::set<std::string> methods;
  for (const std::string& name : cases.children()) {
    const h5::Group cg = cases.open_group(name);
    const int64_t c = cg.attr_int("c"), n = cg.attr_int("n");
    const std::vector<double> freq = cg.open_dataset("inv_freq").read<double>();
    const auto inv_freq = std::make_shared<const std::vector<float>>(freq.begin(), freq.end());
    const std::vector<int64_t> budgets = cg.attr_ints("budgets");
    for (const std::string& l : cg.open_group("layers").children()) {
      const h5::Group lg = cg.open_group("layers/" + l);
      const Tensor q = read_tensor(lg, "q"), k = read_tensor(lg, "k"), v = read_tensor(lg, "v");
      const Tensor wo({1, q.dim(0) * q.dim(2)});
      const std::vector<double> nu_ref = lg.open_dataset("nu_l1").read<double>();  // [n_head, c]
      Tensor nu({q.dim(0), n});
      for (int64_t h = 0; h < q.dim(0); ++h)
        for (int64_t i = 0; i < c; ++i)
          nu.data()[h * n + i] = static_cast<float>(nu_ref[static_cast<size_t>(h * c + i)]);
      const LayerTensors t{&q, &k, &v, &wo, &nu, nullptr};
      const h5::Group kept = lg.open_group("kept");
      for (const std::string& label : kept.children()) {
        const auto [spec, params] = expected_label(label);
        methods.insert(spec.name());
        LayerRequest r;
        r.methods = {spec};
        r.params = params;
        r.c = c;
        r.eval_rows = evaluation_rows(c, n);
        r.rope_inv_freq = inv_freq;
        const SelectionInputs in = selection_inputs(t, r, false, false);
        const std::vector<int32_t> ref = kept.open_dataset(label).read<int32_t>();  // [budget, n_kv_head, c]
        const int64_t size = k.dim(0) * c;
        ASSERT_EQ(ref.size(), budgets.size() * static_cast<size_t>(size));
        for (size_t bi = 0; bi < budgets.size(); ++bi) {
          const Selection s = select(spec, in, budgets[bi], params);
          const auto first = ref.begin() + static_cast<std::ptrdiff_t>(bi * static_cast<size_t>(size));
          EXPECT_EQ(mask_of(s, c), std::vector<int32_t>(first, first + size))
              << name << " layer " << l << " " << label << " budget " << budgets[bi];
          ++compared;
        }
      }
    }
  }
  // synthetic: 2 layers x 5 settings x 3 methods; tiny: 2 x 3; default: 3 x 3; 3 budgets each.
  EXPECT_EQ(compared, (30 + 6 + 9) * 3);
  EXPECT_EQ(methods.size(), 3u);
}

// The scores themselves, on a case small enough to state: one head, d 2, no sinks, no
// covariance, T = 1 future position; the pre-RoPE queries are constant, so R mu is mu rotated
// to position c, and the scores are the softmax of k_j . R mu / sqrt(2) times ||v_j||.
TEST(MethodsGolden, ExpectedAttentionScoresByHand) {
  const int64_t c = 5, seq = 6;
  const std::vector<float> inv_freq{0.3f};
  Tensor q({1, seq, 2}), k({1, seq, 2}), v({1, seq, 2});
  for (int64_t p = 0; p < seq; ++p) {
    // The pre-RoPE query (1, 2) rotated by angle 0.3 p (rotate_half layout).
    const double a = static_cast<float>(static_cast<float>(p) * 0.3f);
    q.data()[p * 2] = static_cast<float>(std::cos(a) * 1 - std::sin(a) * 2);
    q.data()[p * 2 + 1] = static_cast<float>(std::sin(a) * 1 + std::cos(a) * 2);
    k.data()[p * 2] = static_cast<float>(p) - 2;
    k.data()[p * 2 + 1] = 0.5f * static_cast<float>(p);
    v.data()[p * 2] = 3;
    v.data()[p * 2 + 1] = static_cast<float>(p);
  }
  SelectionParams params;
  params.ea_sinks = 0;
  params.ea_future = 1;
  params.ea_covariance = false;
  const ScoreMatrix s = expected_attention_scores(q, k, v, c, inv_freq, params);
  const double a = static_cast<float>(static_cast<float>(c) * 0.3f);
  const double mu0 = std::cos(a) - 2 * std::sin(a), mu1 = std::sin(a) + 2 * std::cos(a);
  std::vector<double> z(static_cast<size_t>(c)), want(static_cast<size_t>(c));
  double sum = 0;
  for (int64_t j = 0; j < c; ++j) {
    z[static_cast<size_t>(j)] = std::exp(((j - 2.0) * mu0 + 0.5 * j * mu1) / std::sqrt(2.0));
    sum += z[static_cast<size_t>(j)];
  }
  for (int64_t j = 0; j < c; ++j)
    EXPECT_NEAR(s(0, j), z[static_cast<size_t>(j)] / sum * std::hypot(3.0, static_cast<double>(j)), 1e-6) << j;
  // Two sinks score the layer maximum + 1.
  params.ea_sinks = 2;
  const ScoreMatrix s2 = expected_attention_scores(q, k, v, c, inv_freq, params);
  EXPECT_DOUBLE_EQ(s2(0, 0), s2.rightCols(3).maxCoeff() + 1);
  EXPECT_DOUBLE_EQ(s2(0, 1), s2(0, 0));
  EXPECT_THROW(expected_attention_scores(q, k, v, 2, inv_freq, params), InputError);
}

TEST(MethodsGolden, HeadKvMatchesReference) {
  h5::File f = h5::File::open_read(std::filesystem::path(CKV_TEST_DATA_DIR) / "kvpress/headkv_v1.h5");
  ASSERT_EQ(f.attr_int("format_version"), 1);
  const h5::Group cases = f.open_group("cases");
  int compared = 0, uneven = 0;
  for (const std::string& name : cases.children()) {
    const h5::Group cg = cases.open_group(name);
    const int64_t c = cg.attr_int("c"), n = cg.attr_int("n"), n_layer = cg.attr_int("n_layer");
    const h5::Dataset pd = cg.open_dataset("profile");
    const std::vector<double> flat = pd.read<double>();
    const int64_t width = pd.shape()[1];
    auto profile = std::make_shared<std::vector<std::vector<double>>>();
    for (int64_t l = 0; l < n_layer; ++l) profile->emplace_back(flat.begin() + l * width, flat.begin() + (l + 1) * width);
    const std::vector<int64_t> budgets = cg.attr_ints("budgets");
    for (const std::string& l : cg.open_group("layers").children()) {
      const h5::Group lg = cg.open_group("layers/" + l);
      const Tensor q = read_tensor(lg, "q"), k = read_tensor(lg, "k");
      const Tensor v({k.dim(0), k.dim(1), k.dim(2)}), wo({1, q.dim(0) * q.dim(2)}), nu({q.dim(0), n});
      const LayerTensors t{&q, &k, &v, &wo, &nu, nullptr};
      const h5::Group kept = lg.open_group("kept");
      for (const std::string& label : kept.children()) {  // "beta=1.2,temp=1"
        LayerRequest r;
        r.methods = {MethodSpec::parse("headkv")};
        r.params.window = cg.attr_int("window");
        r.params.kernel = cg.attr_int("kernel");
        r.params.pool = PoolKind::Max;
        r.params.headkv_profile = profile;
        r.params.headkv_beta = std::stod(label.substr(5, label.find(',') - 5));
        r.params.headkv_temp = std::stod(label.substr(label.find("temp=") + 5));
        r.c = c;
        r.layer = std::stoll(l);
        r.n_layer = n_layer;
        r.eval_rows = evaluation_rows(c, n);
        const SelectionInputs in = selection_inputs(t, r, true, false);
        const std::vector<int32_t> ref = kept.open_dataset(label).read<int32_t>();  // [budget, n_kv_head, c]
        const int64_t size = k.dim(0) * c;
        ASSERT_EQ(ref.size(), budgets.size() * static_cast<size_t>(size));
        for (size_t bi = 0; bi < budgets.size(); ++bi) {
          const Selection s = select(r.methods[0], in, budgets[bi], r.params);
          const auto first = ref.begin() + static_cast<std::ptrdiff_t>(bi * static_cast<size_t>(size));
          EXPECT_EQ(mask_of(s, c), std::vector<int32_t>(first, first + size))
              << name << " layer " << l << " " << label << " budget " << budgets[bi];
          for (const auto& h : s.kept) uneven += static_cast<int64_t>(h.size()) != budgets[bi];
          ++compared;
        }
      }
    }
  }
  // synthetic GQA 2 layers, MHA 1, tiny_llama_gqa 2, default model 3; 2 settings, 3 budgets.
  EXPECT_EQ(compared, (2 * 2 * 3) + (1 * 2 * 3) + (2 * 2 * 3) + (3 * 2 * 3));
  EXPECT_GE(uneven, 40);  // the per-head budgets differ from the uniform one
}

TEST(MethodsGolden, HeadKvAllocationByHand) {
  // 2 layers x 2 KV heads, scores 1, 0, 0, 3: s_hat = 1/4, 0, 0, 3/4. b = 42, w = 2: B = 40,
  // B // 1.5 = 26, pool 104, min 14: caps 40, 14, 14, 92 (+ w, clamped to c = 100).
  const std::vector<std::vector<double>> scores{{1, 0}, {0, 3}};
  SelectionParams p;
  p.window = 2;
  p.headkv_beta = 1.5;
  EXPECT_EQ(headkv_budgets(scores, 0, 100, 42, p), (std::vector<int64_t>{42, 16}));
  EXPECT_EQ(headkv_budgets(scores, 1, 100, 42, p), (std::vector<int64_t>{16, 94}));
  // temp 0.5: s_hat^0.5 = 1/2, 0, 0, sqrt(3)/2, renormalised: 0.366, 0, 0, 0.634.
  p.headkv_temp = 0.5;
  EXPECT_EQ(headkv_budgets(scores, 1, 100, 42, p)[1], 2 + static_cast<int64_t>(std::nearbyint(0.6339746 * 104 + 14)));
  // A query-head profile (4 heads, groups of 2) reduces by the group mean.
  EXPECT_EQ(headkv_kv_scores({{1, 3, 0, 2}, {0, 0, 4, 4}}, 2, 4, 2), (std::vector<std::vector<double>>{{2, 1}, {0, 4}}));
  EXPECT_THROW(headkv_kv_scores({{1, 3, 0}}, 1, 4, 2), InputError);
  EXPECT_DOUBLE_EQ(python_floordiv(40, 1.5), 26);
  // The committed profile of the default model (docs/BOUND.md "HeadKV") reads back.
  const auto committed = read_headkv_profile(std::filesystem::path(CKV_TEST_DATA_DIR) /
                                             "../../data/headkv/SmolLM2-135M-Instruct.retrieval.json");
  EXPECT_EQ(committed.size(), 30u);
  EXPECT_EQ(committed.front().size(), 9u);
  EXPECT_DOUBLE_EQ(python_floordiv(128, 1.005), 127);  // Python: 128 // 1.005 == 127.0
  EXPECT_DOUBLE_EQ(python_floordiv(0.3, 0.1), 2);  // Python: 0.3 // 0.1 == 2.0 (fmod, not 0.3 / 0.1)
}

// The retrieval score on a constructed case (Wu et al.: argmax in the needle and the token
// there equals the token produced; 1 / |needle| per step).
TEST(MethodsGolden, RetrievalScoreByHand) {
  // 8 positions, needle [3, 6) = tokens 30 31 32; two answer steps producing 31 then 32.
  const std::vector<int32_t> tokens{10, 11, 12, 30, 31, 32, 13, 14};
  const std::vector<char> needle{0, 0, 0, 1, 1, 1, 0, 0};
  const std::vector<int32_t> produced{31, 32};
  Tensor probs({4, 2, 8});
  const auto peak = [&](int64_t h, int64_t k, int64_t pos) {
    for (int64_t i = 0; i < 8; ++i) probs.data()[(h * 2 + k) * 8 + i] = 0.05f;
    probs.data()[(h * 2 + k) * 8 + pos] = 0.6f;
  };
  peak(0, 0, 4), peak(0, 1, 5);  // head 0 copies both tokens: 2/3
  peak(1, 0, 4), peak(1, 1, 4);  // head 1: the first step only (the second looks at 31): 1/3
  peak(2, 0, 1), peak(2, 1, 5);  // head 2: outside the needle, then a copy: 1/3
  peak(3, 0, 3), peak(3, 1, 7);  // head 3: inside the needle but a different token: 0
  std::vector<double> score(4, 0.0);
  add_retrieval_scores(probs, tokens, needle, produced, score);
  EXPECT_NEAR(score[0], 2.0 / 3, 1e-12);
  EXPECT_NEAR(score[1], 1.0 / 3, 1e-12);
  EXPECT_NEAR(score[2], 1.0 / 3, 1e-12);
  EXPECT_EQ(score[3], 0.0);
  // Ties: the first maximum (position 3, token 30 != 31) decides.
  for (int64_t i = 0; i < 8; ++i) probs.data()[i] = i == 3 || i == 4 ? 0.4f : 0.0f;
  std::vector<double> tie(4, 0.0);
  add_retrieval_scores(probs, tokens, needle, produced, tie);
  EXPECT_NEAR(tie[0], 1.0 / 3, 1e-12);
}

TEST(MethodsGolden, ObcacheMatchesReference) {
  h5::File f = h5::File::open_read(std::filesystem::path(CKV_TEST_DATA_DIR) / "kvpress/obcache_v1.h5");
  ASSERT_EQ(f.attr_int("format_version"), 1);
  const h5::Group cases = f.open_group("cases");
  int compared = 0;
  std::map<std::string, std::vector<std::vector<int32_t>>> by_score;  // the scores must select differently
  for (const std::string& name : cases.children()) {
    const h5::Group cg = cases.open_group(name);
    const int64_t c = cg.attr_int("c"), n = cg.attr_int("n");
    const std::vector<int64_t> budgets = cg.attr_ints("budgets");
    for (const std::string& l : cg.open_group("layers").children()) {
      const h5::Group lg = cg.open_group("layers/" + l);
      const Tensor q = read_tensor(lg, "q"), k = read_tensor(lg, "k"), v = read_tensor(lg, "v");
      const Tensor wo({1, q.dim(0) * q.dim(2)}), nu({q.dim(0), n});
      const LayerTensors t{&q, &k, &v, &wo, &nu, nullptr};
      const h5::Group kept = lg.open_group("kept");
      for (const std::string& score : kept.children()) {
        LayerRequest r;
        r.methods = {MethodSpec::parse("obcache")};
        r.params.window = cg.attr_int("window");
        r.params.kernel = cg.attr_int("kernel");
        r.params.pool = cg.attr_string("pool") == "avg" ? PoolKind::Avg : PoolKind::Max;
        r.params.obcache_score = score == "key" ? ObcacheScore::Key : score == "value" ? ObcacheScore::Value : ObcacheScore::Joint;
        r.c = c;
        r.eval_rows = evaluation_rows(c, n);
        const SelectionInputs in = selection_inputs(t, r, false, false);
        const std::vector<int32_t> ref = kept.open_dataset(score).read<int32_t>();  // [budget, n_kv_head, c]
        const int64_t size = k.dim(0) * c;
        ASSERT_EQ(ref.size(), budgets.size() * static_cast<size_t>(size));
        for (size_t bi = 0; bi < budgets.size(); ++bi) {
          const Selection s = select(r.methods[0], in, budgets[bi], r.params);
          const auto first = ref.begin() + static_cast<std::ptrdiff_t>(bi * static_cast<size_t>(size));
          EXPECT_EQ(mask_of(s, c), std::vector<int32_t>(first, first + size))
              << name << " layer " << l << " obcache " << score << " budget " << budgets[bi];
          by_score[score].push_back(mask_of(s, c));
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, (2 + 1 + 2 + 3) * 3 * 3);  // layers: synthetic 2 + 1, tiny 2, default 3
  EXPECT_NE(by_score["joint"], by_score["key"]);
  EXPECT_NE(by_score["joint"], by_score["value"]);
}

}  // namespace
}  // namespace ckv

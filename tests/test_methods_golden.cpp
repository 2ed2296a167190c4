// DefensiveKV and Layer-DefensiveKV selections against the official presses of
// github.com/FFY0/DefensiveKV (their torch path, float64, CPU) and, for the two readings
// the official code does not implement, a NumPy implementation checked against it;
// PyramidKV against kvpress 0.5.5's PyramidKVPress: from
// tests/data/kvpress/methods_v1.h5 (tests/reference/make_methods_goldens.py). Cases:
// synthetic GQA/MHA tensors, and the q/k/v of the default model and tiny_llama_gqa on a
// text no other test uses.
#include <gtest/gtest.h>

#include <filesystem>

#include "analysis/bound_layer.h"
#include "analysis/defensivekv.h"
#include "analysis/selection.h"
#include "io/h5.h"

namespace ckv {
namespace {

const std::filesystem::path kGolden = std::filesystem::path(CKV_TEST_DATA_DIR) / "kvpress/methods_v1.h5";

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

TEST(MethodsGolden, DefensiveKvMatchesOfficialCode) {
  h5::File f = h5::File::open_read(kGolden);
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
    const std::vector<int64_t> budgets = cg.attr_ints("budgets");
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
          const int64_t budget = budgets[bi];
          SelectionInputs in;
          in.c = c;
          in.n_kv_head = n_kv;
          in.defensive = scores[label][li];
          if (global) {
            std::vector<const DefensiveScores*> all;
            for (const auto& s : scores[label]) all.push_back(s.get());
            in.layer_totals[budget] = layer_defensive_totals(all, budget)[li];
            const size_t at = bi * layers.size() + li;
            EXPECT_EQ(in.layer_totals[budget], totals[at]) << name << " layer " << layers[li].layer << " budget " << budget;
            if (!determined[at]) continue;  // the official kept set cuts through tied scores
            ++layer_global;
          }
          const Selection s = select(spec, in, budget, params_for(label, cg));
          const auto first = ref.begin() + static_cast<std::ptrdiff_t>(bi * static_cast<size_t>(n_kv * c));
          EXPECT_EQ(mask_of(s, c), std::vector<int32_t>(first, first + n_kv * c))
              << name << " layer " << layers[li].layer << " " << label << " budget " << budget;
          ++compared;
        }
      }
    }
  }
  EXPECT_GE(compared, 5 * 3 * 11 - 3);
  EXPECT_GE(layer_global, 3 * 11 - 3);
}

TEST(MethodsGolden, DuoAttentionMatchesKvpress) {
  h5::File f = h5::File::open_read(kGolden);
  const h5::Group cases = f.open_group("cases");
  int compared = 0, streaming = 0;
  for (const std::string& name : cases.children()) {
    const h5::Group cg = cases.open_group(name);
    const int64_t c = cg.attr_int("c");
    const std::vector<int64_t> budgets = cg.attr_ints("budgets");
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
            << name << " layer " << l << " duoattention budget " << budgets[bi];
        for (const auto& kept : s.kept) streaming += static_cast<int64_t>(kept.size()) < c;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 33);
  EXPECT_GE(streaming, 20);
}

TEST(MethodsGolden, PyramidKvMatchesKvpress) {
  h5::File f = h5::File::open_read(kGolden);
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
      const std::vector<int64_t> budgets = cg.attr_ints("budgets");
      const int64_t size = k.dim(0) * c;
      ASSERT_EQ(ref.size(), budgets.size() * static_cast<size_t>(size));
      for (size_t bi = 0; bi < budgets.size(); ++bi) {
        const Selection s = select(r.methods[0], in, budgets[bi], r.params);
        const auto first = ref.begin() + static_cast<std::ptrdiff_t>(bi * static_cast<size_t>(size));
        EXPECT_EQ(mask_of(s, c), std::vector<int32_t>(first, first + size))
            << name << " layer " << l << " pyramidkv budget " << budgets[bi];
        // Cases where the layer's budget differs from the uniform one (the pyramid proper).
        pyramid += static_cast<int64_t>(s.kept[0].size()) != budgets[bi];
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 33);
  EXPECT_GE(pyramid, 6);
}

}  // namespace
}  // namespace ckv

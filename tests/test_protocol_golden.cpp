// `ckv bound`'s protocol options (--eval, --compress, --nu-min, budgets below the snapkv
// window) against tests/data/protocol/protocol_v1.h5, which
// tests/reference/make_protocol_golden.py computes in NumPy from dumps of the tiny GQA
// model (docs/MATH.md §1-4 written there, not ckv's analysis code). Each case runs the CLI on
// the golden's tokens and compares the record's attributes (evictable end, evaluation
// rows, the decoded token, budgets, below-window marks), the kept sets exactly and the
// query-mean metrics within float32-nu rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/selection.h"
#include "io/h5.h"
#include "test_dump_util.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;

const fs::path kProtocolGolden = fs::path(CKV_TEST_DATA_DIR) / "protocol/protocol_v1.h5";

class ProtocolGolden : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::scratch_dir("ckv_protocol"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

TEST_F(ProtocolGolden, EveryProtocolChoiceMatchesNumpy) {
  const h5::File golden = h5::File::open_read(kProtocolGolden);
  ASSERT_EQ(golden.attr_int("format_version"), 1);
  std::string tokens;
  for (int64_t t : golden.attr_ints("tokens")) tokens += std::to_string(t) + " ";
  test::write_text(dir_ / "tokens.txt", tokens);
  const std::vector<std::string> methods = golden.attr_strings("methods");
  const std::vector<std::string> want_metrics = golden.attr_strings("metrics");
  const std::string common = fmt::format(
      "bound --model {}/{} --tokens {} --context-end {} --window {} --pool {} --kernel {} --budgets {} "
      "--methods '{}' -t 1 --force",
      CKV_TEST_DATA_DIR, golden.attr_string("model"), (dir_ / "tokens.txt").string(), golden.attr_int("context_end"),
      golden.attr_int("window"), golden.attr_string("pool"), golden.attr_int("kernel"), golden.attr_string("budgets"),
      joined(methods));
  const h5::Group cases = golden.open_group("cases");
  int compared_cases = 0, below_window_cases = 0;
  for (const std::string& name : cases.children()) {
    const h5::Group g = cases.open_group(name);
    const fs::path out = dir_ / name;
    const test::RunResult r = test::run_ckv(fmt::format("-q {} --eval {} --compress {} --nu-min {} -o {}", common,
                                                        g.attr_string("eval"), g.attr_string("compress"),
                                                        g.attr_string("nu_min"), out.string()));
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.output;
    const h5::File f = h5::File::open_read(out.string() + ".h5");
    const nlohmann::json settings = f.attr_json("settings");
    EXPECT_EQ(settings.at("eval"), g.attr_string("eval")) << name;
    EXPECT_EQ(settings.at("compress"), g.attr_string("compress")) << name;
    EXPECT_EQ(settings.at("nu_min"), g.attr_string("nu_min")) << name;
    const h5::Group rec = f.open_group("records/0");
    EXPECT_EQ(rec.attr_int("context_end"), g.attr_int("c")) << name;
    EXPECT_EQ(rec.attr_ints("eval_rows"), g.attr_ints("eval_rows")) << name;
    EXPECT_EQ(rec.attr_int("eval_token"), g.attr_int("eval_token")) << name;
    EXPECT_EQ(rec.attr_ints("budgets"), g.attr_ints("budgets")) << name;
    EXPECT_EQ(rec.attr_ints("below_window"), g.attr_ints("below_window")) << name;
    for (int64_t b : g.attr_ints("below_window")) below_window_cases += static_cast<int>(b);

    const h5::Dataset mask = rec.open_dataset("kept_mask");
    EXPECT_EQ(mask.shape(), g.open_dataset("kept_mask").shape()) << name;
    EXPECT_EQ(mask.read<uint8_t>(), g.open_dataset("kept_mask").read<uint8_t>()) << name << ": kept sets";

    // metrics_mean [method, budget, layer, head, metric]: ours has every metric, the golden a subset.
    const std::vector<std::string> names = f.attr_strings("metrics");
    const h5::Dataset ours_ds = rec.open_dataset("metrics_mean"), want_ds = g.open_dataset("metrics_mean");
    const std::vector<double> ours = ours_ds.read<double>(), want = want_ds.read<double>();
    const int64_t n_ours = ours_ds.shape().back(), n_want = want_ds.shape().back();
    ASSERT_EQ(static_cast<int64_t>(want.size()) / n_want, static_cast<int64_t>(ours.size()) / n_ours) << name;
    const auto c_col = std::find(names.begin(), names.end(), "C") - names.begin();
    for (int64_t k = 0; k < n_want; ++k) {
      const auto col = std::find(names.begin(), names.end(), want_metrics[static_cast<size_t>(k)]) - names.begin();
      ASSERT_LT(col, n_ours) << want_metrics[static_cast<size_t>(k)];
      for (size_t row = 0; row < want.size() / static_cast<size_t>(n_want); ++row) {
        const double w = want[row * static_cast<size_t>(n_want) + static_cast<size_t>(k)];
        const double o = ours[row * static_cast<size_t>(n_ours) + static_cast<size_t>(col)];
        // nu is float32 in ckv (as value_norms stores it), float64 here: 1e-5 relative, with
        // a floor of 1e-6 C for the bounds, which are differences of O(C) terms.
        const double c = ours[row * static_cast<size_t>(n_ours) + static_cast<size_t>(c_col)];
        EXPECT_NEAR(o, w, 1e-5 * std::max(std::abs(w), 0.1 * std::abs(c)) + 1e-12)
            << name << " metric " << want_metrics[static_cast<size_t>(k)] << " row " << row;
      }
    }
    ++compared_cases;
  }
  EXPECT_EQ(compared_cases, 5);
  EXPECT_GT(below_window_cases, 0) << "a budget below the window must be covered";
}

// A budget below the snapkv window keeps the window's most recent entries (docs/BOUND.md):
// snapkv the last b, criticalkv(snapkv) the last floor(b/2) in stage 1; --compress prompt
// makes the question evictable and part of the window.
TEST_F(ProtocolGolden, BelowWindowKeepsTheMostRecentEntries) {
  const h5::File golden = h5::File::open_read(kProtocolGolden);
  const std::vector<std::string> methods = golden.attr_strings("methods");
  const auto snap = std::find(methods.begin(), methods.end(), "snapkv") - methods.begin();
  const h5::Group g = golden.open_group("cases/question_context_all");
  const int64_t c = g.attr_int("c"), b = g.attr_ints("budgets").at(0);
  ASSERT_LT(b, golden.attr_int("window"));
  const h5::Dataset ds = g.open_dataset("kept_mask");  // [method, budget, layer, kv_head, c]
  const std::vector<int64_t>& s = ds.shape();
  const std::vector<uint8_t> mask = ds.read<uint8_t>();
  for (int64_t l = 0; l < s[2]; ++l)
    for (int64_t kv = 0; kv < s[3]; ++kv)
      for (int64_t i = 0; i < c; ++i)
        EXPECT_EQ(mask[static_cast<size_t>((((snap * s[1]) * s[2] + l) * s[3] + kv) * c + i)], i >= c - b ? 1 : 0)
            << "layer " << l << " kv " << kv << " pos " << i;
}

// The same rule through the library for every snapkv-based method, adakv's joint choice
// included: with the window scored max + 1 and a budget below it, the kept entries are
// the most recent ones of each KV head, and the attn method (no window) keeps its old
// lower-position tie order.
TEST(BelowWindow, EverySnapkvMethodKeepsTheMostRecentWindowEntries) {
  const int64_t c = 30, n_kv = 3, window = 8;
  SelectionParams params;
  params.window = window;
  SelectionInputs in;
  in.c = c;
  in.n_kv_head = n_kv;
  in.snapkv = ScoreMatrix::Constant(n_kv, c, 2.0);  // the window's max + 1 ...
  in.nu = ScoreMatrix::Constant(n_kv, c, 1.0);      // ... and equal nu: a tie throughout the window
  for (int64_t g = 0; g < n_kv; ++g)
    for (int64_t i = 0; i < c - window; ++i) in.snapkv(g, i) = 0.01 * static_cast<double>((i * 7 + g) % 11) / 11.0;
  in.attn = ScoreMatrix::Constant(n_kv, c, 0.5);
  for (const char* name : {"snapkv", "criticalkv(snapkv)", "adakv(snapkv)", "criticalkv(adakv(snapkv))"})
    for (int64_t b : {1, 3, 5, 7}) {
      const Selection s = select(MethodSpec::parse(name), in, b, params);
      for (int64_t g = 0; g < n_kv; ++g) {
        std::vector<int64_t> want;
        for (int64_t i = c - static_cast<int64_t>(s.kept[static_cast<size_t>(g)].size()); i < c; ++i) want.push_back(i);
        EXPECT_EQ(s.kept[static_cast<size_t>(g)], want) << name << " budget " << b << " kv " << g;
      }
      int64_t total = 0;
      for (const auto& k : s.kept) total += static_cast<int64_t>(k.size());
      EXPECT_EQ(total, b * n_kv) << name << " budget " << b;
    }
  const Selection a = select(MethodSpec::parse("attn"), in, 3, params);
  EXPECT_EQ(a.kept[0], (std::vector<int64_t>{0, 1, 2}));
}

}  // namespace
}  // namespace ckv

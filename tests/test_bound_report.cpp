// Figure 4's statistic in `ckv bound`'s JSON summary, with ties apart: the share of heads
// where criticalkv(B)'s L is below B's, the share tied (the KV head keeps the same entries
// under both methods) and the share lower among the heads not tied, per budget and over all
// budgets, against the same shares counted here from the HDF5 arrays (kept_mask,
// metrics_mean); and the budgets' mean kept count over records (kvpress's int(c * fraction)
// per record). Runs with ties: a budget equal to the snapkv window (always kept, so both
// methods keep exactly the window) and adakv budgets where some heads coincide.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "output/bound_schema.h"
#include "test_shard_util.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;

const std::string kMethods = "'snapkv,criticalkv(snapkv),adakv(snapkv),criticalkv(adakv(snapkv))'";

// Head counts of one (criticalkv method, budget), or of all budgets; `means_*` count the
// (layer, head) by their mean L over records (Figure 4 as the paper takes it).
struct Counts {
  int64_t lower = 0, tied = 0, lower_untied = 0, total = 0;
  int64_t means_lower = 0, means_total = 0;
};

double ratio(int64_t k, int64_t n) { return n ? static_cast<double>(k) / static_cast<double>(n) : NAN; }

// method name -> counts per budget, and over all budgets at index [n_budget].
using Expected = std::map<std::string, std::vector<Counts>>;

// Counts every (record, layer, query head) of every criticalkv(B) with B in the file; query
// head h belongs to KV head h / (n_head / n_kv_head).
Expected count_from_file(const fs::path& h5) {
  const h5::File f = h5::File::open_read(h5);
  const std::vector<std::string> methods = f.attr_strings("methods"), metrics = f.attr_strings("metrics");
  const auto l1 = std::find(metrics.begin(), metrics.end(), "L1") - metrics.begin();
  Expected out;
  // (method, budget, layer, head) -> L summed over records, of criticalkv and of its base.
  std::map<std::tuple<std::string, int64_t, int64_t, int64_t>, std::pair<double, double>> sums;
  for (const std::string& id : f.open_group("records").children()) {
    const h5::Group g = f.open_group("records/" + id);
    const h5::Dataset mean_ds = g.open_dataset("metrics_mean"), mask_ds = g.open_dataset("kept_mask");
    const std::vector<double> mean = mean_ds.read<double>();     // [method, budget, layer, head, metric]
    const std::vector<uint8_t> mask = mask_ds.read<uint8_t>();   // [method, budget, layer, kv_head, pos]
    const std::vector<int64_t>& ms = mean_ds.shape();
    const std::vector<int64_t>& ks = mask_ds.shape();
    const int64_t nb = ms[1], nl = ms[2], nh = ms[3], nk = ms[4], ng = ks[3], c = ks[4];
    auto L = [&](size_t m, int64_t b, int64_t l, int64_t h) {
      return mean[static_cast<size_t>(((((static_cast<int64_t>(m) * nb + b) * nl + l) * nh + h) * nk + l1))];
    };
    auto kept = [&](size_t m, int64_t b, int64_t l, int64_t kv) {
      const auto at = mask.begin() + (((static_cast<int64_t>(m) * nb + b) * nl + l) * ng + kv) * c;
      return std::vector<uint8_t>(at, at + c);
    };
    for (size_t m = 0; m < methods.size(); ++m) {
      const std::string& name = methods[m];
      if (!name.starts_with("criticalkv(")) continue;
      const std::string base_name = name.substr(11, name.size() - 12);
      const auto base = static_cast<size_t>(std::find(methods.begin(), methods.end(), base_name) - methods.begin());
      if (base == methods.size()) continue;
      std::vector<Counts>& counts = out[name];
      counts.resize(static_cast<size_t>(nb + 1));
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t l = 0; l < nl; ++l)
          for (int64_t h = 0; h < nh; ++h) {
            const bool lower = L(m, b, l, h) < L(base, b, l, h);
            auto& sum = sums[{name, b, l, h}];
            sum.first += L(m, b, l, h), sum.second += L(base, b, l, h);
            const bool tied = kept(m, b, l, h / (nh / ng)) == kept(base, b, l, h / (nh / ng));
            for (Counts* x : {&counts[static_cast<size_t>(b)], &counts.back()}) {
              x->lower += lower, x->tied += tied, x->lower_untied += lower && !tied, ++x->total;
            }
          }
    }
  }
  for (const auto& [key, sum] : sums) {
    std::vector<Counts>& counts = out[std::get<0>(key)];
    for (Counts* x : {&counts[static_cast<size_t>(std::get<1>(key))], &counts.back()})
      x->means_lower += sum.first < sum.second, ++x->means_total;
  }
  return out;
}

// A share from the JSON (null where no head counts) against the expected one.
void expect_share(const nlohmann::json& j, const char* key, double want, const std::string& where) {
  ASSERT_TRUE(j.contains(key)) << where << " " << key;
  if (std::isnan(want)) {
    EXPECT_TRUE(j[key].is_null()) << where << " " << key << " = " << j[key];
  } else {
    ASSERT_TRUE(j[key].is_number()) << where << " " << key;
    EXPECT_NEAR(j[key].get<double>(), want, 1e-12) << where << " " << key;
  }
}

void expect_counts(const nlohmann::json& j, const Counts& c, const std::string& where) {
  expect_share(j, "fraction_heads_L_below_base", ratio(c.lower, c.total), where);
  expect_share(j, "fraction_heads_tied", ratio(c.tied, c.total), where);
  expect_share(j, "fraction_heads_L_below_base_non_tied", ratio(c.lower_untied, c.total - c.tied), where);
  expect_share(j, "fraction_head_means_L_below_base", ratio(c.means_lower, c.means_total), where);
}

// Checks every table9 entry of PREFIX.json against PREFIX.h5; returns the expected counts.
Expected expect_json_matches_file(const fs::path& prefix) {
  const Expected want = count_from_file(prefix.string() + ".h5");
  const nlohmann::json summary = nlohmann::json::parse(test::read_text(prefix.string() + ".json"));
  EXPECT_EQ(summary.at("table9").size(), want.size());
  for (const nlohmann::json& entry : summary.at("table9")) {
    const std::string name = entry.at("method").get<std::string>();
    const auto it = want.find(name);
    if (it == want.end()) {
      ADD_FAILURE() << "unexpected table9 entry " << name;
      continue;
    }
    const std::vector<Counts>& counts = it->second;
    EXPECT_EQ(entry.at("budgets").size() + 1, counts.size()) << name;
    for (size_t b = 0; b + 1 < counts.size() && b < entry.at("budgets").size(); ++b)
      expect_counts(entry["budgets"][b], counts[b], fmt::format("{} budget {}", name, b));
    expect_counts(entry, counts.back(), name + " all budgets");
  }
  return want;
}

class BoundReport : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::scratch_dir("ckv_bound_report"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// One record of 60 tokens, window 8: 14 % keeps int(60 * 0.14) = 8 = the window, which
// snapkv scores above everything and criticalkv(snapkv)'s stage 1 keeps, so every head ties.
TEST_F(BoundReport, TiedAndNonTiedSharesMatchTheFileOnTheTinyModel) {
  std::string tokens;
  for (int i = 0; i < 60; ++i) tokens += std::to_string((i * 7 + 3) % 200) + " ";
  test::write_text(dir_ / "tokens.txt", tokens);
  const fs::path out = dir_ / "tiny";
  const test::RunResult r =
      test::run_ckv(fmt::format("bound --model {}/models/tiny_llama_gqa --tokens {} --window 8 --budgets 0.1,0.14,0.5 "
                                "--methods {} -t 1 -o {} --force",
                                CKV_TEST_DATA_DIR, (dir_ / "tokens.txt").string(), kMethods, out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Expected want = expect_json_matches_file(out);
  ASSERT_EQ(want.size(), 2u);
  for (const auto& [name, counts] : want) {
    EXPECT_EQ(counts[1].tied, counts[1].total) << name << ": budget = window ties every head";
    EXPECT_LT(counts[2].tied, counts[2].total) << name;
    EXPECT_GT(counts.back().tied, 0) << name;
  }
  // Single record: the kept column is that record's count.
  EXPECT_NE(r.output.find("    budget      kept "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tied (same kept entries)"), std::string::npos) << r.output;
}

// Three records of different lengths on the default model: shares over records, and each
// budget's mean kept count against kvpress's compute_n_kept per record.
TEST_F(BoundReport, SharesAndMeanKeptOverRecordsOfDifferentLengths) {
  const std::string model = test::default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model not installed";
  std::string jsonl;
  const char* vocab[] = {"river", "stone", "lamp", "orbit", "seven", "garden", "copper", "window"};
  for (int rec = 0; rec < 3; ++rec) {
    std::string context = fmt::format("The key is {}.", 100 + rec);
    for (int w = 0; w < 6 + 17 * rec; ++w) context += fmt::format(" {}", vocab[(w * (rec + 3)) % 8]);
    jsonl += fmt::format(R"({{"id": "rec{}", "context": "{}", "question": " What is the key?"}})", rec, context) + "\n";
  }
  test::write_text(dir_ / "in.jsonl", jsonl);
  const std::vector<double> fractions = {0.1, 0.25, 0.5};
  const std::string common = fmt::format("-m {} --input {} --layers 0-1 --window 4 --budgets 0.1,0.25,0.5 -t 1 --force",
                                         model, (dir_ / "in.jsonl").string());
  const fs::path out = dir_ / "multi";
  const test::RunResult r = test::run_ckv(fmt::format("bound {} --methods {} -o {}", common, kMethods, out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Expected want = expect_json_matches_file(out);
  for (const auto& [name, counts] : want) {
    EXPECT_GT(counts.back().tied, 0) << name;
    EXPECT_LT(counts.back().tied, counts.back().total) << name;
    // Three records: the head means are a third as many as the (record, layer, head).
    EXPECT_EQ(3 * counts.back().means_total, counts.back().total) << name;
  }

  // kvpress compute_n_kept: int(c * (1 - compression_ratio)), compression_ratio = 1 - fraction.
  std::vector<double> mean_kept(fractions.size(), 0.0);
  std::vector<int64_t> first_budgets;  // [record] of the first budget
  {
    const h5::File f = h5::File::open_read(out.string() + ".h5");
    const std::vector<std::string> ids = f.open_group("records").children();
    ASSERT_EQ(ids.size(), 3u);
    for (const std::string& id : ids) {
      const h5::Group g = f.open_group("records/" + id);
      const int64_t c = g.attr_int("context_end");
      std::vector<int64_t> budgets;
      for (double fraction : fractions)
        budgets.push_back(
            std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(c) * (1.0 - (1.0 - fraction)))));
      EXPECT_EQ(g.attr_ints("budgets"), budgets) << id;
      for (size_t b = 0; b < fractions.size(); ++b) mean_kept[b] += static_cast<double>(budgets[b]) / 3.0;
      first_budgets.push_back(budgets[0]);
    }
  }
  EXPECT_NE(*std::min_element(first_budgets.begin(), first_budgets.end()),
            *std::max_element(first_budgets.begin(), first_budgets.end()))
      << "the records' budgets should differ";
  const nlohmann::json summary = nlohmann::json::parse(test::read_text(out.string() + ".json"));
  for (const nlohmann::json& entry : summary.at("table9"))
    for (size_t b = 0; b < fractions.size(); ++b) {
      const nlohmann::json& row = entry.at("budgets").at(b);
      EXPECT_EQ(row.at("budget"), fmt::format("{:g}%", 100 * fractions[b]));
      EXPECT_DOUBLE_EQ(row.at("fraction").get<double>(), fractions[b]);
      EXPECT_NEAR(row.at("mean_kept").get<double>(), mean_kept[b], 1e-12);
    }
  EXPECT_NE(r.output.find("    budget mean kept "), std::string::npos) << r.output;
  // 10% keeps 2-3 entries, below the 4-entry window: marked "*".
  EXPECT_NE(r.output.find(fmt::format("{:>10} {:>9.1f} ", "10%*", mean_kept[0])), std::string::npos) << r.output;

  // `ckv check` labels its budgets the same way.
  const test::RunResult c = test::run_ckv(fmt::format("check {} --alpha 0.5 -o {}", common, (dir_ / "check").string()));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const nlohmann::json check = nlohmann::json::parse(test::read_text(dir_ / "check.json"));
  ASSERT_EQ(check.at("results").size(), fractions.size());
  for (size_t b = 0; b < fractions.size(); ++b)
    EXPECT_NEAR(check["results"][b].at("mean_kept").get<double>(), mean_kept[b], 1e-12);
  EXPECT_NE(c.output.find(fmt::format("budget 10% (mean kept {:.1f})", mean_kept[0])), std::string::npos) << c.output;
}

}  // namespace
// A hostile file's sliding-window attributes (the CSV's sliding_window column) are one
// format error, not an internal one.
TEST(BoundCsv, HostileSlidingAttributesAreFormatErrors) {
  BoundRecord rec;
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::ordered_json>>{
           {"sliding_window", "512"}, {"sliding_window", -1}, {"sliding_layers", "[0, \"x\"]"},
           {"sliding_layers", "not json"}, {"sliding_layers", "{}"}}) {
    BoundHeader h;
    h.provenance[key] = value;
    std::ostringstream out;
    EXPECT_THROW(write_bound_csv_rows(out, rec, h), FormatError) << key << " " << value.dump();
  }
  BoundHeader ok;
  ok.settings = nlohmann::json::object();
  ok.provenance["sliding_window"] = 512;
  ok.provenance["sliding_layers"] = "[0, 1]";
  std::ostringstream out;
  EXPECT_NO_THROW(write_bound_csv_rows(out, rec, ok));
}

}  // namespace ckv

// Summaries of bound files: the Table 9 layout of `ckv bound` with Figure 4's share of heads
// where criticalkv lowers L (ties apart), and the Assumption 3.4 fractions of `ckv check`,
// both fed one record at a time.
#include "output/bound_report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/selection.h"
#include "core/error.h"
#include "output/bound_schema.h"

namespace ckv {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The console summary as it is written: say(format, args...) adds to it.
class Console {
 public:
  template <typename... Args>
  void operator()(fmt::format_string<Args...> f, Args&&... args) {
    fmt::format_to(std::back_inserter(text_), f, std::forward<Args>(args)...);
  }
  std::string& text() { return text_; }

 private:
  std::string text_;
};

double share(int64_t k, int64_t n) { return n ? static_cast<double>(k) / static_cast<double>(n) : kNaN; }

// The budget axis of a run: each budget as given (a fraction, or --keep N) and its kept
// count averaged over records, since a fraction keeps int(c * fraction) of each record's c.
class BudgetAxis {
 public:
  explicit BudgetAxis(std::vector<double> fractions) : fractions_(std::move(fractions)) {}
  void add(const BoundRecord& rec) {
    if (kept_sum_.empty()) kept_sum_.assign(rec.budgets.size(), 0.0), below_.assign(rec.budgets.size(), 0);
    for (size_t b = 0; b < kept_sum_.size(); ++b) {
      kept_sum_[b] += static_cast<double>(rec.budgets.at(b));
      below_[b] += rec.below_window.at(b);
    }
    ++records_;
  }
  // Records whose budget b is below the snapkv window (the kept window entries are then the
  // most recent ones; docs/BOUND.md): marked "*" on the console.
  int64_t below_window(int64_t b) const { return below_[static_cast<size_t>(b)]; }
  bool any_below_window() const {
    return std::any_of(below_.begin(), below_.end(), [](int64_t x) { return x > 0; });
  }
  std::string marked_label(int64_t b) const { return label(b) + (below_window(b) ? "*" : ""); }
  int64_t size() const { return static_cast<int64_t>(kept_sum_.size()); }
  double mean_kept(int64_t b) const { return kept_sum_[static_cast<size_t>(b)] / static_cast<double>(records_); }
  // Kept counts can differ between records: fractions over more than one record.
  bool varies() const { return records_ > 1 && !fractions_.empty(); }
  std::string kept_header() const { return varies() ? "mean kept" : "kept"; }
  std::string kept_text(int64_t b) const {
    return varies() ? fmt::format("{:.1f}", mean_kept(b)) : fmt::format("{:.0f}", mean_kept(b));
  }
  std::string label(int64_t b) const {
    return fractions_.empty() ? fmt::format("keep {:.0f}", mean_kept(b))
                              : fmt::format("{:g}%", 100 * fractions_[static_cast<size_t>(b)]);
  }
  nlohmann::json fraction(int64_t b) const {
    return fractions_.empty() ? nlohmann::json() : nlohmann::json(fractions_[static_cast<size_t>(b)]);
  }

 private:
  std::vector<double> fractions_;  // empty with --keep
  std::vector<double> kept_sum_;   // [budget] sum over records
  std::vector<int64_t> below_;     // [budget] records below the window
  int64_t records_ = 0;
};

// A criticalkv method and the method Table 9 compares it with: its base when that was run,
// else "attn" when run, else none (base -1).
struct Comparison {
  int64_t crit = 0, base = -1;
  std::string base_name;
};

std::vector<Comparison> comparisons(const std::vector<MethodSpec>& methods) {
  auto index_of = [&](const std::string& name) -> int64_t {
    for (size_t i = 0; i < methods.size(); ++i)
      if (methods[i].name() == name) return static_cast<int64_t>(i);
    return -1;
  };
  std::vector<Comparison> out;
  for (size_t m = 0; m < methods.size(); ++m) {
    if (methods[m].kind != MethodSpec::Kind::CriticalKV) continue;
    Comparison c{static_cast<int64_t>(m), index_of(methods[m].base->name()), methods[m].base->name()};
    if (c.base < 0) {
      c.base = index_of("attn");
      c.base_name = c.base >= 0 ? "attn" : "";
    }
    out.push_back(c);
  }
  return out;
}

// Figure 4's count over heads: L below the base's, and the heads that are tied (their KV
// head keeps exactly the base's entries, so L is equal by construction, e.g. when the budget
// is the always-kept snapkv window), which say nothing about which selection is better.
struct HeadCount {
  int64_t lower = 0, tied = 0, lower_untied = 0, total = 0;
  void add(bool is_lower, bool is_tied) {
    lower += is_lower, tied += is_tied, lower_untied += is_lower && !is_tied, ++total;
  }
  void add(const HeadCount& o) {
    lower += o.lower, tied += o.tied, lower_untied += o.lower_untied, total += o.total;
  }
  double lower_share() const { return share(lower, total); }
  double tied_share() const { return share(tied, total); }
  double lower_untied_share() const { return share(lower_untied, total - tied); }
  void put(nlohmann::ordered_json& j) const {
    j["fraction_heads_L_below_base"] = lower_share();
    j["fraction_heads_tied"] = tied_share();
    j["fraction_heads_L_below_base_non_tied"] = lower_untied_share();
  }
};

// Kept entries per KV head of one (method, budget), over records x layers x KV heads.
struct KeptStats {
  double sum = 0, window = 0, sinks = 0;
  double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity();
  int64_t heads = 0;
};

// One (record, layer, query head): its model layer and head, and its query-mean metrics.
struct HeadRow {
  int64_t layer = 0, head = 0;
  MetricRow m{};
};

struct Collected {
  std::vector<MethodSpec> methods;
  std::vector<Comparison> pairs;
  BudgetAxis budgets;
  // (method, budget) -> the query-mean metrics of every (record, layer, head), in order.
  std::map<std::pair<int64_t, int64_t>, std::vector<HeadRow>> rows;
  // (comparison, budget) -> whether each head, in the order of `rows`, is tied with the base.
  std::map<std::pair<size_t, int64_t>, std::vector<uint8_t>> tied;
  std::map<std::pair<int64_t, int64_t>, KeptStats> kept;
};

void collect(Collected& col, const BoundRecord& rec, int64_t window, int64_t sinks) {
  col.budgets.add(rec);
  for (size_t l = 0; l < rec.layers.size(); ++l) {
    const LayerResult& r = rec.layers[l];
    const int64_t group = r.n_head / r.n_kv_head;
    auto mask = [&](int64_t m, int64_t b, int64_t g) {  // [c] of kept_mask [method, budget, kv_head, c]
      return r.kept_mask.begin() + ((m * r.n_budget + b) * r.n_kv_head + g) * r.c;
    };
    for (int64_t b = 0; b < r.n_budget; ++b) {
      for (int64_t m = 0; m < r.n_method; ++m) {
        for (int64_t h = 0; h < r.n_head; ++h) col.rows[{m, b}].push_back({rec.layer_ids[l], h, query_mean(r, m, b, h)});
        KeptStats& k = col.kept[{m, b}];
        for (int64_t g = 0; g < r.n_kv_head; ++g) {
          const int64_t mbg = (m * r.n_budget + b) * r.n_kv_head + g;
          const auto count = static_cast<double>(r.kept_count[static_cast<size_t>(mbg)]);
          k.sum += count, k.min = std::min(k.min, count), k.max = std::max(k.max, count), ++k.heads;
          for (int64_t i = 0; i < r.c; ++i) {
            if (!mask(m, b, g)[i]) continue;
            k.window += i >= r.c - window;
            k.sinks += i < sinks;
          }
        }
      }
      for (size_t p = 0; p < col.pairs.size(); ++p) {
        const Comparison& cmp = col.pairs[p];
        if (cmp.base < 0) continue;
        auto& tied = col.tied[{p, b}];
        for (int64_t h = 0; h < r.n_head; ++h)
          tied.push_back(std::equal(mask(cmp.crit, b, h / group), mask(cmp.crit, b, h / group) + r.c,
                                    mask(cmp.base, b, h / group)));
      }
    }
  }
}

// Mean of a metric over all heads, or over the heads `in` marks.
double mean_of(const std::vector<HeadRow>& rows, int metric, const std::vector<char>* in = nullptr) {
  double s = 0;
  int64_t n = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double x = rows[i].m[static_cast<size_t>(metric)];
    if (std::isfinite(x) && (!in || (*in)[i])) s += x, ++n;
  }
  return n ? s / static_cast<double>(n) : kNaN;
}

// Figure 4's statistic as the paper takes it: each (layer, head)'s L averaged over records,
// criticalkv's mean against the base's. A head is tied when its KV head keeps the base's
// entries in every record.
struct HeadMeans {
  std::map<std::pair<int64_t, int64_t>, std::array<double, 2>> sum;  // (layer, head) -> L sums (crit, base)
  std::map<std::pair<int64_t, int64_t>, bool> tied;
  void add(const HeadRow& crit, const HeadRow& base, bool is_tied) {
    auto& s = sum[{crit.layer, crit.head}];
    s[0] += crit.m[kL1], s[1] += base.m[kL1];
    auto [it, fresh] = tied.emplace(std::pair{crit.layer, crit.head}, is_tied);
    if (!fresh) it->second = it->second && is_tied;
  }
  HeadCount count() const {
    HeadCount c;
    for (const auto& [key, s] : sum) c.add(s[0] < s[1], tied.at(key));
    return c;
  }
};

void print_figure4(Console& say, const std::string& crit, const std::string& base, const HeadCount& means, const HeadCount& all,
                   const std::map<int64_t, HeadCount>& per_layer) {
  say("Figure 4 statistic (each head's mean L over records, as the paper): {} lowers L below {} in {:.1f}% "
      "of heads ({} of {} heads x budgets);\n"
      "  per (record, layer, head): lower in {:.1f}% ({} of {}), tied (same kept entries) {:.1f}% ({}); "
      "among the {} not tied, lower in {:.1f}% ({})\n",
      crit, base, 100 * means.lower_share(), means.lower, means.total, 100 * all.lower_share(), all.lower, all.total,
      100 * all.tied_share(), all.tied, all.total - all.tied, 100 * all.lower_untied_share(), all.lower_untied);
  say("per layer (per record, L below {}, ties counted as not lower):", base);
  int n = 0;
  for (const auto& [l, c] : per_layer)
    say("{} L{}={:.0f}%", n++ % 10 == 0 ? "\n " : "", l, 100 * c.lower_share());
  say("\n");
}

// The legend and the column header of one Table 9 comparison.
void print_table9_header(Console& say, const std::string& crit, const std::string& base, const std::string& reading,
                         const BudgetAxis& axis) {
  say("\nTable 9 layout: {} vs {} (L1 norm; Prev. bound theta_rel with nu_min over {}{})\n", crit,
      base.empty() ? "(no attention-only method given)" : base, reading,
      nu_min_reading_is_bound(parse_nu_min_reading(reading)) ? "" : ": NOT an upper bound");
  say("{:>10} {:>9} {:>7} {:>10} {:>10} {:>10} {:>7} {:>10} {:>7} {:>8} {:>6} {:>7} {:>8}\n", "budget",
      axis.kept_header(), "heads", "Actual L", "Our bound", "Prev bound", "Ratio", "L all hds", "lower", "per rec",
      "tied", "untied", "S1>=1/2");
}

// Table 9's legend, printed after its rows.
void print_table9_legend(Console& say, const std::string& base, const BudgetAxis& axis, const nlohmann::json& settings) {
  say("  Actual L, Our bound (theta_hat), Prev bound: means over the `heads` (record x layer x head, each the mean\n"
      "  over evaluation queries) where both methods' S1 >= 1/2 (Assumption 3.4); that population changes with the\n"
      "  budget, so Actual L need not fall as the budget grows: `L all hds` is the mean over every head.\n"
      "  lower: share of heads whose mean L over records is below {}'s (the paper's Figure 4); per rec: the same\n"
      "  per (record, layer, head); tied: the KV head keeps {}'s entries (equal L); untied: lower among the rest.\n",
      base, base);
  if (axis.any_below_window())
    say("* budget below the snapkv window (--window {}) in some records: every method keeps the most recent\n"
        "  window entries, so criticalkv and its base keep the same set and rows below the window can be identical\n",
        settings.value("window", int64_t{0}));
}

// The kept entries of every method and budget: the console table and summary["kept"].
void kept_table(Console& say, const Collected& col, nlohmann::ordered_json& summary) {
  const std::vector<MethodSpec>& methods = col.methods;
  const BudgetAxis& axis = col.budgets;
  say("\nKept entries per KV head (window = last --window context entries, sinks = first --sinks)\n");
  say("{:<28} {:>10} {:>8} {:>6} {:>6} {:>8} {:>7} {:>10}\n", "method", "budget", "mean", "min", "max", "window",
             "sinks", "mean L1");
  for (size_t m = 0; m < methods.size(); ++m)
    for (int64_t b = 0; b < axis.size(); ++b) {
      const KeptStats& k = col.kept.at({static_cast<int64_t>(m), b});
      const auto n = static_cast<double>(k.heads);
      const double l1 = mean_of(col.rows.at({static_cast<int64_t>(m), b}), kL1);
      summary["kept"].push_back({{"method", methods[m].name()}, {"budget", axis.label(b)},
                                 {"below_window_records", axis.below_window(b)}, {"mean", k.sum / n},
                                 {"min", k.min}, {"max", k.max}, {"window", k.window / n}, {"sinks", k.sinks / n},
                                 {"mean_L1", l1}});
      say("{:<28} {:>10} {:>8.1f} {:>6.0f} {:>6.0f} {:>8.1f} {:>7.1f} {:>10.4g}\n", methods[m].name(),
                 axis.marked_label(b), k.sum / n, k.min, k.max, k.window / n, k.sinks / n, l1);
    }
}

nlohmann::ordered_json report(Console& say, const Collected& col, const nlohmann::json& settings) {
  const std::vector<MethodSpec>& methods = col.methods;
  nlohmann::ordered_json summary;
  const BudgetAxis& axis = col.budgets;
  const std::string reading = settings.value("nu_min", std::string("all"));
  for (size_t p = 0; p < col.pairs.size(); ++p) {
    const Comparison& cmp = col.pairs[p];
    const std::string crit = methods[static_cast<size_t>(cmp.crit)].name();
    const bool has_base = cmp.base >= 0;
    nlohmann::ordered_json entry;
    entry["method"] = crit;
    entry["base"] = cmp.base_name;
    entry["nu_min"] = reading;
    entry["prev_bound_is_upper_bound"] = nu_min_reading_is_bound(parse_nu_min_reading(reading));
    print_table9_header(say, crit, has_base ? cmp.base_name : "", reading, axis);
    HeadCount all, all_means;
    std::map<int64_t, HeadCount> per_layer;
    for (int64_t b = 0; b < axis.size(); ++b) {
      const auto& ours = col.rows.at({cmp.crit, b});
      const std::vector<HeadRow>* theirs = has_base ? &col.rows.at({cmp.base, b}) : nullptr;
      // One population for the three columns: the heads where both methods' S1 >= 1/2.
      std::vector<char> both(ours.size());
      int64_t holds = 0, n_both = 0;
      for (size_t i = 0; i < ours.size(); ++i) {
        holds += ours[i].m[kStage1Mass] >= 0.5;
        both[i] = ours[i].m[kStage1Mass] >= 0.5 && (!theirs || (*theirs)[i].m[kStage1Mass] >= 0.5);
        n_both += both[i];
      }
      const double actual = mean_of(ours, kL1, &both), our_bound = mean_of(ours, kThetaHat, &both);
      double prev_bound = kNaN, prev_nu = kNaN;
      HeadCount count, count_means;
      if (theirs) {
        const auto& tied = col.tied.at({p, b});
        prev_bound = mean_of(*theirs, kThetaRel, &both);
        prev_nu = mean_of(*theirs, kNuMinOverC, &both);
        HeadMeans means;
        for (size_t i = 0; i < ours.size(); ++i) {
          const bool lower = ours[i].m[kL1] < (*theirs)[i].m[kL1];
          count.add(lower, tied[i] != 0);
          per_layer[ours[i].layer].add(lower, tied[i] != 0);
          means.add(ours[i], (*theirs)[i], tied[i] != 0);
        }
        count_means = means.count();
      }
      all.add(count);
      all_means.add(count_means);
      const double s1 = share(holds, static_cast<int64_t>(ours.size()));
      nlohmann::ordered_json row = {{"budget", axis.label(b)}, {"fraction", axis.fraction(b)},
                                    {"mean_kept", axis.mean_kept(b)},
                                    {"below_window_records", axis.below_window(b)},
                                    {"heads", n_both}, {"actual_L1", actual},
                                    {"our_bound_theta_hat", our_bound}, {"prev_bound_theta_rel", prev_bound},
                                    {"ratio", our_bound / prev_bound}, {"prev_nu_min_over_C", prev_nu},
                                    {"actual_L1_all_heads", mean_of(ours, kL1)},
                                    {"fraction_head_means_L_below_base", count_means.lower_share()},
                                    {"fraction_head_means_tied", count_means.tied_share()}};
      count.put(row);
      row["fraction_heads_s1_holds"] = s1;
      entry["budgets"].push_back(row);
      say("{:>10} {:>9} {:>7} {:>10.4g} {:>10.4g} {:>10.4g} {:>6.1f}% {:>10.4g} {:>6.1f}% {:>7.1f}% {:>5.1f}% "
          "{:>6.1f}% {:>7.1f}%\n",
          axis.marked_label(b), axis.kept_text(b), n_both, actual, our_bound, prev_bound, 100 * our_bound / prev_bound,
          row["actual_L1_all_heads"].get<double>(), 100 * count_means.lower_share(), 100 * count.lower_share(),
          100 * count.tied_share(), 100 * count.lower_untied_share(), 100 * s1);
    }
    print_table9_legend(say, has_base ? cmp.base_name : "the base", axis, settings);
    if (has_base) {
      all.put(entry);
      entry["fraction_head_means_L_below_base"] = all_means.lower_share();
      entry["fraction_head_means_tied"] = all_means.tied_share();
      print_figure4(say, crit, cmp.base_name, all_means, all, per_layer);
      for (const auto& [l, c] : per_layer) entry["per_layer"][std::to_string(l)] = c.lower_share();
    }
    summary["table9"].push_back(entry);
  }
  kept_table(say, col, summary);
  return summary;
}


// `ckv check`: per (alpha, budget) the heads where S1 >= 1/2 at every evaluation query,
// overall and per layer, and the violating heads.
class CheckSummary {
 public:
  CheckSummary(const nlohmann::json& settings, std::vector<double> fractions)
      : alphas_(settings.at("alphas").get<std::vector<double>>()), budgets_(std::move(fractions)) {}

  void add(const BoundRecord& rec) {
    budgets_.add(rec);
    if (first_budgets_.empty()) first_budgets_ = rec.budgets;
    for (size_t l = 0; l < rec.layers.size(); ++l) {
      const LayerResult& r = rec.layers[l];
      for (int64_t a = 0; a < r.n_method; ++a)
        for (int64_t b = 0; b < r.n_budget; ++b)
          for (int64_t h = 0; h < r.n_head; ++h) {
            // The assumption must hold at every evaluation query: use the smallest S1.
            double s1 = 1.0;
            for (int64_t q = 0; q < r.n_query; ++q) s1 = std::min(s1, r.at(a, b, h, q)[kStage1Mass]);
            const bool holds = s1 >= 0.5;
            auto& o1 = overall_[{static_cast<size_t>(a), b}];
            auto& o2 = per_layer_[{static_cast<size_t>(a), b, rec.layer_ids[l]}];
            o1.first += holds, o1.second += 1, o2.first += holds, o2.second += 1;
            if (!holds)
              violations_.push_back({{"record", rec.id}, {"alpha", alphas_.at(static_cast<size_t>(a))},
                                     {"budget", rec.budgets[static_cast<size_t>(b)]}, {"layer", rec.layer_ids[l]},
                                     {"head", h}, {"S1_min", s1}});
          }
    }
  }

  void finish(Console& say, nlohmann::ordered_json& summary, const nlohmann::json& settings, const std::string& name,
              int64_t max_list) const {
    say("Assumption 3.4 (S1 >= 1/2 at every evaluation query), stage 1 by {}:\n",
               settings.value("method", std::string("attn")));
    for (size_t a = 0; a < alphas_.size(); ++a)
      for (int64_t b = 0; b < budgets_.size(); ++b) {
        const auto [holds, total] = overall_.at({a, b});
        const double frac = static_cast<double>(holds) / static_cast<double>(total);
        say("alpha {:g}, budget {} ({} {}): {:.2f}% of heads ({} of {})\n  per layer:", alphas_[a],
                   budgets_.label(b), budgets_.kept_header(), budgets_.kept_text(b), 100 * frac, holds, total);
        nlohmann::ordered_json layers;
        int n = 0;
        for (const auto& [key, ht] : per_layer_) {
          if (std::get<0>(key) != a || std::get<1>(key) != b) continue;
          const double f = static_cast<double>(ht.first) / static_cast<double>(ht.second);
          layers[std::to_string(std::get<2>(key))] = f;
          say("{} L{}={:.0f}%", n++ % 10 == 0 ? "\n   " : "", std::get<2>(key), 100 * f);
        }
        say("\n");
        // "budget" stays the first record's count (scripts key on it); mean_kept is over records.
        summary["results"].push_back({{"alpha", alphas_[a]}, {"budget", first_budgets_[static_cast<size_t>(b)]},
                                      {"fraction", budgets_.fraction(b)}, {"mean_kept", budgets_.mean_kept(b)},
                                      {"fraction_holds", frac}, {"heads", total}, {"per_layer", layers}});
      }
    summary["violations"] = violations_;
    say("{} violating (record, alpha, budget, layer, head){}\n", violations_.size(),
               violations_.empty() ? "" : ":");
    for (size_t i = 0; i < violations_.size() && static_cast<int64_t>(i) < max_list; ++i) {
      const auto& v = violations_[i];
      say("  record {} alpha {} budget {} layer {} head {}: S1 = {:.3f}\n", v["record"].get<std::string>(),
                 v["alpha"].get<double>(), v["budget"].get<int64_t>(), v["layer"].get<int64_t>(),
                 v["head"].get<int64_t>(), v["S1_min"].get<double>());
    }
    if (static_cast<int64_t>(violations_.size()) > max_list)
      say("  ... {} more in {}.json\n", static_cast<int64_t>(violations_.size()) - max_list, name);
  }

 private:
  std::vector<double> alphas_;
  BudgetAxis budgets_;
  std::vector<int64_t> first_budgets_;  // of the first record
  std::map<std::pair<size_t, int64_t>, std::pair<int64_t, int64_t>> overall_;  // (alpha, budget) -> holds, total
  std::map<std::tuple<size_t, int64_t, int64_t>, std::pair<int64_t, int64_t>> per_layer_;
  std::vector<nlohmann::ordered_json> violations_;
};

}  // namespace

std::string write_bound_summaries(const std::filesystem::path& h5, const std::filesystem::path& csv_path,
                                  const std::filesystem::path& json_path, const std::string& name, int64_t max_list) {
  Console say;
  std::ofstream csv(csv_path, std::ios::binary | std::ios::trunc);
  if (!csv) fail<IoError>("{}: cannot write the CSV", csv_path.string());
  write_bound_csv_header(csv);
  // Both are made from the header, which read_bound_records passes with the first record.
  std::optional<Collected> col;
  std::optional<CheckSummary> check;
  auto start = [&](const BoundHeader& h) {
    if (h.kind == "check") {
      if (!check) check.emplace(h.settings, h.budget_fractions);
    } else if (!col) {
      std::vector<MethodSpec> methods;
      for (const std::string& m : h.labels) methods.push_back(MethodSpec::parse(m));
      col.emplace(Collected{methods, comparisons(methods), BudgetAxis(h.budget_fractions), {}, {}, {}});
    }
  };
  const BoundHeader header = read_bound_records(h5, [&](const BoundHeader& h, const BoundRecord& rec) {
    write_bound_csv_rows(csv, rec, h);
    start(h);
    if (check) check->add(rec);
    else collect(*col, rec, h.settings.at("window").get<int64_t>(), h.settings.at("sinks").get<int64_t>());
  });
  csv.close();
  if (!csv) fail<IoError>("{}: write failed", csv_path.string());
  nlohmann::ordered_json summary;
  summary["provenance"] = header.provenance;
  summary["settings"] = header.settings;
  start(header);
  if (check) {
    check->finish(say, summary, header.settings, name, max_list);
  } else {
    summary["records"] = header.records;
    nlohmann::ordered_json rep = report(say, *col, header.settings);
    for (auto& [k, v] : rep.items()) summary[k] = v;
  }
  std::ofstream json(json_path, std::ios::binary | std::ios::trunc);
  json << summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";  // file text may be invalid UTF-8
  json.close();
  if (!json) fail<IoError>("{}: write failed", json_path.string());
  return std::move(say.text());
}

}  // namespace ckv

// ckv bound: for every selection method, budget, layer and head, the actual output
// perturbation of eviction beside the CriticalKV bounds (MATH.md §3-4), written as HDF5
// (full arrays, docs/BOUND.md), a tidy CSV and a JSON summary; the console shows the
// paper's Table 9 layout, the Figure 4/6 statistic and the kept entries.
#include <cmath>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "bound_common.h"
#include "core/atomic_file.h"
#include "core/error.h"

namespace ckv::app {
namespace {

struct BoundOptions {
  AnalysisOptions a;
  std::string methods = "snapkv,criticalkv(snapkv),adakv(snapkv),criticalkv(adakv(snapkv))";
  double alpha = 0.5;
  bool oracle = false;
  int64_t oracle_max_n = 512;
  std::string selection_file;
  bool kept_report = false;
};

std::vector<MethodSpec> parse_methods(const std::string& spec) {
  // Split at top-level commas only: "criticalkv(adakv(snapkv)),attn".
  std::vector<MethodSpec> out;
  int depth = 0;
  std::string cur;
  for (char ch : spec + ",") {
    if (ch == ',' && depth == 0) {
      if (!cur.empty()) out.push_back(MethodSpec::parse(cur));
      cur.clear();
      continue;
    }
    depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
    cur += ch;
  }
  if (depth != 0) fail<InputError>("--methods: '{}' lacks its closing ')'", spec);
  if (out.empty()) fail<InputError>("--methods: no method given");
  return out;
}

// Per (method, budget): the query-mean metric rows of every (record, layer, head).
struct Collected {
  std::vector<std::string> names;
  std::vector<std::vector<double>> fractions;  // unused placeholder for symmetry
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, MetricRow>>> rows;  // (m,b) -> (layer, row)
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> budgets_seen;
  std::map<std::pair<int64_t, int64_t>, std::array<double, 5>> kept;  // sum, min, max, window, sinks; count in [3]?
  std::map<std::pair<int64_t, int64_t>, int64_t> kept_n;
  std::vector<int64_t> budget_values;  // budgets of the first record
};

void collect(Collected& col, const BoundRecord& rec, const SelectionParams& p) {
  if (col.budget_values.empty()) col.budget_values = rec.budgets;
  for (size_t l = 0; l < rec.layers.size(); ++l) {
    const LayerResult& r = rec.layers[l];
    for (int64_t m = 0; m < r.n_method; ++m)
      for (int64_t b = 0; b < r.n_budget; ++b) {
        for (int64_t h = 0; h < r.n_head; ++h)
          col.rows[{m, b}].push_back({rec.layer_ids[l], query_mean(r, m, b, h)});
        auto& k = col.kept[{m, b}];
        auto& n = col.kept_n[{m, b}];
        for (int64_t g = 0; g < r.n_kv_head; ++g) {
          const int64_t base = (m * r.n_budget + b) * r.n_kv_head + g;
          const auto count = static_cast<double>(r.kept_count[static_cast<size_t>(base)]);
          if (n == 0) k = {0, count, count, 0, 0};
          k[0] += count;
          k[1] = std::min(k[1], count);
          k[2] = std::max(k[2], count);
          for (int64_t i = 0; i < r.c; ++i) {
            if (!r.kept_mask[static_cast<size_t>(base * r.c + i)]) continue;
            if (i >= r.c - p.window) k[3] += 1;
            if (i < p.sinks) k[4] += 1;
          }
          ++n;
        }
      }
  }
}

// Mean of a metric; with `assumption`, only over heads whose stage-1 mass S1 >= 1/2
// (Assumption 3.4), where theta_hat and theta_rel are bounds at all.
double mean_of(const std::vector<std::pair<int64_t, MetricRow>>& rows, int metric, bool assumption = false) {
  double s = 0;
  int64_t n = 0;
  for (const auto& [l, r] : rows)
    if (std::isfinite(r[static_cast<size_t>(metric)]) && (!assumption || r[kStage1Mass] >= 0.5))
      s += r[static_cast<size_t>(metric)], ++n;
  return n ? s / static_cast<double>(n) : std::nan("");
}

nlohmann::ordered_json report(const Collected& col, const std::vector<MethodSpec>& methods,
                              const std::vector<double>& fractions, bool quiet, bool kept_report) {
  nlohmann::ordered_json summary;
  auto index_of = [&](const std::string& name) -> int64_t {
    for (size_t i = 0; i < methods.size(); ++i)
      if (methods[i].name() == name) return static_cast<int64_t>(i);
    return -1;
  };
  const auto nb = static_cast<int64_t>(col.budget_values.size());
  auto budget_label = [&](int64_t b) {
    return fractions.empty() ? fmt::format("keep {}", col.budget_values[static_cast<size_t>(b)])
                             : fmt::format("{:g}%", 100 * fractions[static_cast<size_t>(b)]);
  };
  for (size_t m = 0; m < methods.size(); ++m) {
    if (methods[m].kind != MethodSpec::Kind::CriticalKV) continue;
    const std::string base = methods[m].base->name();
    int64_t bi = index_of(base);
    const std::string prev = bi >= 0 ? base : "attn";
    if (bi < 0) bi = index_of("attn");
    nlohmann::ordered_json entry;
    entry["method"] = methods[m].name();
    entry["base"] = bi >= 0 ? prev : "";
    if (!quiet) {
      fmt::print("\nTable 9 layout: {} (Actual, Our bound theta_hat) vs {} (Prev. bound theta_rel)\n",
                 methods[m].name(), bi >= 0 ? prev : "(no attention-only method given)");
      fmt::print("mean over records x layers x heads (each the mean over evaluation queries), L1;\n"
                 "bounds averaged over the heads where S1 >= 1/2 (Assumption 3.4; last column)\n");
      fmt::print("{:>10} {:>8} {:>12} {:>12} {:>12} {:>8} {:>12} {:>8}\n", "budget", "kept", "Actual L",
                 "Our bound", "Prev bound", "Ratio", "L<base", "S1>=1/2");
    }
    int64_t wins_all = 0, total_all = 0;
    std::map<int64_t, std::pair<int64_t, int64_t>> per_layer;
    for (int64_t b = 0; b < nb; ++b) {
      const auto& ours = col.rows.at({static_cast<int64_t>(m), b});
      const double actual = mean_of(ours, kL1), our_bound = mean_of(ours, kThetaHat, true);
      const double holds = 1.0 - [&] {
        int64_t bad = 0;
        for (const auto& [l, r] : ours) bad += r[kStage1Mass] < 0.5;
        return static_cast<double>(bad) / static_cast<double>(ours.size());
      }();
      double prev_bound = std::nan("");
      int64_t wins = 0, total = 0;
      if (bi >= 0) {
        const auto& theirs = col.rows.at({bi, b});
        prev_bound = mean_of(theirs, kThetaRel, true);
        for (size_t i = 0; i < ours.size(); ++i) {
          const bool win = ours[i].second[kL1] < theirs[i].second[kL1];
          wins += win;
          ++total;
          auto& pl = per_layer[ours[i].first];
          pl.first += win;
          pl.second += 1;
        }
      }
      wins_all += wins;
      total_all += total;
      const double frac = total ? static_cast<double>(wins) / static_cast<double>(total) : std::nan("");
      entry["budgets"].push_back({{"budget", budget_label(b)}, {"kept", col.budget_values[static_cast<size_t>(b)]},
                                  {"actual_L1", actual}, {"our_bound_theta_hat", our_bound},
                                  {"prev_bound_theta_rel", prev_bound}, {"ratio", our_bound / prev_bound},
                                  {"fraction_heads_L_below_base", frac}, {"fraction_heads_s1_holds", holds}});
      if (!quiet)
        fmt::print("{:>10} {:>8} {:>12.4g} {:>12.4g} {:>12.4g} {:>7.1f}% {:>11.1f}% {:>7.1f}%\n", budget_label(b),
                   col.budget_values[static_cast<size_t>(b)], actual, our_bound, prev_bound,
                   100 * our_bound / prev_bound, 100 * frac, 100 * holds);
    }
    if (bi >= 0) {
      entry["fraction_heads_L_below_base"] = total_all ? static_cast<double>(wins_all) / static_cast<double>(total_all) : 0.0;
      if (!quiet) {
        fmt::print("Figure 4 statistic: {} lowers L below {} in {:.1f}% of heads ({} of {}, all budgets)\n",
                   methods[m].name(), prev, 100.0 * static_cast<double>(wins_all) / static_cast<double>(total_all),
                   wins_all, total_all);
        fmt::print("per layer:");
        int col_n = 0;
        for (const auto& [l, wt] : per_layer) {
          fmt::print("{} L{}={:.0f}%", col_n++ % 10 == 0 ? "\n " : "", l,
                     100.0 * static_cast<double>(wt.first) / static_cast<double>(wt.second));
        }
        fmt::print("\n");
      }
      for (const auto& [l, wt] : per_layer)
        entry["per_layer"][std::to_string(l)] = static_cast<double>(wt.first) / static_cast<double>(wt.second);
    }
    summary["table9"].push_back(entry);
  }
  if (!quiet) fmt::print("\nKept entries per KV head (window = last --window context entries, sinks = first --sinks)\n");
  if (!quiet) fmt::print("{:<28} {:>10} {:>8} {:>6} {:>6} {:>8} {:>7} {:>10}\n", "method", "budget", "mean", "min", "max", "window", "sinks", "mean L1");
  for (size_t m = 0; m < methods.size(); ++m)
    for (int64_t b = 0; b < nb; ++b) {
      const auto& k = col.kept.at({static_cast<int64_t>(m), b});
      const auto n = static_cast<double>(col.kept_n.at({static_cast<int64_t>(m), b}));
      const double l1 = mean_of(col.rows.at({static_cast<int64_t>(m), b}), kL1);
      summary["kept"].push_back({{"method", methods[m].name()}, {"budget", budget_label(b)}, {"mean", k[0] / n},
                                 {"min", k[1]}, {"max", k[2]}, {"window", k[3] / n}, {"sinks", k[4] / n}, {"mean_L1", l1}});
      if (!quiet && (kept_report || b == nb - 1 || true))
        fmt::print("{:<28} {:>10} {:>8.1f} {:>6.0f} {:>6.0f} {:>8.1f} {:>7.1f} {:>10.4g}\n", methods[m].name(),
                   budget_label(b), k[0] / n, k[1], k[2], k[3] / n, k[4] / n, l1);
    }
  return summary;
}

void run_bound(BoundOptions& o, const GlobalOptions& g) {
  finish_options(o.a);
  if (!(o.alpha > 0 && o.alpha <= 1)) fail<InputError>("--alpha {}: outside (0, 1]", o.alpha);
  o.a.params.alpha = o.alpha;
  AnalysisBlock block{parse_methods(o.methods), o.a.params, o.oracle, o.oracle_max_n, o.selection_file};
  for (const MethodSpec& m : block.methods) {
    if (m.leaf().kind == MethodSpec::Kind::File && o.selection_file.empty())
      fail<InputError>("--methods: 'file' needs --selection-file");
    if (m.leaf().kind == MethodSpec::Kind::Oracle && !o.oracle)
      fail<InputError>("--methods: 'oracle' needs --oracle");
  }
  if (o.oracle && std::none_of(block.methods.begin(), block.methods.end(),
                               [](const MethodSpec& m) { return m.kind == MethodSpec::Kind::Oracle; }))
    block.methods.push_back(MethodSpec::parse("oracle"));
  std::vector<std::string> names;
  for (const MethodSpec& m : block.methods) names.push_back(m.name());
  const std::vector<double> fractions = o.a.keep > 0 ? std::vector<double>{} : [&] {
    std::vector<double> f;
    std::stringstream ss(o.a.budgets);
    for (std::string item; std::getline(ss, item, ',');) f.push_back(std::stod(item));
    return f;
  }();

  AtomicOutput h5_out(o.a.out + ".h5", {.force = o.a.force});
  AtomicOutput csv_out(o.a.out + ".csv", {.force = o.a.force});
  AtomicOutput json_out(o.a.out + ".json", {.force = o.a.force});
  Provenance prov = Provenance::capture(g.argc, g.argv, g.resolved_threads(), g.device);
  nlohmann::json settings = {{"methods", names}, {"budgets", o.a.budgets}, {"keep", o.a.keep},
                             {"window", o.a.params.window}, {"pool", o.a.pool}, {"kernel", o.a.params.kernel},
                             {"h2o_rows", o.a.params.h2o_rows}, {"sinks", o.a.params.sinks}, {"alpha", o.alpha},
                             {"eps", o.a.params.eps}, {"alpha_safe", o.a.params.alpha_safe},
                             {"gqa_reduce", o.a.gqa_reduce}, {"oracle", o.oracle}, {"oracle_max_n", o.oracle_max_n}};
  std::optional<BoundFile> file;
  std::ofstream csv(csv_out.partial_path());
  write_bound_csv_header(csv);
  Collected col;
  int64_t records = 0;
  run_analysis(o.a, g, {block}, prov, [&](const BoundRecord& rec) {
    if (!file) file.emplace(BoundFile::create(h5_out.partial_path(), prov, "bound", names, settings));
    file->write_record(rec);
    write_bound_csv_rows(csv, rec, names);
    collect(col, rec, o.a.params);
    ++records;
    if (!g.quiet) fmt::print(stderr, "record \"{}\": {} tokens, context {}, {} evaluation queries\n", rec.id, rec.n, rec.c, rec.eval_rows.size());
  });
  if (!file) fail<InputError>("bound: no record to analyse");
  file->close();
  csv.close();
  nlohmann::ordered_json summary;
  summary["provenance"] = prov.to_json();
  summary["settings"] = settings;
  summary["records"] = records;
  nlohmann::ordered_json rep = report(col, block.methods, fractions, false, o.kept_report);
  for (auto& [k, v] : rep.items()) summary[k] = v;
  std::ofstream(json_out.partial_path()) << summary.dump(2) << "\n";
  h5_out.commit();
  csv_out.commit();
  json_out.commit();
  if (!g.quiet) fmt::print("\nwrote {0}.h5, {0}.csv, {0}.json\n", o.a.out);
}

}  // namespace

void register_bound(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<BoundOptions>();
  CLI::App* cmd = app.add_subcommand("bound", "Actual eviction perturbation beside the CriticalKV bounds, per method/budget/layer/head");
  add_model_options(*cmd, g);
  add_analysis_options(*cmd, o->a);
  cmd->add_option("--methods", o->methods,
                  "Comma list of attn, snapkv, h2o, streaming, file, oracle, adakv(BASE), criticalkv(BASE), "
                  "criticalkv(adakv(BASE))")->capture_default_str();
  cmd->add_option("--alpha", o->alpha, "criticalkv stage-1 share of the budget (the paper's experiments: 0.5)")->capture_default_str();
  cmd->add_flag("--oracle", o->oracle, "Add the greedy oracle on the actual L (MATH.md §4)");
  cmd->add_option("--oracle-max-n", o->oracle_max_n, "Skip the oracle (NaN) for contexts longer than this")->capture_default_str();
  cmd->add_option("--selection-file", o->selection_file, "JSON {\"<layer>\": [[positions per KV head]]} for the 'file' method");
  cmd->add_flag("--kept-report", o->kept_report, "Print the kept entries of every method and budget");
  cmd->callback([o, &g] { run_bound(*o, g); });
}

}  // namespace ckv::app

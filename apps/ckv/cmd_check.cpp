// ckv check: Assumption 3.4 per head (MATH.md §3). For each budget and stage-1 share alpha,
// S1 = the evaluation query's attention mass on the stage-1 set (the top floor(alpha b)
// entries by the method's score, by default the query's own attention) plus the always-kept
// question entries; the assumption holds for a head when S1 >= 1/2. Outputs: HDF5 (the
// bound layout with alphas as the first axis), tidy CSV, JSON summary; console: the fraction
// per layer and overall and the violating heads.
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "bound_common.h"
#include "core/atomic_file.h"
#include "core/error.h"

namespace ckv::app {
namespace {

struct CheckOptions {
  AnalysisOptions a;
  std::string method = "attn";
  std::string alphas = "0.5";
  int64_t max_list = 40;
};

std::vector<double> parse_alphas(const std::string& spec) {
  std::vector<double> out;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    double x = 0;
    try {
      x = std::stod(item);
    } catch (const std::exception&) {
      fail<InputError>("--alpha: '{}' is not a number", item);
    }
    if (!(x > 0 && x <= 1)) fail<InputError>("--alpha: {} is outside (0, 1]", item);
    out.push_back(x);
  }
  if (out.empty()) fail<InputError>("--alpha: no value given");
  return out;
}

void run_check(CheckOptions& o, const GlobalOptions& g) {
  finish_options(o.a);
  const std::vector<double> alphas = parse_alphas(o.alphas);
  const MethodSpec method = MethodSpec::parse(o.method);
  if (method.leaf().kind == MethodSpec::Kind::File || method.leaf().kind == MethodSpec::Kind::Oracle)
    fail<InputError>("--method {}: check needs a scored method", o.method);
  std::vector<AnalysisBlock> blocks;
  std::vector<std::string> labels;
  for (double alpha : alphas) {
    SelectionParams p = o.a.params;
    p.alpha = alpha;
    blocks.push_back({{method}, p, false, 0, ""});
    labels.push_back(fmt::format("{:g}", alpha));
  }
  AtomicOutput h5_out(o.a.out + ".h5", {.force = o.a.force});
  AtomicOutput csv_out(o.a.out + ".csv", {.force = o.a.force});
  AtomicOutput json_out(o.a.out + ".json", {.force = o.a.force});
  Provenance prov = Provenance::capture(g.argc, g.argv, g.resolved_threads(), g.device);
  const nlohmann::json settings = {{"method", method.name()}, {"alphas", alphas}, {"budgets", o.a.budgets},
                                   {"keep", o.a.keep}, {"window", o.a.params.window}, {"pool", o.a.pool},
                                   {"kernel", o.a.params.kernel}, {"gqa_reduce", o.a.gqa_reduce}};
  std::optional<BoundFile> file;
  std::ofstream csv(csv_out.partial_path());
  write_bound_csv_header(csv);
  // (alpha, budget) -> holds/total overall and per layer; violating heads listed.
  std::map<std::pair<size_t, int64_t>, std::pair<int64_t, int64_t>> overall;
  std::map<std::tuple<size_t, int64_t, int64_t>, std::pair<int64_t, int64_t>> per_layer;
  std::vector<nlohmann::ordered_json> violations;
  std::vector<int64_t> budgets;
  run_analysis(o.a, g, blocks, prov, [&](const BoundRecord& rec) {
    if (!file) file.emplace(BoundFile::create(h5_out.partial_path(), prov, "check", labels, settings));
    if (budgets.empty()) budgets = rec.budgets;
    file->write_record(rec);
    write_bound_csv_rows(csv, rec, labels);
    for (size_t l = 0; l < rec.layers.size(); ++l) {
      const LayerResult& r = rec.layers[l];
      for (int64_t a = 0; a < r.n_method; ++a)
        for (int64_t b = 0; b < r.n_budget; ++b)
          for (int64_t h = 0; h < r.n_head; ++h) {
            // The assumption must hold at every evaluation query: use the smallest S1.
            double s1 = 1.0;
            for (int64_t q = 0; q < r.n_query; ++q) s1 = std::min(s1, r.at(a, b, h, q)[kStage1Mass]);
            const bool holds = s1 >= 0.5;
            auto& o1 = overall[{static_cast<size_t>(a), b}];
            auto& o2 = per_layer[{static_cast<size_t>(a), b, rec.layer_ids[l]}];
            o1.first += holds, o1.second += 1, o2.first += holds, o2.second += 1;
            if (!holds)
              violations.push_back({{"record", rec.id}, {"alpha", alphas[static_cast<size_t>(a)]},
                                    {"budget", rec.budgets[static_cast<size_t>(b)]}, {"layer", rec.layer_ids[l]},
                                    {"head", h}, {"S1_min", s1}});
          }
    }
  });
  if (!file) fail<InputError>("check: no record to analyse");
  file->close();
  csv.close();
  nlohmann::ordered_json summary;
  summary["provenance"] = prov.to_json();
  summary["settings"] = settings;
  fmt::print("Assumption 3.4 (S1 >= 1/2 at every evaluation query), stage 1 by {}:\n", method.name());
  for (size_t a = 0; a < alphas.size(); ++a)
    for (size_t b = 0; b < budgets.size(); ++b) {
      const auto [holds, total] = overall[{a, static_cast<int64_t>(b)}];
      const double frac = static_cast<double>(holds) / static_cast<double>(total);
      fmt::print("alpha {:g}, budget {} ({}): {:.2f}% of heads ({} of {})\n  per layer:", alphas[a], budgets[b],
                 o.a.keep > 0 ? "--keep" : "of the context", 100 * frac, holds, total);
      nlohmann::ordered_json layers;
      int n = 0;
      for (const auto& [key, ht] : per_layer) {
        if (std::get<0>(key) != a || std::get<1>(key) != static_cast<int64_t>(b)) continue;
        const double f = static_cast<double>(ht.first) / static_cast<double>(ht.second);
        layers[std::to_string(std::get<2>(key))] = f;
        fmt::print("{} L{}={:.0f}%", n++ % 10 == 0 ? "\n   " : "", std::get<2>(key), 100 * f);
      }
      fmt::print("\n");
      summary["results"].push_back({{"alpha", alphas[a]}, {"budget", budgets[b]}, {"fraction_holds", frac},
                                    {"heads", total}, {"per_layer", layers}});
    }
  summary["violations"] = violations;
  fmt::print("{} violating (record, alpha, budget, layer, head){}\n", violations.size(),
             violations.empty() ? "" : ":");
  for (size_t i = 0; i < violations.size() && static_cast<int64_t>(i) < o.max_list; ++i) {
    const auto& v = violations[i];
    fmt::print("  record {} alpha {} budget {} layer {} head {}: S1 = {:.3f}\n", v["record"].get<std::string>(),
               v["alpha"].get<double>(), v["budget"].get<int64_t>(), v["layer"].get<int64_t>(),
               v["head"].get<int64_t>(), v["S1_min"].get<double>());
  }
  if (static_cast<int64_t>(violations.size()) > o.max_list)
    fmt::print("  ... {} more in {}.json\n", static_cast<int64_t>(violations.size()) - o.max_list, o.a.out);
  std::ofstream(json_out.partial_path()) << summary.dump(2) << "\n";
  h5_out.commit();
  csv_out.commit();
  json_out.commit();
  if (!g.quiet) fmt::print("wrote {0}.h5, {0}.csv, {0}.json\n", o.a.out);
}

}  // namespace

void register_check(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<CheckOptions>();
  o->a.out = "check";
  CLI::App* cmd = app.add_subcommand("check", "Assumption 3.4 per head: stage-1 attention mass S1 >= 1/2");
  add_model_options(*cmd, g);
  add_analysis_options(*cmd, o->a);
  cmd->add_option("--alpha", o->alphas, "Stage-1 share(s) of the budget, a comma list for a sweep")->capture_default_str();
  cmd->add_option("--method", o->method, "Method whose stage 1 is checked (attn: the paper's Algorithm 1)")->capture_default_str();
  cmd->add_option("--max-list", o->max_list, "Violating heads printed (all are in the JSON)")->capture_default_str();
  cmd->callback([o, &g] { run_check(*o, g); });
}

}  // namespace ckv::app

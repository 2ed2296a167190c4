// ckv bound: for every selection method, budget, layer and head, the actual output
// perturbation of eviction beside the CriticalKV bounds (docs/MATH.md §3-4), written as HDF5
// (full arrays, docs/BOUND.md), a tidy CSV and a JSON summary; the console shows the
// paper's Table 9 layout, the Figure 4/6 statistic and the kept entries (lib/output/bound_report.cpp).
#include <algorithm>

#include <fmt/format.h>

#include "bound_common.h"
#include "core/error.h"

namespace ckv::app {
namespace {

struct BoundOptions {
  AnalysisOptions a;
  std::string methods = "snapkv,criticalkv(snapkv),adakv(snapkv),criticalkv(adakv(snapkv))";
  bool oracle = false;
  int64_t oracle_max_n = 512;
};

void run_bound(BoundOptions& o, const GlobalOptions& g) {
  finish_options(o.a);
  if (o.oracle_max_n < 1) fail<UsageError>("--oracle-max-n {}: must be at least 1", o.oracle_max_n);
  AnalysisBlock block{parse_methods(o.methods), o.a.selection, o.oracle, o.oracle_max_n,
                      o.a.selection.selection_file, o.a.nu_min_reading};
  for (const MethodSpec& m : block.methods) {
    if (m.leaf().kind == MethodSpec::Kind::Oracle && !o.oracle)
      fail<UsageError>("--methods: 'oracle' needs --oracle");
    require_method_inputs(m, o.a.selection, "--methods");
  }
  if (o.oracle && std::none_of(block.methods.begin(), block.methods.end(),
                               [](const MethodSpec& m) { return m.kind == MethodSpec::Kind::Oracle; }))
    block.methods.push_back(MethodSpec::parse("oracle"));
  std::vector<std::string> names;
  for (const MethodSpec& m : block.methods) names.push_back(m.name());
  nlohmann::json settings = analysis_settings(o.a);
  settings.update({{"methods", names}, {"oracle", o.oracle}, {"oracle_max_n", o.oracle_max_n}});
  run_bound_job(o.a, g, {block}, {.kind = "bound", .labels = names, .settings = settings});
}

}  // namespace

void register_bound(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<BoundOptions>();
  CLI::App* cmd = add_forward_subcommand(
      app, g, "bound",
      "Actual eviction perturbation beside the CriticalKV bounds, per method/budget/layer/head");
  add_analysis_options(*cmd, o->a, /*alpha=*/true);
  cmd->add_option("--methods", o->methods,
                  "Comma list of " + known_methods() + ", e.g. criticalkv(adakv(snapkv))")->capture_default_str();
  cmd->add_flag("--oracle", o->oracle, "Add the greedy oracle on the actual L (docs/MATH.md §4)");
  cmd->add_option("--oracle-max-n", o->oracle_max_n, "Skip the oracle (NaN) for contexts longer than this count")
      ->capture_default_str();
  cmd->callback([o, &g] { run_bound(*o, g); });
}

}  // namespace ckv::app

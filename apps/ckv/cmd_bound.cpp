// ckv bound: for every selection method, budget, layer and head, the actual output
// perturbation of eviction beside the CriticalKV bounds (docs/MATH.md §3-4), written as HDF5
// (full arrays, docs/BOUND.md), a tidy CSV and a JSON summary; the console shows the
// paper's Table 9 layout, the Figure 4/6 statistic and the kept entries (bound_report.cpp).
#include <algorithm>

#include <fmt/format.h>

#include "bound_common.h"
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

void run_bound(BoundOptions& o, const GlobalOptions& g) {
  finish_options(o.a);
  if (!(o.alpha > 0 && o.alpha <= 1)) fail<UsageError>("--alpha {}: outside (0, 1]", o.alpha);
  o.a.params.alpha = o.alpha;
  AnalysisBlock block{parse_methods(o.methods), o.a.params, o.oracle, o.oracle_max_n, o.selection_file,
                      o.a.nu_min_reading};
  for (const MethodSpec& m : block.methods) {
    if (m.leaf().kind == MethodSpec::Kind::File && o.selection_file.empty())
      fail<UsageError>("--methods: 'file' needs --selection-file");
    if (m.leaf().kind == MethodSpec::Kind::Oracle && !o.oracle)
      fail<UsageError>("--methods: 'oracle' needs --oracle");
    if (m.leaf().kind == MethodSpec::Kind::DuoAttention && !o.a.params.duo_pattern)
      fail<UsageError>("--methods: 'duoattention' needs --duo-pattern");
    require_method_inputs(m, o.a.params, "--methods");
  }
  if (o.oracle && std::none_of(block.methods.begin(), block.methods.end(),
                               [](const MethodSpec& m) { return m.kind == MethodSpec::Kind::Oracle; }))
    block.methods.push_back(MethodSpec::parse("oracle"));
  std::vector<std::string> names;
  for (const MethodSpec& m : block.methods) names.push_back(m.name());
  nlohmann::json settings = {
      {"methods", names}, {"budgets", o.a.budgets}, {"keep", o.a.keep}, {"window", o.a.params.window},
      {"pool", o.a.pool}, {"kernel", o.a.params.kernel}, {"h2o_rows", o.a.params.h2o_rows},
      {"sinks", o.a.params.sinks}, {"alpha", o.alpha}, {"eps", o.a.params.eps},
      {"alpha_safe", o.a.params.alpha_safe}, {"gqa_reduce", o.a.gqa_reduce}, {"oracle", o.oracle},
      {"oracle_max_n", o.oracle_max_n}, {"defensive_kernel", o.a.params.defensive_kernel},
      {"defensive_share", o.a.method.defensive_share}, {"defensive_nu", o.a.method.defensive_nu},
      {"pyramid_beta", o.a.params.pyramid_beta}, {"duo_pattern", o.a.method.duo_pattern},
      {"duo_sink", o.a.params.duo_sink}, {"duo_recent", o.a.params.duo_recent}};
  settings.update(protocol_settings(o.a));
  run_bound_job(o.a, g, {block}, {.kind = "bound", .labels = names, .settings = settings});
}

}  // namespace

void register_bound(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<BoundOptions>();
  CLI::App* cmd = app.add_subcommand("bound", "Actual eviction perturbation beside the CriticalKV bounds, per method/budget/layer/head");
  add_model_options(*cmd, g);
  add_compute_option(*cmd, g);
  add_analysis_options(*cmd, o->a);
  cmd->add_option("--methods", o->methods,
                  "Comma list of attn, snapkv, h2o, streaming, file, oracle, defensivekv, layer-defensivekv, pyramidkv, duoattention, "
                  "expectedattention, headkv, obcache, adakv(BASE), criticalkv(BASE), criticalkv(adakv(BASE))")->capture_default_str();
  cmd->add_option("--alpha", o->alpha, "criticalkv stage-1 share of the budget (the paper's experiments: 0.5)")->capture_default_str();
  cmd->add_flag("--oracle", o->oracle, "Add the greedy oracle on the actual L (docs/MATH.md §4)");
  cmd->add_option("--oracle-max-n", o->oracle_max_n, "Skip the oracle (NaN) for contexts longer than this")->capture_default_str();
  cmd->add_option("--selection-file", o->selection_file, "JSON {\"<layer>\": [[positions per KV head]]} for the 'file' method");
  cmd->add_flag("--kept-report", o->kept_report, "Print the kept entries of every method and budget (always done)");
  cmd->callback([o, &g] { run_bound(*o, g); });
}

}  // namespace ckv::app

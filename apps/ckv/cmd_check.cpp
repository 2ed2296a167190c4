// ckv check: Assumption 3.4 per head (docs/MATH.md §3). For each budget and stage-1 share alpha,
// S1 = the evaluation query's attention mass on the stage-1 set (the top floor(alpha b)
// entries by the method's score, by default the query's own attention) plus the always-kept
// question entries; the assumption holds for a head when S1 >= 1/2. Outputs: HDF5 (the
// bound layout with alphas as the first axis), tidy CSV, JSON summary; console: the fraction
// per layer and overall and the violating heads (lib/output/bound_report.cpp).
#include <sstream>

#include <fmt/format.h>

#include "bound_common.h"
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
  std::stringstream ss(spec + ",");
  for (std::string item; std::getline(ss, item, ',');) {
    double x = 0;
    size_t used = 0;
    try {
      x = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) fail<UsageError>("--alpha '{}': '{}' is not a number", spec, item);
    if (!(x > 0 && x <= 1)) fail<UsageError>("--alpha: {} is outside (0, 1]", item);
    if (std::find(out.begin(), out.end(), x) != out.end()) fail<UsageError>("--alpha '{}': {} is given twice", spec, item);
    out.push_back(x);
  }
  return out;
}

void run_check(CheckOptions& o, const GlobalOptions& g) {
  finish_options(o.a);
  const std::vector<double> alphas = parse_alphas(o.alphas);
  if (o.max_list < 0) fail<UsageError>("--max-list {}: must not be negative", o.max_list);
  const MethodSpec method = MethodSpec::parse(o.method);
  if (method.leaf().kind == MethodSpec::Kind::File || method.leaf().kind == MethodSpec::Kind::Oracle)
    fail<UsageError>("--method {}: check needs a scored method", o.method);
  require_method_inputs(method, o.a.selection, "--method");
  std::vector<AnalysisBlock> blocks;
  std::vector<std::string> labels;
  for (double alpha : alphas) {
    SelectionParams p = o.a.selection;
    p.alpha = alpha;
    blocks.push_back({{method}, p, false, 0, "", o.a.nu_min_reading});
    labels.push_back(fmt::format("{:g}", alpha));
  }
  nlohmann::json settings = analysis_settings(o.a);
  settings.erase("alpha");  // the sweep's alphas
  settings.erase("selection_file");
  settings.update({{"method", method.name()}, {"alphas", alphas}});
  run_bound_job(o.a, g, blocks, {.kind = "check", .labels = labels, .settings = settings, .max_list = o.max_list});
}

}  // namespace

void register_check(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<CheckOptions>();
  o->a.out = "check";
  CLI::App* cmd = add_forward_subcommand(
      app, g, "check", "Assumption 3.4 per head: stage-1 attention mass S1 >= 1/2");
  add_analysis_options(*cmd, o->a, /*alpha=*/false);
  cmd->add_option("--alpha", o->alphas, "Stage-1 share(s) of the budget in (0, 1], a comma list for a sweep")
      ->capture_default_str();
  cmd->add_option("--method", o->method, "Method whose stage 1 is checked (attn: the paper's Algorithm 1)")->capture_default_str();
  cmd->add_option("--max-list", o->max_list, "Violating heads printed, a count >= 0 (all are in the JSON)")
      ->capture_default_str();
  cmd->callback([o, &g] { run_check(*o, g); });
}

}  // namespace ckv::app

#include "selection_options.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "analysis/duoattention.h"
#include "analysis/headkv.h"
#include "core/error.h"

namespace ckv::app {
namespace {
// --ea-future: the rotation table grows with it (8 bytes per position and frequency).
constexpr int64_t kMaxFuture = 1 << 20;

void add_method_options(CLI::App& cmd, SelectionOptions& o) {
  SelectionParams& p = o.params;
  cmd.add_option("--pyramid-beta", p.pyramid_beta,
                 "pyramidkv: the pyramid's steepness, a number >= 1 (kvpress PyramidKVPress beta)")->capture_default_str();
  cmd.add_option("--defensive-kernel", p.defensive_kernel,
                 "defensivekv: average-pooling kernel, an odd count (the official press: 5)")->capture_default_str();
  cmd.add_option("--defensive-share", o.defensive_share,
                 "defensivekv: window share subtracted from stage 1's 0.9 mass: before-window (official "
                 "code: the w positions before the window) or window (the window itself)")
      ->check(CLI::IsMember({"before-window", "window"}))->capture_default_str();
  cmd.add_option("--defensive-nu", o.defensive_nu,
                 "defensivekv: value-norm normalisation: heads (official code: across KV heads per "
                 "position) or positions (across each KV head's positions)")
      ->check(CLI::IsMember({"heads", "positions"}))->capture_default_str();
  cmd.add_option("--duo-pattern", o.duo_pattern,
                 "duoattention: path of the head scores, one line per layer, a tab-separated score per KV "
                 "head (the DuoAttention repository's full_attention_heads.tsv)");
  cmd.add_option("--duo-sink", p.duo_sink, "duoattention: first entries a streaming head keeps (pattern's config.json: sink_size)")
      ->capture_default_str();
  cmd.add_option("--duo-recent", p.duo_recent, "duoattention: last entries a streaming head keeps (config.json: recent_size)")
      ->capture_default_str();
  cmd.add_option("--ea-future", p.ea_future,
                 "expectedattention: future positions the query statistics are rotated over (kvpress n_future_positions)")
      ->capture_default_str();
  cmd.add_option("--ea-sinks", p.ea_sinks,
                 "expectedattention: first entries always kept and left out of the query statistics (kvpress n_sink)")
      ->capture_default_str();
  cmd.add_option("--ea-epsilon", p.ea_epsilon, "expectedattention: added to the scores before the value-norm factor")
      ->capture_default_str();
  cmd.add_flag("--ea-no-covariance", o.ea_no_covariance,
               "expectedattention: the mean query only (kvpress use_covariance=False)");
  cmd.add_flag("--ea-no-vnorm", o.ea_no_vnorm, "expectedattention: no value-norm factor (kvpress use_vnorm=False)");
  cmd.add_option("--headkv-profile", o.headkv_profile,
                 "headkv: path of the head-importance profile (JSON, `ckv profile` writes one; docs/BOUND.md \"HeadKV\")");
  cmd.add_option("--headkv-beta", p.headkv_beta,
                 "headkv: the shared pool is (B // beta) per head, B = budget - window (HeadKV's beta)")
      ->capture_default_str();
  cmd.add_option("--headkv-temp", p.headkv_temp, "headkv: the normalised scores' exponent (HeadKV's temp)")
      ->capture_default_str();
  cmd.add_option("--obcache-score", o.obcache_score,
                 "obcache: the saliency of pruning the joint key-value pair (OBCache's default), the key or the value")
      ->check(CLI::IsMember({"joint", "key", "value"}))->capture_default_str();
}

void check_method_values(const SelectionParams& p) {
  if (p.defensive_kernel < 1 || p.defensive_kernel % 2 == 0 || p.defensive_kernel > kMaxKernel)
    fail<UsageError>("--defensive-kernel {}: must be odd, in [1, {}]", p.defensive_kernel, kMaxKernel);
  if (!(std::isfinite(p.pyramid_beta) && p.pyramid_beta >= 1))
    fail<UsageError>("--pyramid-beta {}: must be finite and at least 1", p.pyramid_beta);
  if (p.duo_sink < 0 || p.duo_recent < 1)
    fail<UsageError>("--duo-sink {} / --duo-recent {}: need sink >= 0 and recent >= 1", p.duo_sink, p.duo_recent);
  if (p.ea_future < 1 || p.ea_future > kMaxFuture)
    fail<UsageError>("--ea-future {}: must be in [1, {}]", p.ea_future, kMaxFuture);
  if (p.ea_sinks < 0) fail<UsageError>("--ea-sinks {}: must not be negative", p.ea_sinks);
  if (!(std::isfinite(p.ea_epsilon) && p.ea_epsilon >= 0))
    fail<UsageError>("--ea-epsilon {}: must be finite and not negative", p.ea_epsilon);
  if (!(std::isfinite(p.headkv_beta) && p.headkv_beta >= 1))
    fail<UsageError>("--headkv-beta {}: must be finite and at least 1", p.headkv_beta);
  if (!(std::isfinite(p.headkv_temp) && p.headkv_temp > 0))
    fail<UsageError>("--headkv-temp {}: must be finite and positive", p.headkv_temp);
}

}  // namespace

void add_selection_options(CLI::App& cmd, SelectionOptions& o, SelectionFlags flags) {
  SelectionParams& p = o.params;
  cmd.add_option("--window", p.window,
                 "snapkv observation window: the last W context queries, a count >= 1. The window's entries are "
                 "always kept and count in the budget (as kvpress scores them max+1)")->capture_default_str();
  cmd.add_option("--kernel", p.kernel, "snapkv pooling kernel: an odd count")->capture_default_str();
  cmd.add_option("--pool", o.pool, "snapkv pooling: max (paper) or avg (kvpress)")
      ->check(CLI::IsMember({"max", "avg"}))->capture_default_str();
  cmd.add_option("--h2o-rows", p.h2o_rows, "h2o: accumulated attention of the last N context queries")->capture_default_str();
  cmd.add_option("--sinks", p.sinks,
                 "Sink entries [0, N): streaming keeps them (ckv mask also reports their attention apart)")
      ->capture_default_str();
  if (flags.alpha)
    cmd.add_option("--alpha", p.alpha, "criticalkv stage-1 share of the budget, in (0, 1] (the paper's experiments: 0.5)")
        ->capture_default_str();
  cmd.add_option("--eps", p.eps, "criticalkv stage-2 offset, a number >= 0")->capture_default_str();
  cmd.add_option("--alpha-safe", p.alpha_safe, "adakv: share of the budget every head keeps, in [0, 1]")->capture_default_str();
  cmd.add_option("--gqa-reduce", o.gqa_reduce, "Reduction of a KV head's query-head scores and nu: mean or max")
      ->check(CLI::IsMember({"mean", "max"}))->capture_default_str();
  if (flags.selection_file)
    cmd.add_option("--selection-file", o.selection_file,
                   "Path of a selection JSON of kept positions per layer and KV head: the 'file' method's "
                   "(bound: {\"<layer>\": [[...], ...]}, docs/BOUND.md; eval, and mask's eviction: the "
                   "ckv.selection format, docs/MASK.md)");
  add_method_options(cmd, o);
}

void finish_selection_options(SelectionOptions& o) {
  SelectionParams& p = o.params;
  validate_selection_params(p);
  check_method_values(p);
  p.ea_covariance = !o.ea_no_covariance;
  p.ea_vnorm = !o.ea_no_vnorm;
  p.pool = o.pool == "avg" ? PoolKind::Avg : PoolKind::Max;
  p.gqa_reduce = o.gqa_reduce == "max" ? GqaReduce::Max : GqaReduce::Mean;
  p.obcache_score = o.obcache_score == "key" ? ObcacheScore::Key : o.obcache_score == "value" ? ObcacheScore::Value
                                                                                               : ObcacheScore::Joint;
  p.defensive_share = o.defensive_share == "window" ? DefensiveShare::Window : DefensiveShare::BeforeWindow;
  p.defensive_nu = o.defensive_nu == "positions" ? DefensiveNu::AcrossPositions : DefensiveNu::AcrossHeads;
  if (!o.headkv_profile.empty())
    p.headkv_profile = std::make_shared<const std::vector<std::vector<double>>>(read_headkv_profile(o.headkv_profile));
  if (!o.duo_pattern.empty())
    p.duo_pattern = std::make_shared<const std::vector<std::vector<double>>>(read_duo_pattern(o.duo_pattern));
}

nlohmann::json selection_settings(const SelectionOptions& o) {
  const SelectionParams& p = o.params;
  return {{"window", p.window},
          {"kernel", p.kernel},
          {"pool", o.pool},
          {"h2o_rows", p.h2o_rows},
          {"sinks", p.sinks},
          {"alpha", p.alpha},
          {"eps", p.eps},
          {"alpha_safe", p.alpha_safe},
          {"gqa_reduce", o.gqa_reduce},
          {"selection_file", o.selection_file},
          {"defensive_kernel", p.defensive_kernel},
          {"defensive_share", o.defensive_share},
          {"defensive_nu", o.defensive_nu},
          {"pyramid_beta", p.pyramid_beta},
          {"duo_pattern", o.duo_pattern},
          {"duo_sink", p.duo_sink},
          {"duo_recent", p.duo_recent},
          {"ea_future", p.ea_future},
          {"ea_sinks", p.ea_sinks},
          {"ea_epsilon", p.ea_epsilon},
          {"ea_covariance", p.ea_covariance},
          {"ea_vnorm", p.ea_vnorm},
          {"headkv_profile", o.headkv_profile},
          {"headkv_beta", p.headkv_beta},
          {"headkv_temp", p.headkv_temp},
          {"obcache_score", o.obcache_score}};
}

std::vector<MethodSpec> parse_methods(const std::string& spec, std::string_view flag) {
  std::vector<MethodSpec> out;
  std::set<std::string> names;
  int depth = 0;
  std::string cur;
  for (char ch : spec + ",") {
    if (ch == ',' && depth == 0) {
      if (cur.find_first_not_of(" \t") == std::string::npos)
        fail<UsageError>("{} '{}': an empty item (two commas, or one at an end)", flag, spec);
      MethodSpec m = MethodSpec::parse(cur);
      if (!names.insert(m.name()).second) fail<UsageError>("{} '{}': {} is listed twice", flag, spec, m.name());
      out.push_back(std::move(m));
      cur.clear();
      continue;
    }
    depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
    cur += ch;
  }
  if (depth != 0) fail<UsageError>("{}: '{}' lacks its closing ')'", flag, spec);
  return out;
}

void require_method_inputs(const MethodSpec& method, const SelectionOptions& o, std::string_view flag) {
  const char* needs = method_info(method.leaf().kind).needs;
  if (needs == nullptr) return;
  const std::string_view given = needs == std::string_view("--selection-file") ? o.selection_file
                                 : needs == std::string_view("--duo-pattern")  ? o.duo_pattern
                                 : needs == std::string_view("--headkv-profile") ? o.headkv_profile
                                                                                 : std::string_view();
  if (given.empty()) fail<UsageError>("{}: '{}' needs {}", flag, method.name(), needs);
}

std::vector<double> parse_budget_fractions(const std::string& spec, std::string_view flag) {
  std::vector<double> out;
  std::stringstream ss(spec + ",");
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.find_first_not_of(" \t") == std::string::npos)
      fail<UsageError>("{} '{}': an empty item (two commas, or one at an end)", flag, spec);
    const double f = parse_budget_fraction(item, flag);
    if (std::find(out.begin(), out.end(), f) != out.end())
      fail<UsageError>("{} '{}': the budget {} is given twice", flag, spec, item);
    out.push_back(f);
  }
  return out;
}

}  // namespace ckv::app

#include "method_options.h"

#include <cmath>

#include "analysis/duoattention.h"
#include "analysis/headkv.h"
#include "core/error.h"

namespace ckv::app {

std::vector<MethodSpec> parse_methods(const std::string& spec) {
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
  if (depth != 0) fail<UsageError>("--methods: '{}' lacks its closing ')'", spec);
  if (out.empty()) fail<UsageError>("--methods: no method given");
  return out;
}

namespace {
// --ea-future: the rotation table grows with it (8 bytes per position and frequency).
constexpr int64_t kMaxFuture = 1 << 20;
}  // namespace

void add_method_options(CLI::App& cmd, MethodOptions& o, SelectionParams& params) {
  cmd.add_option("--pyramid-beta", params.pyramid_beta,
                 "pyramidkv: the pyramid's steepness (kvpress PyramidKVPress beta)")->capture_default_str();
  cmd.add_option("--defensive-kernel", params.defensive_kernel,
                 "defensivekv: average-pooling kernel (odd; the official press: 5)")->capture_default_str();
  cmd.add_option("--duo-pattern", o.duo_pattern,
                 "duoattention: head scores, one line per layer, a tab-separated score per KV head (the "
                 "DuoAttention repository's full_attention_heads.tsv)");
  cmd.add_option("--duo-sink", params.duo_sink, "duoattention: first entries a streaming head keeps (pattern's config.json: sink_size)")
      ->capture_default_str();
  cmd.add_option("--duo-recent", params.duo_recent, "duoattention: last entries a streaming head keeps (config.json: recent_size)")
      ->capture_default_str();
  cmd.add_option("--ea-future", params.ea_future,
                 "expectedattention: future positions the query statistics are rotated over (kvpress n_future_positions)")
      ->capture_default_str();
  cmd.add_option("--ea-sinks", params.ea_sinks,
                 "expectedattention: first entries always kept and left out of the query statistics (kvpress n_sink)")
      ->capture_default_str();
  cmd.add_option("--ea-epsilon", params.ea_epsilon, "expectedattention: added to the scores before the value-norm factor")
      ->capture_default_str();
  cmd.add_flag("--ea-no-covariance{false}", params.ea_covariance,
               "expectedattention: the mean query only (kvpress use_covariance=False)");
  cmd.add_flag("--ea-no-vnorm{false}", params.ea_vnorm,
               "expectedattention: no value-norm factor (kvpress use_vnorm=False)");
  cmd.add_option("--headkv-profile", o.headkv_profile,
                 "headkv: head-importance profile (JSON, `ckv profile` writes one; docs/BOUND.md \"HeadKV\")");
  cmd.add_option("--headkv-beta", params.headkv_beta,
                 "headkv: the shared pool is (B // beta) per head, B = budget - window (HeadKV's beta)")
      ->capture_default_str();
  cmd.add_option("--headkv-temp", params.headkv_temp, "headkv: the normalised scores' exponent (HeadKV's temp)")
      ->capture_default_str();
  cmd.add_option("--obcache-score", o.obcache_score,
                 "obcache: the saliency of pruning the joint key-value pair (the seed's), the key or the value")
      ->check(CLI::IsMember({"joint", "key", "value"}))->capture_default_str();
  cmd.add_option("--defensive-share", o.defensive_share,
                 "defensivekv: window share subtracted from stage 1's 0.9 mass: before-window (official "
                 "code: the w positions before the window) or window (the window itself)")
      ->check(CLI::IsMember({"before-window", "window"}))->capture_default_str();
  cmd.add_option("--defensive-nu", o.defensive_nu,
                 "defensivekv: value-norm normalisation: heads (official code: across KV heads per "
                 "position) or positions (across each KV head's positions)")
      ->check(CLI::IsMember({"heads", "positions"}))->capture_default_str();
}

void finish_method_options(const MethodOptions& o, SelectionParams& params) {
  if (params.defensive_kernel < 1 || params.defensive_kernel % 2 == 0)
    fail<UsageError>("--defensive-kernel {}: must be odd and positive", params.defensive_kernel);
  if (!(params.pyramid_beta >= 1)) fail<UsageError>("--pyramid-beta {}: must be at least 1", params.pyramid_beta);
  if (params.duo_sink < 0 || params.duo_recent < 1)
    fail<UsageError>("--duo-sink {} / --duo-recent {}: need sink >= 0 and recent >= 1", params.duo_sink, params.duo_recent);
  if (params.ea_future < 1 || params.ea_future > kMaxFuture)
    fail<UsageError>("--ea-future {}: must be in [1, {}]", params.ea_future, kMaxFuture);
  if (params.ea_sinks < 0) fail<UsageError>("--ea-sinks {}: must not be negative", params.ea_sinks);
  if (!(std::isfinite(params.ea_epsilon) && params.ea_epsilon >= 0))
    fail<UsageError>("--ea-epsilon {}: must be finite and not negative", params.ea_epsilon);
  if (!(std::isfinite(params.headkv_beta) && params.headkv_beta >= 1))
    fail<UsageError>("--headkv-beta {}: must be finite and at least 1", params.headkv_beta);
  if (!(std::isfinite(params.headkv_temp) && params.headkv_temp > 0))
    fail<UsageError>("--headkv-temp {}: must be finite and positive", params.headkv_temp);
  if (!o.headkv_profile.empty())
    params.headkv_profile =
        std::make_shared<const std::vector<std::vector<double>>>(read_headkv_profile(o.headkv_profile));
  if (!o.duo_pattern.empty())
    params.duo_pattern = std::make_shared<const std::vector<std::vector<double>>>(read_duo_pattern(o.duo_pattern));
  params.obcache_score = o.obcache_score == "key"     ? ObcacheScore::Key
                         : o.obcache_score == "value" ? ObcacheScore::Value
                                                      : ObcacheScore::Joint;
  params.defensive_share = o.defensive_share == "window" ? DefensiveShare::Window : DefensiveShare::BeforeWindow;
  params.defensive_nu = o.defensive_nu == "positions" ? DefensiveNu::AcrossPositions : DefensiveNu::AcrossHeads;
}

void require_method_inputs(const MethodSpec& method, const SelectionParams& params, std::string_view flag) {
  if (method.leaf().kind == MethodSpec::Kind::HeadKV && !params.headkv_profile)
    fail<UsageError>("{}: '{}' needs --headkv-profile", flag, method.name());
}

}  // namespace ckv::app

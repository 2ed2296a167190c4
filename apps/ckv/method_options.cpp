#include "method_options.h"

#include "analysis/duoattention.h"
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
  if (!o.duo_pattern.empty())
    params.duo_pattern = std::make_shared<const std::vector<std::vector<double>>>(read_duo_pattern(o.duo_pattern));
  params.defensive_share = o.defensive_share == "window" ? DefensiveShare::Window : DefensiveShare::BeforeWindow;
  params.defensive_nu = o.defensive_nu == "positions" ? DefensiveNu::AcrossPositions : DefensiveNu::AcrossHeads;
}

}  // namespace ckv::app

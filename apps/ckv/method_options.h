#pragma once
// Selection-method flags shared by `ckv bound`, `ckv check` and `ckv mask` beyond snapkv's:
// DefensiveKV's pooling kernel and its two readings (official code or evident intent,
// docs/BOUND.md "DefensiveKV"), PyramidKV's beta, DuoAttention's pattern, ExpectedAttention's
// statistics.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "analysis/selection.h"

namespace ckv::app {

struct MethodOptions {
  std::string defensive_share = "before-window", defensive_nu = "heads";
  std::string duo_pattern;  // --duo-pattern TSV
  std::string headkv_profile;  // --headkv-profile JSON
  std::string obcache_score = "joint";
};

// "criticalkv(adakv(snapkv)),attn": a --methods list, split at top-level commas. Throws
// UsageError for unbalanced parentheses or an empty list, InputError for an unknown method.
std::vector<MethodSpec> parse_methods(const std::string& spec);

// Adds --defensive-kernel, --pyramid-beta, --duo-sink, --duo-recent, --ea-future,
// --ea-sinks, --ea-epsilon, --ea-no-covariance, --ea-no-vnorm, --headkv-beta,
// --headkv-temp (into params), --defensive-share, --defensive-nu, --duo-pattern,
// --headkv-profile, --obcache-score.
void add_method_options(CLI::App& cmd, MethodOptions& o, SelectionParams& params);
// Writes the parsed choices into params (reading the pattern file); throws InputError for
// a bad kernel, beta, sink/recent, ExpectedAttention setting or pattern file.
void finish_method_options(const MethodOptions& o, SelectionParams& params);

// UsageError when `method` needs a file its flags did not give (headkv: --headkv-profile);
// `flag` names the method flag (--methods, --method, --compare).
void require_method_inputs(const MethodSpec& method, const SelectionParams& params, std::string_view flag);

}  // namespace ckv::app

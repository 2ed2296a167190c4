#pragma once
// The selection settings of `ckv bound`, `ckv check`, `ckv mask` and `ckv eval`, registered
// once: the same flag names, ranges, defaults and help texts on all four, parsed once into
// SelectionOptions::params and serialised once (selection_settings) into each output's
// settings. The budget flags are here too: one syntax (fractions, `0.2` or `20%`, or
// --keep N counts), one parser (parse_budget_fractions), one type (Budget, selection.h).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "analysis/selection.h"

namespace ckv::app {

struct SelectionOptions {
  SelectionParams params;  // the numbers and switches; the choices below are parsed into it
  std::string pool = "max", gqa_reduce = "mean";
  std::string defensive_share = "before-window", defensive_nu = "heads";
  std::string obcache_score = "joint";
  std::string duo_pattern;     // --duo-pattern TSV
  std::string headkv_profile;  // --headkv-profile JSON
  std::string selection_file;  // --selection-file, for the 'file' method (not on check)
  bool ea_no_covariance = false, ea_no_vnorm = false;  // into params.ea_covariance, ea_vnorm
};

struct SelectionFlags {
  bool alpha = true;           // --alpha here (check has its own list of alphas)
  bool selection_file = true;  // --selection-file (check ranks, it has no 'file' method)
};

// Registers --window, --kernel, --pool, --h2o-rows, --sinks, --alpha, --eps, --alpha-safe,
// --gqa-reduce, --selection-file and the methods' own flags (--defensive-*, --pyramid-beta,
// --duo-*, --ea-*, --headkv-*, --obcache-score).
void add_selection_options(CLI::App& cmd, SelectionOptions& o, SelectionFlags flags = {});
// Parses the choices into o.params, reads the pattern and profile files and checks every
// value (validate_selection_params); throws UsageError naming the flag.
void finish_selection_options(SelectionOptions& o);
// Every selection setting, for an output's `settings` (the flags' names, '-' as '_').
nlohmann::json selection_settings(const SelectionOptions& o);

// "criticalkv(adakv(snapkv)),attn": a --methods list, split at top-level commas. Throws
// UsageError for unbalanced parentheses, an empty list, an empty item or a method named
// twice, InputError for an unknown method.
std::vector<MethodSpec> parse_methods(const std::string& spec, std::string_view flag = "--methods");
// UsageError when `method` needs an input its flags did not give: --selection-file for
// 'file', --duo-pattern for duoattention, --headkv-profile for headkv; `flag` names the
// method flag (--methods, --method, --compare).
void require_method_inputs(const MethodSpec& method, const SelectionOptions& o, std::string_view flag);

// --budgets: fractions of the evictable context, comma separated, each `0.2` or `20%`, in
// (0, 1]; UsageError naming `flag` for an empty list or item, a number outside (0, 1] or a
// budget given twice.
std::vector<double> parse_budget_fractions(const std::string& spec, std::string_view flag);

}  // namespace ckv::app

#pragma once
// The selection settings of `ckv bound`, `ckv check`, `ckv mask` and `ckv eval`, registered
// once (selection_param_table): the same flag names, ranges, defaults and help texts on all
// four, parsed once into SelectionParams and serialised once (selection_settings) into each
// output's settings. The budget flags are here too: one syntax (fractions, `0.2` or `20%`, or
// --keep N counts), one parser (parse_budget_fractions), one type (Budget, selection.h).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "analysis/selection.h"

namespace ckv::app {

// Registers a flag for every parameter of selection_param_table (analysis/selection_params.h,
// one registration each: --window, --kernel, --pool, ..., the methods' own --defensive-*,
// --pyramid-beta, --duo-*, --ea-*, --headkv-*, --obcache-score) bound to `p`, with its help
// text and default; `except` names the keys a subcommand leaves out (check: alpha, which it
// lists itself, and selection_file).
void add_selection_options(CLI::App& cmd, SelectionParams& p, std::initializer_list<std::string_view> except = {});
// Checks every value (validate_selection_params) and reads the pattern and profile files
// (load_selection_files); throws UsageError naming the flag.
void finish_selection_options(SelectionParams& p);
// Every selection parameter by its key, for an output's `settings`.
nlohmann::json selection_settings(const SelectionParams& p);

// "criticalkv(adakv(snapkv)),attn": a --methods list, split at top-level commas. Throws
// UsageError for unbalanced parentheses, an empty list, an empty item or a method named
// twice, InputError for an unknown method.
std::vector<MethodSpec> parse_methods(const std::string& spec, std::string_view flag = "--methods");
// UsageError when `method` needs an input its flags did not give: --selection-file for
// 'file', --duo-pattern for duoattention, --headkv-profile for headkv; `flag` names the
// method flag (--methods, --method, --compare).
void require_method_inputs(const MethodSpec& method, const SelectionParams& p, std::string_view flag);

// --budgets: fractions of the evictable context, comma separated, each `0.2` or `20%`, in
// (0, 1]; UsageError naming `flag` for an empty list or item, a number outside (0, 1] or a
// budget given twice.
std::vector<double> parse_budget_fractions(const std::string& spec, std::string_view flag);

}  // namespace ckv::app

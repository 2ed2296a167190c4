#pragma once
// Selection-method flags shared by `ckv bound`, `ckv check` and `ckv mask` beyond snapkv's:
// DefensiveKV's pooling kernel and its two readings (official code or evident intent,
// docs/BOUND.md "DefensiveKV"), PyramidKV's beta.
#include <string>

#include <CLI/CLI.hpp>

#include "analysis/selection.h"

namespace ckv::app {

struct MethodOptions {
  std::string defensive_share = "before-window", defensive_nu = "heads";
};

// Adds --defensive-kernel, --pyramid-beta (into params), --defensive-share, --defensive-nu.
void add_method_options(CLI::App& cmd, MethodOptions& o, SelectionParams& params);
// Writes the parsed choices into params; throws InputError for a bad kernel or beta.
void finish_method_options(const MethodOptions& o, SelectionParams& params);

}  // namespace ckv::app

#pragma once
// One rule set for every flag value, applied to the whole command line once it is built:
// a value is never empty; a whole-number option takes a whole number that fits its 64 bits
// (no silent saturation of 99999999999999999999999); a real-number option takes a finite
// number (no nan, no inf). Ranges are checked by in_range, which names the flag and says
// "not a number" before "outside [lo, hi]". Every refusal is a CLI11 validation error:
// one line, exit 2. The list-valued flags (--methods, --budgets, --alpha) refuse empty
// items and duplicates in their parsers (selection_options.h).
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace ckv::app {

// A number in [lo, hi] (hi = infinity: no upper end). Its description is empty, so the help
// shows no validator text; the flag's help says the range in words.
CLI::Validator in_range(double lo, double hi);
CLI::Validator at_least(double lo);

// Adds the rules above to every option of `app` and of its subcommands.
void apply_flag_rules(CLI::App& app);

// The entry of `names` closest to `given` (Levenshtein distance at most a third of its
// length, and at least 1), or "" when none is that close: for "did you mean".
std::string closest_name(std::string_view given, const std::vector<std::string>& names);

// When argv names no subcommand of `app` where one is expected, or a flag the subcommand
// does not have: a one-line message with the closest name ("unknown subcommand 'dumb' (did
// you mean dump?)"); else "". Called on a parse error, to replace CLI11's message.
std::string explain_unknown_name(const CLI::App& app, int argc, const char* const* argv);

}  // namespace ckv::app

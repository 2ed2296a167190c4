#include "flag_rules.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include <fmt/format.h>

namespace ckv::app {
namespace {

// The whole text as a double (strtod's syntax: "1e3", "0x10", "nan", "inf"), or nullopt.
std::optional<double> to_number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return x;
}

std::string check_whole(const std::string& value, bool is_unsigned) {
  int64_t i = 0;
  uint64_t u = 0;
  const char* first = value.data() + (value.starts_with('+') ? 1 : 0);
  const char* last = value.data() + value.size();
  const auto [end, ec] = is_unsigned ? std::from_chars(first, last, u) : std::from_chars(first, last, i);
  if (ec == std::errc::result_out_of_range)
    return fmt::format("{} is beyond the 64-bit whole numbers", value);
  if (ec == std::errc() && end == last) return {};
  if (is_unsigned && value.starts_with('-')) return fmt::format("{} is not a whole number >= 0", value);
  return to_number(value) ? fmt::format("{} is not a whole number", value) : fmt::format("{} is not a number", value);
}

std::string check_finite(const std::string& value) {
  const std::optional<double> x = to_number(value);
  if (!x) return fmt::format("{} is not a number", value);
  if (!std::isfinite(*x)) return fmt::format("{} is not a finite number", value);
  return {};
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

void apply_to_options(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size_min() == 0 || opt->get_expected_min() == 0) continue;  // a switch
    const std::string type = opt->get_type_name();
    const bool whole = type.starts_with("INT") || type.starts_with("UINT");
    const bool real = type.starts_with("FLOAT");
    const bool is_unsigned = type.starts_with("UINT");
    opt->check(CLI::Validator(
        [whole, real, is_unsigned](std::string& value) -> std::string {
          if (value.empty()) return "an empty value";
          if (whole) return check_whole(value, is_unsigned);
          if (real) return check_finite(value);
          return {};
        },
        "", "flag rules"));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) apply_to_options(*sub);
}

}  // namespace

CLI::Validator in_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) -> std::string {
        const std::optional<double> x = to_number(value);
        if (!x) return fmt::format("{} is not a number", value);
        if (!std::isfinite(*x)) return fmt::format("{} is not a finite number", value);
        if (!(*x >= lo && *x <= hi))
          return std::isinf(hi) ? fmt::format("{} is below {}", value, lo)
                                : fmt::format("{} is outside [{}, {}]", value, lo, hi);
        return {};
      },
      "", "range");
}

CLI::Validator at_least(double lo) { return in_range(lo, std::numeric_limits<double>::infinity()); }

void apply_flag_rules(CLI::App& app) { apply_to_options(app); }

std::string closest_name(std::string_view given, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = std::max<size_t>(1, given.size() / 3) + 1;
  for (const std::string& n : names) {
    const size_t d = edit_distance(given, n);
    if (d < best_distance) {
      best = n;
      best_distance = d;
    }
  }
  return best;
}

std::string explain_unknown_name(const CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> subcommands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    subcommands.push_back(sub->get_name());
  int i = 1;
  while (i < argc && argv[i][0] == '-') ++i;
  if (i == argc) return {};
  const std::string name = argv[i];
  const auto it = std::find(subcommands.begin(), subcommands.end(), name);
  if (it == subcommands.end()) {
    const std::string near = closest_name(name, subcommands);
    return fmt::format("unknown subcommand '{}' ({}`ckv --help` lists them)", name,
                       near.empty() ? "" : fmt::format("did you mean {}? ", near));
  }
  const CLI::App* sub = app.get_subcommand(name);
  std::vector<std::string> flags;
  for (const CLI::App* a : {&app, sub})
    for (const CLI::Option* opt : a->get_options())
      for (const std::string& l : opt->get_lnames()) flags.push_back("--" + l);
  for (int j = i + 1; j < argc; ++j) {
    const std::string arg(argv[j]);
    if (!arg.starts_with("--") || arg == "--") continue;
    const std::string flag = arg.substr(0, arg.find('='));
    if (std::find(flags.begin(), flags.end(), flag) != flags.end()) continue;
    const std::string near = closest_name(flag, flags);
    return fmt::format("unknown flag {} for `ckv {}` ({}`ckv {} --help` lists them)", flag, name,
                       near.empty() ? "" : fmt::format("did you mean {}? ", near), name);
  }
  return {};
}

}  // namespace ckv::app

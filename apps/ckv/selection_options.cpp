#include "selection_options.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "core/error.h"

namespace ckv::app {

void add_selection_options(CLI::App& cmd, SelectionParams& p, std::initializer_list<std::string_view> except) {
  using Type = SelectionParam::Type;
  for (const SelectionParam& s : selection_param_table()) {
    if (std::find(except.begin(), except.end(), s.key) != except.end()) continue;
    const std::string flag(s.flag), help(s.help);
    switch (s.type) {
      case Type::Count: cmd.add_option(flag, p.*s.count, help)->capture_default_str(); break;
      case Type::Number: cmd.add_option(flag, p.*s.number, help)->capture_default_str(); break;
      case Type::Path: cmd.add_option(flag, p.*s.path, help); break;
      case Type::Switch: {
        bool SelectionParams::*on = s.on;
        cmd.add_flag_callback(flag, [&p, on, off = !(p.*on)] { p.*on = off; }, help);
        break;
      }
      case Type::Choice: {
        const std::vector<std::string> names(s.choices.begin(), s.choices.end());
        cmd.add_option_function<std::string>(flag, [&p, &s](const std::string& v) { s.set_choice_name(p, v); }, help)
            ->check(CLI::IsMember(names))
            ->default_str(s.value_text(p));
        break;
      }
    }
  }
}

void finish_selection_options(SelectionParams& p) {
  validate_selection_params(p);
  load_selection_files(p);
}

nlohmann::json selection_settings(const SelectionParams& p) {
  using Type = SelectionParam::Type;
  nlohmann::json j = nlohmann::json::object();
  for (const SelectionParam& s : selection_param_table()) {
    switch (s.type) {
      case Type::Count: j[std::string(s.key)] = p.*s.count; break;
      case Type::Number: j[std::string(s.key)] = p.*s.number; break;
      case Type::Switch: j[std::string(s.key)] = p.*s.on; break;
      case Type::Choice:
      case Type::Path: j[std::string(s.key)] = s.value_text(p); break;
    }
  }
  return j;
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

void require_method_inputs(const MethodSpec& method, const SelectionParams& p, std::string_view flag) {
  if (const SelectionParam* input = missing_method_input(method, p))
    fail<UsageError>("{}: '{}' needs {}", flag, method.name(), input->flag);
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

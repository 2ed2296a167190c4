#include "analysis/selection_params.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/duoattention.h"
#include "analysis/headkv.h"
#include "core/error.h"

namespace ckv {
namespace {

using Type = SelectionParam::Type;

SelectionParam count(std::string_view key, std::string_view flag, int64_t SelectionParams::*m, ParamRange range,
                     std::string_view help) {
  return {.key = key, .flag = flag, .type = Type::Count, .help = help, .range = range, .count = m};
}
SelectionParam number(std::string_view key, std::string_view flag, double SelectionParams::*m, ParamRange range,
                      std::string_view help) {
  return {.key = key, .flag = flag, .type = Type::Number, .help = help, .range = range, .number = m};
}
SelectionParam off_switch(std::string_view key, std::string_view flag, bool SelectionParams::*m, std::string_view help) {
  return {.key = key, .flag = flag, .type = Type::Switch, .help = help, .on = m};
}
SelectionParam path(std::string_view key, std::string_view flag, std::string SelectionParams::*m,
                    void (*load)(SelectionParams&), std::string_view help) {
  return {.key = key, .flag = flag, .type = Type::Path, .help = help, .path = m, .load = load};
}
// An enum member, its values named by `names` in the enum's order.
template <auto Member>
SelectionParam choice(std::string_view key, std::string_view flag, std::vector<std::string_view> names,
                      std::string_view help) {
  using Enum = std::remove_reference_t<decltype(std::declval<SelectionParams&>().*Member)>;
  return {.key = key, .flag = flag, .type = Type::Choice, .help = help, .choices = std::move(names),
          .get_choice = [](const SelectionParams& p) { return static_cast<int>(p.*Member); },
          .set_choice = [](SelectionParams& p, int i) { p.*Member = static_cast<Enum>(i); }};
}

constexpr ParamRange at_least(double lo) { return {.lo = lo}; }
constexpr ParamRange odd_in(double lo, double hi) { return {.lo = lo, .hi = hi, .odd = true}; }
constexpr ParamRange positive() { return {.lo = 0, .lo_open = true}; }

void load_duo_pattern(SelectionParams& p) {
  p.duo_pattern = std::make_shared<const std::vector<std::vector<double>>>(read_duo_pattern(p.duo_pattern_path));
}
void load_headkv_profile(SelectionParams& p) {
  p.headkv_profile =
      std::make_shared<const std::vector<std::vector<double>>>(read_headkv_profile(p.headkv_profile_path));
}

using P = SelectionParams;

// The one registration of every selection parameter. The help texts are the flags' own.
const std::vector<SelectionParam>& table() {
  static const std::vector<SelectionParam> t = {
      count("window", "--window", &P::window, at_least(1),
            "snapkv observation window: the last W context queries, a count >= 1. The window's entries are "
            "always kept and count in the budget (as kvpress scores them max+1)"),
      count("kernel", "--kernel", &P::kernel, odd_in(1, kMaxKernel), "snapkv pooling kernel: an odd count"),
      choice<&P::pool>("pool", "--pool", {"max", "avg"}, "snapkv pooling: max (paper) or avg (kvpress)"),
      count("h2o_rows", "--h2o-rows", &P::h2o_rows, at_least(1),
            "h2o: accumulated attention of the last N context queries"),
      count("sinks", "--sinks", &P::sinks, at_least(0),
            "Sink entries [0, N): streaming keeps them (ckv mask also reports their attention apart)"),
      number("alpha", "--alpha", &P::alpha, {.lo = 0, .hi = 1, .lo_open = true},
             "criticalkv stage-1 share of the budget, in (0, 1] (the paper's experiments: 0.5)"),
      number("eps", "--eps", &P::eps, at_least(0), "criticalkv stage-2 offset, a number >= 0"),
      number("alpha_safe", "--alpha-safe", &P::alpha_safe, {.lo = 0, .hi = 1},
             "adakv: share of the budget every head keeps, in [0, 1]"),
      choice<&P::gqa_reduce>("gqa_reduce", "--gqa-reduce", {"mean", "max"},
                             "Reduction of a KV head's query-head scores and nu: mean or max"),
      path("selection_file", "--selection-file", &P::selection_file, nullptr,
           "Path of a selection JSON of kept positions per layer and KV head: the 'file' method's "
           "(bound: {\"<layer>\": [[...], ...]}, docs/BOUND.md; eval, and mask's eviction: the "
           "ckv.selection format, docs/MASK.md)"),
      number("pyramid_beta", "--pyramid-beta", &P::pyramid_beta, at_least(1),
             "pyramidkv: the pyramid's steepness, a number >= 1 (kvpress PyramidKVPress beta)"),
      count("defensive_kernel", "--defensive-kernel", &P::defensive_kernel, odd_in(1, kMaxKernel),
            "defensivekv: average-pooling kernel, an odd count (the official press: 5)"),
      choice<&P::defensive_share>("defensive_share", "--defensive-share", {"before-window", "window"},
                                  "defensivekv: window share subtracted from stage 1's mass (--defensive-mass): "
                                  "before-window (official code: the w positions before the window) or window "
                                  "(the window itself)"),
      choice<&P::defensive_nu>("defensive_nu", "--defensive-nu", {"heads", "positions"},
                               "defensivekv: value-norm normalisation: heads (official code: across KV heads per "
                               "position) or positions (across each KV head's positions)"),
      number("defensive_mass", "--defensive-mass", &P::defensive_mass, {.lo = 0, .hi = 1, .lo_open = true},
             "defensivekv: stage 1 keeps the entries of highest window attention until their mass reaches "
             "this, less the window share; in (0, 1] (the official press: 0.9)"),
      path("duo_pattern", "--duo-pattern", &P::duo_pattern_path, load_duo_pattern,
           "duoattention: path of the head scores, one line per layer, a tab-separated score per KV "
           "head (the DuoAttention repository's full_attention_heads.tsv)"),
      count("duo_sink", "--duo-sink", &P::duo_sink, at_least(0),
            "duoattention: first entries a streaming head keeps (pattern's config.json: sink_size)"),
      count("duo_recent", "--duo-recent", &P::duo_recent, at_least(1),
            "duoattention: last entries a streaming head keeps (config.json: recent_size)"),
      count("ea_future", "--ea-future", &P::ea_future, {.lo = 1, .hi = kMaxFuture},
            "expectedattention: future positions the query statistics are rotated over (kvpress "
            "n_future_positions)"),
      count("ea_sinks", "--ea-sinks", &P::ea_sinks, at_least(0),
            "expectedattention: first entries always kept and left out of the query statistics (kvpress n_sink)"),
      number("ea_epsilon", "--ea-epsilon", &P::ea_epsilon, at_least(0),
             "expectedattention: added to the scores before the value-norm factor"),
      off_switch("ea_covariance", "--ea-no-covariance", &P::ea_covariance,
                 "expectedattention: the mean query only (kvpress use_covariance=False)"),
      off_switch("ea_vnorm", "--ea-no-vnorm", &P::ea_vnorm,
                 "expectedattention: no value-norm factor (kvpress use_vnorm=False)"),
      path("headkv_profile", "--headkv-profile", &P::headkv_profile_path, load_headkv_profile,
           "headkv: path of the head-importance profile (JSON, `ckv profile` writes one; docs/BOUND.md \"HeadKV\")"),
      number("headkv_beta", "--headkv-beta", &P::headkv_beta, at_least(1),
             "headkv: the shared pool is (B // beta) per head, B = budget - window (HeadKV's beta)"),
      number("headkv_temp", "--headkv-temp", &P::headkv_temp, positive(),
             "headkv: the normalised scores' exponent (HeadKV's temp)"),
      choice<&P::obcache_score>("obcache_score", "--obcache-score", {"joint", "key", "value"},
                                "obcache: the saliency of pruning the joint key-value pair (OBCache's default), the "
                                "key or the value"),
  };
  return t;
}

// What a range asks, in the words of the error: "must be at least 1", "outside (0, 1]".
std::string range_text(const ParamRange& r, bool finite) {
  const bool has_lo = std::isfinite(r.lo), has_hi = std::isfinite(r.hi);
  if (has_lo && has_hi) {
    if (r.odd) return fmt::format("must be odd, in [{}, {}]", r.lo, r.hi);
    if (finite) return fmt::format("outside {}{}, {}{}", r.lo_open ? '(' : '[', r.lo, r.hi, r.hi_open ? ')' : ']');
    return fmt::format("must be in [{}, {}]", r.lo, r.hi);
  }
  const std::string f = finite ? "finite and " : "";
  if (r.lo_open && r.lo == 0) return "must be " + f + "positive";
  if (r.lo == 0) return finite ? "must be finite and not negative" : "must not be negative";
  return fmt::format("must be {}at least {}", f, r.lo);
}

bool in_range(double x, const ParamRange& r) {
  return (r.lo_open ? x > r.lo : x >= r.lo) && (r.hi_open ? x < r.hi : x <= r.hi);
}

}  // namespace

std::string SelectionParam::value_text(const SelectionParams& p) const {
  switch (type) {
    case Type::Count: return std::to_string(p.*count);
    case Type::Number: return fmt::format("{}", p.*number);
    case Type::Switch: return p.*on ? "true" : "false";
    case Type::Choice: return std::string(choices[static_cast<size_t>(get_choice(p))]);
    case Type::Path: return p.*path;
  }
  return {};
}

void SelectionParam::set_choice_name(SelectionParams& p, std::string_view name) const {
  const auto it = std::find(choices.begin(), choices.end(), name);
  if (it == choices.end()) fail<UsageError>("{} '{}': one of {}", flag, name, fmt::join(choices, ", "));
  set_choice(p, static_cast<int>(it - choices.begin()));
}

void SelectionParam::check(const SelectionParams& p) const {
  if (type == Type::Count) {
    const int64_t x = p.*count;
    if (!in_range(static_cast<double>(x), range) || (range.odd && x % 2 == 0))
      fail<UsageError>("{} {}: {}", flag, x, range_text(range, false));
  } else if (type == Type::Number) {
    const double x = p.*number;
    if (!std::isfinite(x) || !in_range(x, range)) fail<UsageError>("{} {}: {}", flag, x, range_text(range, true));
  }
}

std::span<const SelectionParam> selection_param_table() { return table(); }

const SelectionParam* find_selection_param(std::string_view key_or_flag) {
  for (const SelectionParam& s : table())
    if (s.key == key_or_flag || s.flag == key_or_flag) return &s;
  return nullptr;
}

void validate_selection_params(const SelectionParams& params) {
  for (const SelectionParam& s : table()) s.check(params);
}

void load_selection_files(SelectionParams& params) {
  for (const SelectionParam& s : table())
    if (s.type == Type::Path && s.load != nullptr && !(params.*s.path).empty()) s.load(params);
}

}  // namespace ckv

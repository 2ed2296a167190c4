#include "analysis/selection.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "analysis/defensivekv.h"
#include "analysis/duoattention.h"
#include "analysis/headkv.h"
#include "analysis/layer_scores.h"
#include "analysis/pyramidkv.h"
#include "core/error.h"
#include "core/text.h"

namespace ckv {

namespace {

#define CKV_METHOD_INFO(kind, name, traits, needs, scores) {MethodSpec::Kind::kind, name, traits, needs, scores},
constexpr MethodInfo kMethods[] = {CKV_SELECTION_METHODS(CKV_METHOD_INFO)};
#undef CKV_METHOD_INFO

}  // namespace

std::string known_methods() {
  std::string out;
  for (const MethodInfo& m : kMethods)
    out += fmt::format("{}{}{}", out.empty() ? "" : ", ", m.name, (m.traits & kWrapper) ? "(BASE)" : "");
  return out;
}

namespace {

const MethodInfo* find_method(std::string_view name) {
  for (const MethodInfo& m : kMethods)
    if (name == m.name) return &m;
  return nullptr;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

int64_t share(int64_t budget, double fraction) {
  // kvpress: int(n_kept * ratio), floored to 1 when the ratio is positive and n_kept > 0.
  if (fraction <= 0 || budget <= 0) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(budget) * fraction));
}

// Stage 1 plus stage 2 of Algorithm 1 for one KV head: `first` = the stage-1 entries,
// the rest filled by (score + eps) * nu.
std::vector<int64_t> two_stage(const Eigen::RowVectorXd& score, const Eigen::RowVectorXd& nu,
                               const std::vector<int64_t>& first, int64_t budget, double eps,
                               int64_t recent_from) {
  const int64_t c = score.size();
  std::vector<char> taken(static_cast<size_t>(c), 0);
  for (int64_t i : first) taken[static_cast<size_t>(i)] = 1;
  const Eigen::RowVectorXd weighted = ((score.array() + eps) * nu.array()).matrix();
  std::vector<int64_t> kept = first;
  const int64_t rest = std::max<int64_t>(0, budget - static_cast<int64_t>(first.size()));
  for (int64_t i : top_k(weighted, rest, taken, recent_from)) kept.push_back(i);
  return sorted(kept);
}

// AdaKV's allocation: per-head budgets summing to budget * n_kv_head (docs/MATH.md §4).
std::vector<int64_t> adakv_budgets(const ScoreMatrix& scores, int64_t budget, double alpha_safe,
                                   int64_t recent_from, std::vector<std::vector<int64_t>>& safe) {
  const int64_t h_count = scores.rows(), c = scores.cols();
  const int64_t n_safe = share(budget, alpha_safe);
  std::vector<int64_t> budgets(static_cast<size_t>(h_count), 0);
  safe.assign(static_cast<size_t>(h_count), {});
  // Candidates of the joint choice: (is_safe, score) descending, ties by head then position.
  struct Entry {
    bool safe;
    double score;
    int64_t head, pos;
  };
  std::vector<Entry> entries;
  entries.reserve(static_cast<size_t>(h_count * c));
  for (int64_t g = 0; g < h_count; ++g) {
    safe[static_cast<size_t>(g)] = top_k(scores.row(g), n_safe, {}, recent_from);
    std::vector<char> is_safe(static_cast<size_t>(c), 0);
    for (int64_t i : safe[static_cast<size_t>(g)]) is_safe[static_cast<size_t>(i)] = 1;
    for (int64_t i = 0; i < c; ++i) entries.push_back({is_safe[static_cast<size_t>(i)] != 0, scores(g, i), g, i});
  }
  const int64_t total = std::min<int64_t>(budget * h_count, h_count * c);
  // Only which entries are in the top `total` counts, not their order.
  std::nth_element(entries.begin(), entries.begin() + total, entries.end(),
                    [recent_from](const Entry& a, const Entry& b) {
                      if (a.safe != b.safe) return a.safe;
                      if (a.score != b.score) return a.score > b.score;
                      // Window entries (all max + 1): the most recent first, across heads.
                      const bool ra = a.pos >= recent_from, rb = b.pos >= recent_from;
                      if (ra != rb) return ra;
                      if (ra && a.pos != b.pos) return a.pos > b.pos;
                      if (a.head != b.head) return a.head < b.head;
                      return a.pos < b.pos;
                    });
  for (int64_t i = 0; i < total; ++i) ++budgets[static_cast<size_t>(entries[static_cast<size_t>(i)].head)];
  return budgets;
}

void check_scores(const ScoreMatrix& m, const SelectionInputs& in, std::string_view what) {
  if (m.rows() != in.n_kv_head || m.cols() != in.c)
    fail<InputError>("selection: the {} scores are missing or not [{}, {}]", what, in.n_kv_head, in.c);
}

// A selection file's kept positions index [c]-sized buffers: each must be in [0, c) and
// appear once (a duplicate would also inflate the kept count).
void check_file_kept(const SelectionInputs& in) {
  if (static_cast<int64_t>(in.file_kept.size()) != in.n_kv_head)
    fail<InputError>("selection: the --selection-file entry of this layer has {} lists, not one per KV head ({})",
                     in.file_kept.size(), in.n_kv_head);
  for (int64_t g = 0; g < in.n_kv_head; ++g) {
    std::vector<char> seen(static_cast<size_t>(in.c), 0);
    for (int64_t i : in.file_kept[static_cast<size_t>(g)]) {
      if (i < 0 || i >= in.c)
        fail<InputError>("selection: KV head {}: position {} outside the context [0, {})", g, i, in.c);
      if (seen[static_cast<size_t>(i)]++)
        fail<InputError>("selection: KV head {}: position {} listed twice", g, i);
    }
  }
}

}  // namespace

MethodSpec MethodSpec::parse(std::string_view text) {
  const std::string_view s = trim(text);
  const size_t open = s.find('(');
  const bool wrapped = open != std::string_view::npos;
  if (wrapped && s.back() != ')') fail<UsageError>("--methods: '{}' lacks its closing ')'", s);
  const std::string_view head = wrapped ? trim(s.substr(0, open)) : s;
  const MethodInfo* info = find_method(head);
  if (info == nullptr || ((info->traits & kWrapper) != 0) != wrapped)
    fail<UsageError>("--methods: unknown method '{}' (known: {})", head, known_methods());
  MethodSpec spec;
  spec.kind = info->kind;
  if (!wrapped) return spec;
  MethodSpec base = parse(s.substr(open + 1, s.size() - open - 2));
  if (base.kind == Kind::CriticalKV) fail<UsageError>("--methods: '{}': criticalkv must be the outermost method", s);
  if (spec.kind == Kind::AdaKV && base.kind == Kind::AdaKV) fail<UsageError>("--methods: '{}': adakv cannot wrap adakv", s);
  if (base.has(kOwnStages)) fail<UsageError>("--methods: '{}': {} has its own stages and allocation", s, base.leaf().name());
  if (spec.kind == Kind::AdaKV && base.has(kOwnHeadBudgets))
    fail<UsageError>("--methods: '{}': {} has its own per-head allocation", s, base.leaf().name());
  if (!base.has(kScored)) fail<UsageError>("--methods: '{}': {} has no scores to build on", s, base.leaf().name());
  spec.base = std::make_shared<const MethodSpec>(std::move(base));
  return spec;
}

std::string MethodSpec::name() const {
  const char* own = method_info(kind).name;
  return base ? fmt::format("{}({})", own, base->name()) : std::string(own);
}

bool MethodSpec::has(MethodTrait trait) const { return (method_info(leaf().kind).traits & trait) != 0; }

bool MethodSpec::any_has(MethodTrait trait) const {
  return (method_info(kind).traits & trait) != 0 || (base && base->any_has(trait));
}

const MethodInfo& method_info(MethodSpec::Kind kind) {
  // The enum and the table are both made from CKV_SELECTION_METHODS, in its order.
  return kMethods[static_cast<size_t>(kind)];
}

const SelectionParam* missing_method_input(const MethodSpec& method, const SelectionParams& p) {
  const char* needs = method_info(method.leaf().kind).needs;
  if (needs == nullptr) return nullptr;
  const SelectionParam* input = find_selection_param(needs);
  if (input == nullptr || input->type != SelectionParam::Type::Path)
    throw std::logic_error(fmt::format("method {} needs {}, which is not a path parameter", method.name(), needs));
  return (p.*input->path).empty() ? input : nullptr;
}

double parse_budget_fraction(std::string_view text, std::string_view flag) {
  double x = 0;
  const std::string item(trim(text));
  // "20%" is read as "20e-2": the one rounding of the decimal, the same double as "0.2".
  const bool percent = item.ends_with('%') && item.size() > 1;
  const std::string number = percent ? item.substr(0, item.size() - 1) + "e-2" : item;
  try {
    size_t used = 0;
    x = std::stod(number, &used);
    if (used != number.size() || (percent && number.find_first_of("eE") != number.size() - 3))
      throw std::invalid_argument(item);
  } catch (const std::exception&) {
    fail<UsageError>("{}: '{}' is not a number", flag, item);
  }
  if (!(x > 0 && x <= 1))
    fail<UsageError>("{}: {} is outside (0, 1] (a fraction of the evictable context; use --keep N for counts)",
                     flag, item);
  return x;
}

void check_keep(int64_t keep) {
  if (keep < 1) fail<UsageError>("--keep {}: must be at least 1 (kept entries per KV head)", keep);
}

int64_t budget_from_fraction(int64_t c, double fraction) {
  const double compression_ratio = 1.0 - fraction;
  if (compression_ratio >= 1.0) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(c) * (1.0 - compression_ratio)));
}

Budget budget_of_fraction(int64_t c, double fraction) {
  const double compression_ratio = 1.0 - fraction;  // what a kvpress user would pass
  return {budget_from_fraction(c, fraction), 1.0 - compression_ratio};
}

int64_t recent_tie_start(const MethodSpec& method, int64_t c, const SelectionParams& params) {
  return method.has(kWindowTies) ? std::max<int64_t>(0, c - params.window) : c;
}

std::vector<int64_t> top_k(const Eigen::Ref<const Eigen::RowVectorXd>& scores, int64_t k,
                           const std::vector<char>& exclude, int64_t recent_from) {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(scores.size()));
  for (int64_t i = 0; i < scores.size(); ++i)
    if (exclude.empty() || !exclude[static_cast<size_t>(i)]) idx.push_back(i);
  k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(idx.size()));
  // A total order (ties by position: the lower first, the more recent first from
  // recent_from on), so the top k are one set: select it in O(c), then sort only those k.
  const auto before = [&](int64_t a, int64_t b) {
    if (scores[a] != scores[b]) return scores[a] > scores[b];
    const bool ra = a >= recent_from, rb = b >= recent_from;
    if (ra != rb) return ra;
    return ra ? a > b : a < b;
  };
  std::nth_element(idx.begin(), idx.begin() + k, idx.end(), before);
  std::sort(idx.begin(), idx.begin() + k, before);
  idx.resize(static_cast<size_t>(k));
  return idx;
}

ScoreMatrix reduce_groups(const ScoreMatrix& per_head, int64_t n_kv_head, GqaReduce reduce) {
  const int64_t group = per_head.rows() / n_kv_head;
  ScoreMatrix out(n_kv_head, per_head.cols());
  for (int64_t g = 0; g < n_kv_head; ++g) {
    const auto rows = per_head.middleRows(g * group, group);
    if (reduce == GqaReduce::Mean) out.row(g) = rows.colwise().mean();
    else out.row(g) = rows.colwise().maxCoeff();
  }
  return out;
}

Eigen::RowVectorXd pool_row(const Eigen::RowVectorXd& row, int64_t kernel, PoolKind pool) {
  const int64_t n = row.size(), pad = kernel / 2;
  Eigen::RowVectorXd out(n);
  for (int64_t i = 0; i < n; ++i) {
    double acc = pool == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
    // Max pads with -inf, avg with zeros (still divides by kernel): only [0, n) contributes.
    for (int64_t j = std::max<int64_t>(0, i - pad), end = std::min(n - 1, i + pad); j <= end; ++j)
      acc = pool == PoolKind::Max ? std::max(acc, row[j]) : acc + row[j];
    out[i] = pool == PoolKind::Max ? acc : acc / static_cast<double>(kernel);
  }
  return out;
}

ScoreMatrix leaf_scores(const MethodSpec& leaf, const SelectionInputs& in, int64_t budget,
                        const SelectionParams& params) {
  using Kind = MethodSpec::Kind;
  if (method_info(leaf.kind).layer_scores != nullptr) {
    const auto it = in.layer_scores.find(leaf.kind);
    if (it == in.layer_scores.end()) fail<InputError>("selection: the {} scores are missing", leaf.name());
    check_scores(it->second, in, leaf.name());
    return it->second;
  }
  switch (leaf.kind) {
    case Kind::Attn: check_scores(in.attn, in, "attn"); return in.attn;
    case Kind::SnapKV:
    case Kind::HeadKV:
    case Kind::PyramidKV: check_scores(in.snapkv, in, "snapkv"); return in.snapkv;
    case Kind::H2O: check_scores(in.h2o, in, "h2o"); return in.h2o;
    case Kind::Oracle: check_scores(in.oracle_rank, in, "oracle"); return in.oracle_rank;
    case Kind::OBCache: check_scores(in.obcache, in, "obcache"); return in.obcache;
    case Kind::Streaming: {
      // kvpress StreamingLLMPress: zeros on [sinks, sinks + n_pruned), ones elsewhere.
      ScoreMatrix s = ScoreMatrix::Ones(in.n_kv_head, in.c);
      const int64_t pruned = in.c - std::min(budget, in.c);
      const int64_t begin = std::min(params.sinks, in.c), end = std::min(in.c, params.sinks + pruned);
      if (end > begin) s.middleCols(begin, end - begin).setZero();
      return s;
    }
    case Kind::File: {
      check_file_kept(in);
      ScoreMatrix s = ScoreMatrix::Zero(in.n_kv_head, in.c);
      for (int64_t g = 0; g < in.n_kv_head; ++g)
        for (int64_t i : in.file_kept[static_cast<size_t>(g)]) s(g, i) = 1;
      return s;
    }
    default: break;
  }
  fail<InputError>("selection: '{}' is not a leaf method", leaf.name());
}

Selection select(const MethodSpec& method, const SelectionInputs& in, Budget given,
                 const SelectionParams& params) {
  using Kind = MethodSpec::Kind;
  const int64_t h_count = in.n_kv_head;
  int64_t budget = std::clamp<int64_t>(given.kept, 0, in.c);
  Selection out;
  out.kept.resize(static_cast<size_t>(h_count));
  out.stage1.resize(static_cast<size_t>(h_count));
  if (method.kind == Kind::File) {
    check_file_kept(in);
    for (int64_t g = 0; g < h_count; ++g) {
      out.kept[static_cast<size_t>(g)] = sorted(in.file_kept[static_cast<size_t>(g)]);
      out.stage1[static_cast<size_t>(g)] = out.kept[static_cast<size_t>(g)];
    }
    return out;
  }
  if (method.kind == Kind::DefensiveKV || method.kind == Kind::LayerDefensiveKV) {
    if (!in.defensive) fail<InputError>("selection: the {} scores are missing", method.name());
    int64_t total = defensive_layer_total(given, in.c, h_count);
    if (method.kind == Kind::LayerDefensiveKV) {
      const auto it = in.layer_totals.find(given);
      if (it == in.layer_totals.end())
        fail<InputError>("selection: layer-defensivekv has no layer allocation for budget {}", budget);
      total = it->second;
    }
    return select_defensive(*in.defensive, given, total);
  }
  if (method.kind == Kind::DuoAttention) return select_duo(in, budget, params);
  if (method.leaf().kind == Kind::PyramidKV) {
    if (in.n_layer <= 0) fail<InputError>("selection: pyramidkv needs the layer's depth");
    budget = std::clamp<int64_t>(pyramid_budget(in.layer, in.n_layer, in.c, given, params), 0, in.c);
  }
  const ScoreMatrix scores = leaf_scores(method.leaf(), in, budget, params);
  const bool critical = method.kind == Kind::CriticalKV;
  const MethodSpec& inner = critical ? *method.base : method;
  std::vector<int64_t> budgets(static_cast<size_t>(h_count), budget);
  std::vector<std::vector<int64_t>> safe(static_cast<size_t>(h_count));
  const bool ada = inner.kind == Kind::AdaKV;
  const int64_t recent = recent_tie_start(method, in.c, params);
  if (ada) budgets = adakv_budgets(scores, budget, params.alpha_safe, recent, safe);
  if (method.leaf().kind == Kind::HeadKV) {
    if (!params.headkv_profile) fail<InputError>("headkv needs --headkv-profile");
    if (in.n_layer <= 0 || in.n_head <= 0) fail<InputError>("selection: headkv needs the layer's depth and heads");
    budgets = headkv_budgets(headkv_kv_scores(*params.headkv_profile, in.n_layer, in.n_head, h_count), in.layer,
                             in.c, budget, params);
  }
  if (critical) check_scores(in.nu, in, "nu");

  for (int64_t g = 0; g < h_count; ++g) {
    const auto gi = static_cast<size_t>(g);
    const int64_t b = budgets[gi];
    const Eigen::RowVectorXd row = scores.row(g);
    // The top k by score in decreasing order: every smaller top set is a prefix of it.
    auto prefix = [](const std::vector<int64_t>& top, int64_t k) {
      return std::vector<int64_t>(top.begin(), top.begin() + std::min<int64_t>(k, static_cast<int64_t>(top.size())));
    };
    if (!critical) {
      const int64_t first = share(b, params.alpha);
      const std::vector<int64_t> top = top_k(row, std::max(b, first), {}, recent);
      out.kept[gi] = sorted(prefix(top, b));
      out.stage1[gi] = prefix(top, first);
      continue;
    }
    // Plain criticalkv floors stage 1 to one entry (kvpress CriticalKVPress); the adakv
    // composition takes int(b_g * alpha) and keeps the safeguard set with it
    // (CriticalAdaKVPress scores both with float max before stage 2).
    int64_t first = ada ? static_cast<int64_t>(static_cast<double>(b) * params.alpha) : share(b, params.alpha);
    const int64_t fixed = std::min(b, ada ? std::max<int64_t>(first, static_cast<int64_t>(safe[gi].size())) : first);
    const std::vector<int64_t> top = top_k(row, std::max(first, fixed), {}, recent);
    out.stage1[gi] = prefix(top, first);
    out.kept[gi] = two_stage(row, in.nu.row(g), prefix(top, fixed), b, params.eps, recent);
  }
  return out;
}

}  // namespace ckv

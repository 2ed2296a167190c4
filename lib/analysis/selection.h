#pragma once
// KV-cache selection methods (docs/MATH.md §4) over the evictable context [0, c) of one layer,
// one selection per KV head, reproducing kvpress's presses (SnapKVPress, StreamingLLMPress,
// AdaKVPress, CriticalKVPress, CriticalAdaKVPress) rule for rule:
//
//   * budgets: b entries of the c evictable ones per KV head (`budget_from_fraction` is
//     kvpress's compute_n_kept); the snapkv observation window counts in b;
//   * snapkv scores the window's own entries max + 1 (the maximum over the whole layer, as
//     kvpress pads), so they are kept whenever the budget allows, inside the budget;
//   * criticalkv: stage 1 = top max(1, floor(alpha b)) by the base score; stage 2 = top of
//     the rest by (score + eps) * nu, nu reduced over the KV head's query heads;
//   * adakv: each head keeps its top max(1, floor(alpha_safe b)); then the top b * n_kv_head
//     of the layer jointly; criticalkv(adakv(base)) runs the two stages per head with the
//     head's allocated budget, its stage 1 widened to the safeguard set as kvpress does.
//
// Ties (equal scores) are broken by the lower position first (then the lower KV head for
// the joint adakv choice), except inside the snapkv observation window, whose entries all
// score max + 1: there the most recent entry wins (then the lower KV head), so a budget below
// the window keeps the window's most recent entries. torch.topk leaves ties unspecified, so
// kvpress may differ only where scores tie exactly.
#include <compare>
#include <cstdint>
#include <map>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "analysis/selection_params.h"

namespace ckv {

struct LayerTensors;
struct LayerRequest;
class ThreadPool;
using ScoreMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// What a selection method reads and how it composes (MethodInfo::traits).
enum MethodTrait : unsigned {
  kScored = 1U << 0,            // ranks by a score that adakv(X) and criticalkv(X) can build on
  kOwnHeadBudgets = 1U << 1,    // allocates its per-head budgets itself: adakv cannot wrap it
  kOwnStages = 1U << 2,         // its own stages and allocation: nothing wraps it
  kLayerGlobal = 1U << 3,       // per-layer budgets from all layers' scores (a pre-pass)
  kSnapkvScores = 1U << 4,      // ranks by snapkv's scores
  kWindowTies = 1U << 5,        // its observation window scores max + 1: ties go to the most recent
  kReadsQuestion = 1U << 6,     // ranks by the evaluation (question) queries' attention
  kNeedsNu = 1U << 7,           // reads the value norms nu
  kNeedsRope = 1U << 8,         // reads the layer's RoPE frequencies (LayerRequest::rope_inv_freq)
  kAbsolutePositions = 1U << 9, // reads absolute positions: refused on a layer holding only its window
  kWrapper = 1U << 10,          // wraps a base method: adakv(X), criticalkv(X)
};

// Scores a method computes from its layer's tensors alone, [n_kv_head, c] over the
// evictable context (layer_scores.h); bound, check, mask and eval all reach them through
// bound_layer's layer inputs, on a sliding layer over the entries it holds.
using LayerScoreFn = ScoreMatrix (*)(const LayerTensors&, const LayerRequest&, ThreadPool*);

// The one registration of every selection method (docs/BOUND.md "Methods"):
//   X(Kind, name, traits, flag it needs or nullptr, LayerScoreFn or nullptr)
// A method scored from its layer's tensors needs this line and its LayerScoreFn only;
// the wrappers (adakv, criticalkv) come last. The enum, --methods' parser and its list of
// known methods, and every question a subcommand asks of a method (MethodSpec::has) read it.
#define CKV_SELECTION_METHODS(X)                                                                         \
  X(Attn, "attn", kScored | kReadsQuestion, nullptr, nullptr)                                            \
  X(SnapKV, "snapkv", kScored | kSnapkvScores | kWindowTies, nullptr, nullptr)                           \
  X(H2O, "h2o", kScored, nullptr, nullptr)                                                               \
  X(Streaming, "streaming", kScored, nullptr, nullptr)                                                   \
  X(File, "file", 0U, "--selection-file", nullptr)                                                       \
  X(Oracle, "oracle", 0U, nullptr, nullptr)                                                              \
  X(DefensiveKV, "defensivekv", kOwnStages | kNeedsNu, nullptr, nullptr)                                 \
  X(LayerDefensiveKV, "layer-defensivekv", kOwnStages | kNeedsNu | kLayerGlobal, nullptr, nullptr)       \
  X(PyramidKV, "pyramidkv", kScored | kSnapkvScores, nullptr, nullptr)                                   \
  X(DuoAttention, "duoattention", 0U, "--duo-pattern", nullptr)                                          \
  X(ExpectedAttention, "expectedattention", kScored | kNeedsRope | kAbsolutePositions, nullptr,          \
    expected_attention_layer_scores)                                                                     \
  X(HeadKV, "headkv", kScored | kSnapkvScores | kWindowTies | kOwnHeadBudgets, "--headkv-profile",       \
    nullptr)                                                                                             \
  X(OBCache, "obcache", kScored | kWindowTies, nullptr, nullptr)                                         \
  X(KNorm, "knorm", kScored, nullptr, knorm_layer_scores)                                                \
  X(KeyDiff, "keydiff", kScored, nullptr, keydiff_layer_scores)                                          \
  X(AdaKV, "adakv", kWrapper, nullptr, nullptr)                                                          \
  X(CriticalKV, "criticalkv", kWrapper | kNeedsNu, nullptr, nullptr)

// A method expression: a leaf method of CKV_SELECTION_METHODS, or adakv(X) / criticalkv(X)
// around one that has scores (kScored); criticalkv is the outermost, adakv does not wrap adakv
// nor a method with its own per-head budgets. See each method's header (pyramidkv.h,
// duoattention.h, expected_attention.h, headkv.h, obcache.h, defensivekv.h, layer_scores.h).
struct MethodSpec {
#define CKV_METHOD_KIND(kind, ...) kind,
  enum class Kind { CKV_SELECTION_METHODS(CKV_METHOD_KIND) };
#undef CKV_METHOD_KIND
  Kind kind = Kind::Attn;
  std::shared_ptr<const MethodSpec> base;  // set for AdaKV and CriticalKV

  // Throws UsageError "--methods: unknown method 'x' (known: ...)" or a nesting error.
  static MethodSpec parse(std::string_view text);
  std::string name() const;
  bool is_leaf() const { return !base; }
  // The leaf method whose scores drive this one.
  const MethodSpec& leaf() const { return base ? base->leaf() : *this; }
  // Whether the leaf method has `trait`.
  bool has(MethodTrait trait) const;
  // Whether this method or one it wraps has `trait` (criticalkv(snapkv) reads nu).
  bool any_has(MethodTrait trait) const;
  // Its per-layer budgets come from all layers' scores (a pre-pass: layer_defensive_totals).
  bool layer_global() const { return has(kLayerGlobal); }
  // Ranks by snapkv's scores (snapkv, pyramidkv, headkv).
  bool uses_snapkv() const { return has(kSnapkvScores); }
};

// A method's registration (CKV_SELECTION_METHODS).
struct MethodInfo {
  MethodSpec::Kind kind;
  const char* name;
  unsigned traits;
  const char* needs;         // the flag of an input it reads (a file), or nullptr
  LayerScoreFn layer_scores;  // its scores from the layer's tensors, or nullptr
};
const MethodInfo& method_info(MethodSpec::Kind kind);
// The path parameter (selection_params.h) that `method` reads its input from (file:
// selection_file, headkv: headkv_profile, duoattention: duo_pattern) when p leaves it empty;
// nullptr when the method reads no file or its path is set.
const SelectionParam* missing_method_input(const MethodSpec& method, const SelectionParams& p);
// "attn, snapkv, ..., adakv(BASE), criticalkv(BASE)": every registered method, for help
// texts and the unknown-method error.
std::string known_methods();

struct DefensiveScores;

// kvpress's compute_n_kept with compression_ratio = 1 - fraction: max(1, int(c * fraction)).
int64_t budget_from_fraction(int64_t c, double fraction);

// A budget as the reference implementations receive it (docs/BOUND.md "Budgets"). kvpress and
// the official DefensiveKV code take a compression ratio r (a fraction f given to ckv is
// r = 1 - f) and evaluate their budget formulas on the keep share 1 - r in floating point
// (for f = 0.2: 1 - (1 - 0.2) = 0.19999999999999996), not on the rounded count b:
//   * PyramidKV's pyramid is built on c (1 - r);
//   * DefensiveKV keeps int(c (1 - r) n_kv_head) per layer, Layer-DefensiveKV
//     int(c (1 - r) n_kv_head n_layer) over the layers, both with a stage-1 cap of
//     int((c - w)(1 - r) - w).
// A count (--keep N) has no ratio: the formulas get (1 - r) c = N.
struct Budget {
  int64_t kept = 0;       // b: kept entries per KV head (budget_from_fraction for a fraction)
  double keep_share = 0;  // 1 - r as the references compute it; 0 for a count

  Budget() = default;
  Budget(int64_t count) : kept(count) {}  // NOLINT(google-explicit-constructor): a count is a budget
  Budget(int64_t b, double share) : kept(b), keep_share(share) {}
  bool is_count() const { return keep_share <= 0; }
  // c (1 - r) unrounded (b for a count).
  double per_head(int64_t c) const { return is_count() ? static_cast<double>(kept) : static_cast<double>(c) * keep_share; }
  auto operator<=>(const Budget&) const = default;
};

// The budget of a fraction of the c evictable entries: {budget_from_fraction(c, f), 1 - (1 - f)}.
Budget budget_of_fraction(int64_t c, double fraction);

// One budget as `ckv bound --budgets` and `ckv mask --budget` read it: a fraction of the
// evictable context in (0, 1] (1 keeps everything); counts go through --keep. Throws
// UsageError naming `flag`.
double parse_budget_fraction(std::string_view text, std::string_view flag);

// --keep N: kept entries per KV head; N >= 1. Throws UsageError.
void check_keep(int64_t keep);

// Per-KV-head inputs of the selection of one layer. Scores are [n_kv_head, c], already
// reduced over each KV head's query heads (snapkv's window entries included).
struct SelectionInputs {
  int64_t c = 0;           // evictable entries
  int64_t n_kv_head = 0;
  int64_t n_head = 0;              // query heads (headkv reduces a query-head profile)
  int64_t layer = 0, n_layer = 0;  // pyramidkv's and headkv's budgets depend on the layer
  ScoreMatrix attn;        // [n_kv_head, c] mean attention of the evaluation queries
  ScoreMatrix snapkv;      // [n_kv_head, c]
  ScoreMatrix h2o;         // [n_kv_head, c]
  ScoreMatrix nu;          // [n_kv_head, c] group-reduced L1 nu (criticalkv stage 2)
  ScoreMatrix oracle_rank; // [n_kv_head, c] greedy pick order as a score (oracle.h); may be empty
  ScoreMatrix obcache;     // [n_kv_head, c] obcache (obcache.h), the window max + 1; may be empty
  std::vector<std::vector<int64_t>> file_kept;  // [n_kv_head][*] for --selection-file
  std::shared_ptr<const DefensiveScores> defensive;  // defensivekv, layer-defensivekv
  std::map<Budget, int64_t> layer_totals;  // layer-global methods: budget -> this layer's total
  // [n_kv_head, c] of each method with a LayerScoreFn the request names (expectedattention, ...).
  std::map<MethodSpec::Kind, ScoreMatrix> layer_scores;
};

struct Selection {
  std::vector<std::vector<int64_t>> kept;    // [n_kv_head][b_g] increasing positions
  std::vector<std::vector<int64_t>> stage1;  // [n_kv_head][b1_g] the stage-1 (or top) set
};

// Selects `budget` entries per KV head (on average, for adakv). Throws InputError when the
// method needs inputs that are missing (an empty score matrix, no file selection).
Selection select(const MethodSpec& method, const SelectionInputs& in, Budget budget,
                 const SelectionParams& params);

// The score a leaf method ranks by, [n_kv_head, c]; streaming's depends on the budget.
ScoreMatrix leaf_scores(const MethodSpec& leaf, const SelectionInputs& in, int64_t budget,
                        const SelectionParams& params);

// Indices of the k largest of `scores` (ties: lower index first, but among indices >=
// `recent_from` the higher index first, and those before the others), skipping `exclude`d
// ones (may be empty), in decreasing score order.
std::vector<int64_t> top_k(const Eigen::Ref<const Eigen::RowVectorXd>& scores, int64_t k,
                           const std::vector<char>& exclude = {},
                           int64_t recent_from = std::numeric_limits<int64_t>::max());

// Where the most-recent-first tie order starts for a method: the snapkv observation window
// [c - window, c) when the method's leaf is snapkv, else nowhere (c).
int64_t recent_tie_start(const MethodSpec& method, int64_t c, const SelectionParams& params);

// Reduce query-head rows [n_head, c] to KV-head rows [n_kv_head, c] (GQA group mean/max).
ScoreMatrix reduce_groups(const ScoreMatrix& per_head, int64_t n_kv_head, GqaReduce reduce);

// snapkv's pooling of one row: stride 1, padding kernel/2, output the same length. Avg is
// torch's avg_pool1d (zero padding counted in the mean), max pads with -inf.
Eigen::RowVectorXd pool_row(const Eigen::RowVectorXd& row, int64_t kernel, PoolKind pool);

}  // namespace ckv

#pragma once
// What `ckv mask` evicts (docs/MATH.md §6, context-only compression): per layer and KV head, a
// set of context positions in [0, c). The masked forward pass adds -inf to the logits of
// (query rows >= c, evicted keys) for every query head of that KV head and nothing else,
// so context rows [0, c) are computed exactly as without a mask.
//
//   EvictionPlan plan = plan_from_spans(parse_spans("120-140,300-310", "--spans"), c, seq,
//                                       layers, kv_heads, n_layer, n_kv_head);
//   ForwardRequest req;  req.mask = plan.to_mask(seq);
//
// Spans are half-open [start, end) token positions, as Python slices and the spans of
// input records (lib/data/records.h). Every error is one InputError line naming the option
// or file and what is wrong.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string_view>
#include <vector>

#include "analysis/selection.h"
#include "core/spans.h"
#include "model/config.h"
#include "model/weights.h"
#include "ops/attention.h"

namespace ckv {

class ThreadPool;

struct EvictionPlan {
  int64_t n_layer = 0, n_kv_head = 0;
  int64_t c = 0;    // context end: only positions < c are evicted
  int64_t seq = 0;  // prompt length the plan was checked against
  std::vector<std::vector<std::vector<int64_t>>> evicted;  // [n_layer][n_kv_head] increasing, < c

  static EvictionPlan none(int64_t n_layer, int64_t n_kv_head, int64_t c, int64_t seq);
  const std::vector<int64_t>& at(int64_t layer, int64_t kv_head) const {
    return evicted[static_cast<size_t>(layer)][static_cast<size_t>(kv_head)];
  }
  std::vector<int64_t>& at(int64_t layer, int64_t kv_head) {
    return evicted[static_cast<size_t>(layer)][static_cast<size_t>(kv_head)];
  }
  bool empty() const;           // nothing evicted anywhere
  int64_t total_evicted() const;  // sum over layers and KV heads
  // [c] 1 where position i is evicted for (layer, kv_head).
  std::vector<char> evicted_flags(int64_t layer, int64_t kv_head) const;
  // The forward pass's mask: rows [c, q_end) of each (layer, KV head) with evictions get
  // -inf on its evicted keys. q_end may exceed seq (generated tokens attend the same way).
  std::map<int64_t, std::vector<AttentionMaskSpan>> to_mask(int64_t q_end) const;
};

// "120-140,300-310,77": half-open ranges and single positions. Throws InputError naming
// `option` for malformed text or an empty range.
std::vector<SpanRange> parse_spans(std::string_view text, std::string_view option);

// Checks spans against the context [0, c) of a prompt of seq tokens: each must lie in
// [0, c) (positions >= c are the question, which the protocol never evicts). `what` names
// the source in the message ("--spans", "span \"needle\"").
void check_spans(const std::vector<SpanRange>& spans, int64_t c, int64_t seq, std::string_view what);

// Evicts the union of the spans in every listed layer and KV head. Throws InputError for a
// bad or empty span set (check_spans) or an empty layer/head list.
EvictionPlan plan_from_spans(const std::vector<SpanRange>& spans, int64_t c, int64_t seq,
                             const std::vector<int64_t>& layers, const std::vector<int64_t>& kv_heads,
                             int64_t n_layer, int64_t n_kv_head, std::string_view what);

// The named spans of a record ("needle"): InputError listing the known names when absent.
std::vector<SpanRange> named_spans(const NamedSpans& spans, std::string_view name, std::string_view record);

// A selection file (docs/MASK.md): JSON
//   {"format": "ckv.selection", "format_version": 1, "c": 812,
//    "layers": {"0": {"kept": [[0, 1, 5, ...], [...]]}, "3": {"evicted": [[120, 121], []]}}}
// one list per KV head of either the kept or the evicted context positions. Layers not
// listed are not masked; --layers/--heads further restrict what the file says. Throws
// InputError naming the file for bad JSON, positions outside [0, c), a wrong number of
// heads, a head that keeps nothing, or a "c" that differs from the prompt's.
EvictionPlan plan_from_selection_file(const std::filesystem::path& path, int64_t c, int64_t seq,
                                      const std::vector<int64_t>& layers,
                                      const std::vector<int64_t>& kv_heads, int64_t n_layer,
                                      int64_t n_kv_head);

// `ckv bound`'s selection file (its "file" method, docs/BOUND.md): the format above with
// "kept" lists, or the old unversioned one (*old_format set true, when given)
//   {"<layer>": [[kv_head 0 positions], [kv_head 1 ...], ...]}
// a layer index of the model, one list per KV head, each position an integer >= 0 listed
// once (the upper end, a record's c, is the caller's to check per record). Throws IoError /
// InputError for a path that is not a regular file (core/input_file.h), InputError naming
// the file and the entry for anything else ("evicted" lists included: they need a record's c).
std::map<int64_t, std::vector<std::vector<int64_t>>> read_layer_selection_file(const std::filesystem::path& path,
                                                                                int64_t n_layer, int64_t n_kv_head,
                                                                                bool* old_format = nullptr);

// The evicted complement of `kept` in [0, c) (kept need not be sorted).
std::vector<int64_t> complement(const std::vector<int64_t>& kept, int64_t c);

// --method/--budget: a selection method of `ckv bound` (lib/analysis/selection.h) run inside
// the masked forward pass, layer by layer, on that layer's own keys, values, observation
// window and evaluation queries as the masked run computes them (so a layer sees the
// effect of the evictions below it, as a real compressor would). Budgets are kept entries
// per KV head.
struct MethodMask {
  MethodSpec method;
  Budget budget;  // kept per KV head (with a fraction's keep share, selection.h)
  SelectionParams params;
  int64_t c = 0;
  std::vector<int64_t> eval_rows;  // the question rows, for the attn method
  std::vector<int64_t> layers, kv_heads;
  // Threads for the per-layer selection (nu and the scores); null: the calling thread. The
  // forward pass's own pool is idle while the source runs, so a second pool of the same
  // size does not oversubscribe.
  ThreadPool* pool = nullptr;
  // Layer-global methods (layer-defensivekv): layer -> its kept entries over its KV heads,
  // from a pre-pass over all layers (layer_allocation.h: DefensiveCollector::totals).
  std::map<int64_t, int64_t> layer_totals;
};

// Checks the request (InputError for a budget that keeps nothing or everything, a method
// that needs inputs a forward pass does not have: file, oracle) and returns the
// ForwardRequest::layer_mask that selects per layer and writes the evictions into *plan
// (which must be EvictionPlan::none of the run and outlive it).
std::function<void(int64_t, const Tensor&, const Tensor&, const Tensor&, std::vector<AttentionMaskSpan>&)>
method_mask_source(const ModelConfig& config, const ModelWeights& weights, const MethodMask& request,
                   EvictionPlan* plan);

// --budget "0.2": a fraction of the c evictable entries in (0, 1] with kvpress's rounding,
// exactly as `ckv bound --budgets` reads it (parse_budget_fraction; UsageError otherwise).
// InputError when the budget keeps the whole context (nothing to evict).
int64_t parse_budget(std::string_view text, int64_t c);
// The kept entries per KV head of `ckv mask --method`: --budget FRACTION when `fraction` is
// not empty (with its keep share, Budget in selection.h), else --keep `keep` (check_keep);
// InputError when it keeps all c entries.
Budget mask_budget(std::string_view fraction, int64_t keep, int64_t c);

}  // namespace ckv

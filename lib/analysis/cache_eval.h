#pragma once
// Generation under eviction with a KV cache, the way deployed presses run it (kvpress's
// pipeline; docs/EVAL.md): prefill the context into a cache, select per layer and KV head
// with a method of `ckv bound`, physically drop the evicted entries, feed the question over
// what is left and decode greedily. One record is evaluated for every method x budget
// against the full cache:
//
//   1. the context [0, c) is prefilled once; every method's selection of every layer is
//      made inside that pass from the layer's own Q/K/V (those rows are the same with or
//      without eviction, so this equals selecting inside a masked pass); the attn method,
//      which ranks by the question's queries, selects inside its own question pass, layer
//      by layer before the attention, as `ckv mask --method attn` does;
//   2. the full cache: the question is fed, the reference answer teacher-forced (log p),
//      the cache truncated back and the answer decoded; the first decoded token is fed
//      over the full cache with a probe that measures, per layer and query head, the
//      actual perturbation L1/L2 (docs/MATH.md §3) of each selection at that query: what
//      `ckv bound --eval first-decode` reports for the same selection;
//   3. per method x budget: a copy of the context cache with the evicted entries dropped,
//      then the question, teacher forcing and decoding as in 2.
//   4. with track_steps = N (docs/EVAL.md "Along the answer"): the full cache's first N greedy
//      tokens are teacher-forced over the full cache and over every compressed cache, so that
//      both see the same prefix; at each step s (the s-th answer token, fed at position
//      n + s - 1) and per layer and query head, the actual perturbation L1/L2 of the selection
//      at that step's query over the full cache and its bound theta_hat (docs/MATH.md §3), and
//      the next-token KL of the row (compressed against full). Step 1 is the first decoded
//      token, the query of 2.'s probe.
//
// With compress = prompt the whole prompt is prefilled and evictable (c = n; docs/BOUND.md
// "Protocol"): the first token comes from the prefill's last row (no compressed entry is
// read yet), so the first row that reads the compressed cache is the first decoded token's.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/mask_metrics.h"
#include "analysis/mask_plan.h"
#include "analysis/selection.h"
#include "model/decode.h"
#include "model/forward.h"
#include "model/model.h"

namespace ckv {

class ThreadPool;

struct CacheEvalSettings {
  std::vector<MethodSpec> methods;
  std::vector<double> budgets;  // fractions of the evictable entries in (0, 1)
  SelectionParams params;
  bool compress_prompt = false;  // evict from the whole prompt (the paper's code), not the context
  std::string selection_file;    // the "file" method's selections (mask_plan.h format)
  int64_t max_new_tokens = 32;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
  int64_t track_steps = 0;  // answer tokens followed after compression (0: none; at most max_new_tokens)
};

struct CacheEvalInput {
  std::string id;
  std::vector<int32_t> prompt;       // [n] context + question
  int64_t context_end = 0;           // question starts here
  std::vector<int32_t> answer_ids;   // the reference answer's tokens for teacher forcing (may be empty)
};

// One decoding under one cache: the full one, or a method at a budget.
struct CacheEvalRun {
  std::string method;         // "full" for the uncompressed cache
  double fraction = 1;        // the budget as given
  int64_t budget = 0;         // kept entries per KV head (mean for adakv); c for full
  int64_t kept_entries = 0;   // evictable entries the cache kept, over layers and KV heads
  std::vector<int64_t> kept_per_head;  // [n_layer * n_kv_head]
  Decoded decoded;
  std::optional<double> logp_answer;  // Σ log p(answer tokens) under teacher forcing
  EvictionPlan plan;          // what the method evicted (none for full)
  NextToken first;            // the first row that reads this cache against the full cache's
  int64_t first_row = 0;      // its position (n - 1 for --compress context, n for prompt)
  std::vector<float> first_logits;  // [vocab] that row's logits
  double mean_l1 = 0, mean_l2 = 0;  // actual perturbation at the first decoded token, mean over layers and heads
  std::vector<float> l1, l2;  // [n_layer * n_head] the same per layer and query head
  // Along the answer (track_steps; empty for the full cache and without it), per step s of
  // CacheEvalResult::step_tokens, layer and query head, [steps * n_layer * n_head]: the actual
  // perturbation at the step's query and the theta_hat bounds (L1 and L2 norms).
  std::vector<float> step_l1, step_l2, step_theta_hat, step_theta_hat_l2;
  std::vector<NextToken> step_next;  // [steps] the step row's next token against the full cache's
};

struct CacheEvalResult {
  int64_t n = 0, c = 0, question_start = 0;
  int32_t first_token = -1;   // the full cache's first decoded token (the probe's query)
  // The full cache's first min(track_steps, answer length) greedy tokens, teacher-forced over
  // every cache: step s feeds step_tokens[s - 1] at position n + s - 1.
  std::vector<int32_t> step_tokens;
  CacheEvalRun full;
  std::vector<CacheEvalRun> runs;  // [method x budget], methods outer
};

// Checks settings that need no model: budgets in (0, 1), methods available with a cache
// (file needs selection_file; oracle is refused; attn needs compress context), track_steps
// in [0, max_new_tokens]. UsageError.
void check_cache_eval_settings(const CacheEvalSettings& settings);

// Evaluates one record. Throws InputError for a record with no question (context_end >= n)
// under --compress context, or a context too short for the snapkv window.
CacheEvalResult evaluate_with_cache(Forward& forward, const Model& model, const CacheEvalInput& input,
                                    const CacheEvalSettings& settings, ThreadPool& pool);

}  // namespace ckv

#pragma once
// The measurements of `ckv mask` for one record (docs/MASK.md): one unmasked forward pass
// and one masked pass per eviction (the target, a --compare method at the same budget, then
// each placebo), captured at the evaluation rows (the question, positions >= c) and compared
// layer by layer; next-token KL, top-1 agreement, the gold answer's log-probability and a
// greedy continuation under the same eviction at the end. The command line gives the
// options and writes the MaskRecord (mask_schema.h).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "analysis/mask_metrics.h"
#include "analysis/mask_plan.h"
#include "analysis/selection.h"
#include "core/thread_pool.h"
#include "data/records.h"
#include "model/forward.h"
#include "model/model.h"
#include "output/mask_schema.h"

namespace ckv {

// What `ckv mask`'s flags ask for. The target eviction is exactly one of spans, span_name,
// selection_file and method (with budget or keep).
struct MaskRunOptions {
  std::string spans;           // --spans: half-open token ranges of the context
  std::string span_name;       // --span-name: the record's span of this name
  std::string method, budget;  // --method, run inside the masked pass at --budget (a fraction)
  int64_t keep = 0;            // --keep N: kept entries per KV head, instead of --budget
  std::string compare;         // --compare: a second method at the same budget
  std::string selection_file;  // --selection-file: kept positions (mask_plan.h's format)
  SelectionParams params;      // the selection settings (sinks also for the sink scores)
  std::string layers = "all", heads = "all";  // the masked layers and KV heads
  int64_t placebo = 0, generate = 0;  // placebo spans; greedy continuation tokens
  double match_tol = 0.25;     // accepted |Delta_theta ratio - 1| of a placebo
  uint64_t seed = 0;           // placebo seed
  bool verify_physical = false, no_answer_space = false;
};

// One record as the runs get it.
struct MaskPrompt {
  std::string id;
  int64_t index = 0;
  std::vector<int32_t> prompt;  // [prompt_len]
  int64_t c = 0;                // context end
  std::optional<std::string> answer;
  NamedSpans spans;             // token spans by name
};

// Runs records one at a time with one model; keeps the placebo counts over them.
class MaskRunner {
 public:
  MaskRunner(const MaskRunOptions& o, const Model& model, Forward& fwd, ThreadPool& pool)
      : o_(o), model_(model), fwd_(fwd), pool_(pool) {}

  // Every run of one record. Too few placebos within --match-tol is a note on the record
  // (its placebo["note"]), not an error: it keeps the placebos that matched.
  MaskRecord run(const MaskPrompt& p);
  // Placebo spans asked for and found, over the records run so far.
  std::pair<int64_t, int64_t> placebo_counts() const { return {placebos_requested_, placebos_found_}; }

 private:
  // The target eviction: by --method (selected inside the masked pass; method_ and compare_
  // set for measure), by --selection-file, or by --spans / --span-name.
  MaskRun target_run(const MaskPrompt& p, const MaskRecord& rec, const std::vector<int64_t>& layers,
                     const std::vector<int64_t>& kv_heads);
  std::map<int64_t, int64_t> layer_totals(const std::vector<int32_t>& tokens, int64_t c, const MethodMask& m);
  double answer_logp(const ForwardResult& out, const std::vector<int32_t>& answer) const;
  void measure(const MaskRecord& rec, const MaskCapture& full, const ForwardResult& full_out,
               const std::vector<int32_t>& answer_ids, const std::vector<int64_t>& logit_rows, MaskRun& run,
               bool gen);
  Generation generate(const MaskPrompt& p, const EvictionPlan& plan);
  void draw_and_run_placebos(MaskRecord& rec, const MaskCapture& full, const ForwardResult& full_out,
                             const std::vector<int32_t>& answer_ids, const std::vector<int64_t>& logit_rows,
                             const std::vector<int64_t>& layers, const std::vector<int64_t>& kv_heads);

  const MaskRunOptions& o_;
  std::optional<MethodMask> method_, compare_;  // --method, --compare
  int64_t placebos_requested_ = 0, placebos_found_ = 0;
  const Model& model_;
  Forward& fwd_;
  ThreadPool& pool_;
};

}  // namespace ckv

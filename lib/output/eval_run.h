#pragma once
// What `ckv eval` computes for one record (docs/EVAL.md): the full cache and every method x
// budget (analysis/cache_eval.h), each decoded greedily and scored as the record's task
// defines (data/answer_score.h), as the EvalRecord its file stores (eval_schema.h).
#include "analysis/cache_eval.h"
#include "core/thread_pool.h"
#include "data/records.h"
#include "model/forward.h"
#include "model/model.h"
#include "output/eval_schema.h"

namespace ckv {

// `prompt` is the record tokenised (tokenize_record); `answer_space` puts a space before the
// reference answer for its log p (answer_token_ids). The model must have a tokenizer.
EvalRecord evaluate_record(Forward& forward, const Model& model, const InputRecord& record,
                           const RecordPrompt& prompt, const CacheEvalSettings& settings, bool answer_space,
                           ThreadPool& pool);

}  // namespace ckv

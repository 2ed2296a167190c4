#include "output/eval_run.h"

#include "data/answer_score.h"
#include "model/tokenizer.h"
#include "output/describe.h"

namespace ckv {

EvalRecord evaluate_record(Forward& forward, const Model& model, const InputRecord& r, const RecordPrompt& prompt,
                           const CacheEvalSettings& settings, bool answer_space, ThreadPool& pool) {
  EvalRecord rec;
  rec.id = r.id;
  rec.index = r.index;
  rec.task = r.task;
  rec.answers = r.answers;
  rec.prompt = prompt.tokens;
  rec.prompt_text = token_texts(model.tokenizer.get(), prompt.tokens);
  rec.decoded_text = [&model](const std::vector<int32_t>& ids) { return token_texts(model.tokenizer.get(), ids); };
  rec.answer_ids = answer_token_ids(r, *model.tokenizer, answer_space);
  rec.result = evaluate_with_cache(forward, model,
                                   {.id = r.id, .prompt = prompt.tokens, .context_end = prompt.context_end,
                                    .answer_ids = rec.answer_ids},
                                   settings, pool);
  if (r.task != AnswerTask::None) {
    rec.scores.push_back(score_answer(r.task, rec.result.full.decoded.text, r.answers));
    for (const CacheEvalRun& run : rec.result.runs) rec.scores.push_back(score_answer(r.task, run.decoded.text, r.answers));
  }
  return rec;
}

}  // namespace ckv

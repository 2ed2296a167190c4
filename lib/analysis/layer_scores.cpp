#include "analysis/layer_scores.h"

#include "analysis/expected_attention.h"
#include "core/error.h"

namespace ckv {

ScoreMatrix expected_attention_layer_scores(const LayerTensors& t, const LayerRequest& r, ThreadPool* pool) {
  if (!r.rope_inv_freq) fail<InputError>("expectedattention: the model's RoPE frequencies are missing");
  return expected_attention_scores(*t.q, *t.k, *t.v, r.c, *r.rope_inv_freq, r.params, pool);
}

}  // namespace ckv

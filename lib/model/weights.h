#pragma once
// Weights of a llama/qwen2 decoder in float32, HF layout (GGUF's llama Q/K row permutation
// already undone). Shapes use the project vocabulary: d_model, n_head, n_kv_head, d_head,
// d_ff, vocab.
#include <vector>

#include "core/tensor.h"

namespace ckv {

struct LayerWeights {
  Tensor attn_norm;  // [d_model]
  Tensor wq;         // [n_head*d_head, d_model]
  Tensor wk;         // [n_kv_head*d_head, d_model]
  Tensor wv;         // [n_kv_head*d_head, d_model]
  Tensor bq;         // [n_head*d_head] or empty
  Tensor bk;         // [n_kv_head*d_head] or empty
  Tensor bv;         // [n_kv_head*d_head] or empty
  Tensor wo;         // [d_model, n_head*d_head]
  Tensor ffn_norm;   // [d_model]
  Tensor w_gate;     // [d_ff, d_model]
  Tensor w_up;       // [d_ff, d_model]
  Tensor w_down;     // [d_model, d_ff]
};

struct ModelWeights {
  Tensor token_embd;             // [vocab, d_model]
  Tensor output_norm;            // [d_model]
  Tensor output;                 // [vocab, d_model]; empty when tied to token_embd
  std::vector<float> rope_freq_factors;  // [d_head/2] divisors of inv_freq, empty if none
  std::vector<LayerWeights> layers;

  const Tensor& lm_head() const { return output.empty() ? token_embd : output; }
};

}  // namespace ckv

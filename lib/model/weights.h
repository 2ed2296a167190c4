#pragma once
// Weights of a decoder of the families of model/family.h in HF layout (GGUF's llama Q/K row
// permutation undone by a row map; fused q/k/v and gate/up projections split into row views
// of the stored matrix). The matrices stay in their stored dtype, viewed in the memory-mapped file
// (io/weight_matrix.h); the small vectors (norms, biases, rope factors) are float32. Shapes
// use the project vocabulary: d_model, n_head, n_kv_head, d_head, d_ff, vocab.
#include <vector>

#include "core/tensor.h"
#include "io/weight_matrix.h"

namespace ckv {

// One expert of a mixture-of-experts layer: a SiLU-gated MLP of width d_ff_expert. From a
// GGUF, row views of the layer's stacked ffn_*_exps tensors.
struct ExpertWeights {
  WeightMatrix w_gate;  // [d_ff_expert, d_model]
  WeightMatrix w_up;    // [d_ff_expert, d_model]
  WeightMatrix w_down;  // [d_model, d_ff_expert]
};

struct LayerWeights {
  Tensor attn_norm;     // [d_model]
  WeightMatrix wq;      // [n_head*d_head, d_model]
  WeightMatrix wk;      // [n_kv_head*d_head, d_model]
  WeightMatrix wv;      // [n_kv_head*d_head, d_model]
  Tensor bq;            // [n_head*d_head] or empty
  Tensor bk;            // [n_kv_head*d_head] or empty
  Tensor bv;            // [n_kv_head*d_head] or empty
  Tensor q_norm;        // [d_head] or empty: RMSNorm of each q head before RoPE (qwen3)
  Tensor k_norm;        // [d_head] or empty
  WeightMatrix wo;      // [d_model, n_head*d_head]
  Tensor post_attn_norm;  // [d_model] or empty: RMSNorm of the attention output (gemma3)
  Tensor ffn_norm;      // [d_model]
  Tensor post_ffn_norm;   // [d_model] or empty: RMSNorm of the MLP output (gemma3)
  WeightMatrix w_gate;  // [d_ff, d_model]
  WeightMatrix w_up;    // [d_ff, d_model]
  WeightMatrix w_down;  // [d_model, d_ff]
  // An expert layer (ModelConfig::expert_layer) has these in place of w_gate/w_up/w_down:
  WeightMatrix ffn_gate_inp;           // [n_expert, d_model] the router
  std::vector<ExpertWeights> experts;  // [n_expert]
};

struct ModelWeights {
  WeightMatrix token_embd;               // [vocab, d_model]
  Tensor output_norm;                    // [d_model]
  WeightMatrix output;                   // [vocab, d_model]; empty when tied to token_embd
  std::vector<float> rope_freq_factors;  // [d_head/2] divisors of inv_freq, empty if none
  std::vector<LayerWeights> layers;

  const WeightMatrix& lm_head() const { return output.empty() ? token_embd : output; }
  // Bytes of the matrices in their stored dtype (the mapped part of the model).
  uint64_t matrix_bytes() const;
};

// A copy of w with every matrix converted to owned float32 (the float32-at-load form that
// ckv used before weights kept their dtype; tests compare the two paths).
ModelWeights dequantized_copy(const ModelWeights& w);

}  // namespace ckv

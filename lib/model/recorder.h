#pragma once
// What a forward pass records and the callbacks that receive it. Names follow
// TransformerLens (hook_q, hook_pattern, ...) so recorded tensors are recognisable; shapes
// use the project vocabulary. Rows are token positions in [0, seq).
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace ckv {

// Only what is asked for is computed: nothing here costs anything when left empty, and no
// request materialises an n x n attention matrix.
struct RecordRequest {
  std::vector<int64_t> layers;         // layers to record; empty = every layer
  bool qkv = false;                    // post-RoPE Q, K, V of each recorded layer
  std::vector<int64_t> attn_rows;      // [r] query rows whose attention probabilities are kept
  std::vector<int64_t> head_out_rows;  // [r] query rows whose per-head outputs are kept
  bool residual = false;               // residual stream after each recorded layer

  bool wants_layer(int64_t layer) const;
  bool empty() const { return !qkv && attn_rows.empty() && head_out_rows.empty() && !residual; }
};

// Receives recorded tensors. Each reference is valid only during the call (buffers are
// reused by the next layer): copy what you keep. Calls come from the thread that called
// Forward::run, in layer order.
class Recorder {
 public:
  virtual ~Recorder() = default;
  // q: [n_head, seq, d_head], k, v: [n_kv_head, seq, d_head]; q and k after RoPE.
  virtual void on_qkv(int64_t /*layer*/, const Tensor& /*q*/, const Tensor& /*k*/,
                      const Tensor& /*v*/) {}
  // probs: [n_head, r, seq] softmax probabilities of rows attn_rows (in request order),
  // 0 after each row's position; with a mask, the masked (renormalised) probabilities.
  virtual void on_attention(int64_t /*layer*/, std::span<const int64_t> /*rows*/,
                            const Tensor& /*probs*/) {}
  // head_out: [n_head, r, d_model]; head_out[h, i] = W_h-projected output of head h at row
  // rows[i]: o_proj.weight[:, h*d_head:(h+1)*d_head] @ attention_output_h (docs/MATH.md §1;
  // the sum over h is the attention block output).
  virtual void on_head_outputs(int64_t /*layer*/, std::span<const int64_t> /*rows*/,
                               const Tensor& /*head_out*/) {}
  // resid: [seq, d_model], the residual stream after the layer (before the final norm).
  virtual void on_residual(int64_t /*layer*/, const Tensor& /*resid*/) {}
};

}  // namespace ckv

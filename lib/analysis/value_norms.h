#pragma once
// Value-projected norms nu (docs/MATH.md §1): nu[h, i] = ‖v_i W_h‖ for every cached entry i of
// query head h, where v_i is the value of h's KV head (GQA: g = h / group) and
// W_h = o_proj.weight[:, h*d_head:(h+1)*d_head]^T, shape [d_head, d_model].
//
// P = V W_h ([seq, d_model] per head) is never materialised: the L1 norm is computed over
// [block, d_model] tiles of P, one tile at a time, and the L2 norm uses the d_head x d_head
// Gram matrix G_h = W_h W_h^T, ‖v W_h‖_2^2 = v G_h v^T, which costs d_head^2 per entry
// instead of d_head * d_model.
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ckv {

class ThreadPool;

struct ValueNormOptions {
  bool l1 = true;
  bool l2 = true;
  int64_t block = 128;  // rows of P per tile; bounds scratch memory at block * d_model floats
};

struct ValueNorms {
  Tensor l1;  // [n_sel, seq], empty unless asked
  Tensor l2;  // [n_sel, seq], empty unless asked
};

// v: [n_kv_head, seq, d_head]; wo: [d_model, n_head*d_head] (HF o_proj.weight).
// heads: the query heads to compute (rows of the result, in this order); empty = all.
// Throws InputError when shapes disagree or a head is out of range. With a pool, heads
// are computed in parallel.
ValueNorms value_norms(const Tensor& v, const Tensor& wo, int64_t n_head,
                       const std::vector<int64_t>& heads, const ValueNormOptions& options = {},
                       ThreadPool* pool = nullptr);

}  // namespace ckv

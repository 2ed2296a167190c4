#include "ops/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "ops/linear.h"
#include "ops/mlp.h"

namespace ckv {

MoeRouting moe_route(const Tensor& logits, int64_t n_used, bool normalize) {
  if (logits.rank() != 2) fail<InputError>("moe_route: logits {} are not [rows, n_expert]", logits.shape_string());
  const int64_t rows = logits.dim(0), n_expert = logits.dim(1);
  if (n_used < 1 || n_used > n_expert)
    fail<InputError>("moe_route: {} experts per token of {}", n_used, n_expert);
  MoeRouting out;
  out.n_used = n_used;
  out.expert.resize(static_cast<size_t>(rows * n_used));
  out.weight.resize(static_cast<size_t>(rows * n_used));
  std::vector<float> prob(static_cast<size_t>(n_expert));
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = logits.data() + r * n_expert;
    const float top = *std::max_element(z, z + n_expert);
    // A NaN or infinite logit (weights that overflow) has no softmax and no order to sort by.
    for (int64_t e = 0; e < n_expert; ++e)
      if (!std::isfinite(z[e]))
        fail<FormatError>("moe_route: router logit {} of expert {} at row {} is not finite", z[e], e, r);
    float sum = 0;
    for (int64_t e = 0; e < n_expert; ++e) sum += prob[static_cast<size_t>(e)] = std::exp(z[e] - top);
    for (float& p : prob) p /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + n_used, order.end(), [&](int32_t a, int32_t b) {
      const float pa = prob[static_cast<size_t>(a)], pb = prob[static_cast<size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    });
    float kept = 0;
    for (int64_t j = 0; j < n_used; ++j) kept += prob[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int64_t j = 0; j < n_used; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      const auto slot = static_cast<size_t>(r * n_used + j);
      out.expert[slot] = e;
      out.weight[slot] = normalize ? prob[static_cast<size_t>(e)] / kept : prob[static_cast<size_t>(e)];
    }
  }
  return out;
}

void moe_mlp(ExecContext& ctx, const Tensor& x, const WeightMatrix& router, std::span<const MoeExpert> experts,
             int64_t n_used, bool normalize, Tensor& y) {
  const auto n_expert = static_cast<int64_t>(experts.size());
  if (x.rank() != 2 || router.rows() != n_expert || router.cols() != x.dim(1))
    fail<InputError>("moe_mlp: input {}, router {} and {} experts do not fit together", x.shape_string(),
                     router.shape_string(), n_expert);
  if (&y == &x) fail<InputError>("moe_mlp: output must not alias the input");
  const int64_t rows = x.dim(0), d_model = x.dim(1);
  Tensor logits;  // [rows, n_expert]
  linear(ctx, x, router, Tensor(), logits);
  const MoeRouting routing = moe_route(logits, n_used, normalize);
  // The rows routed to each expert, in row order, and their weights.
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(n_expert));
  std::vector<std::vector<float>> weights_of(static_cast<size_t>(n_expert));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n_used; ++j) {
      const auto slot = static_cast<size_t>(r * n_used + j);
      rows_of[static_cast<size_t>(routing.expert[slot])].push_back(r);
      weights_of[static_cast<size_t>(routing.expert[slot])].push_back(routing.weight[slot]);
    }
  y = Tensor({rows, d_model});  // zeros
  Tensor xe, ye;                // [n_e, d_model]: the expert's rows of x, and its outputs
  for (int64_t e = 0; e < n_expert; ++e) {
    const std::vector<int64_t>& idx = rows_of[static_cast<size_t>(e)];
    if (idx.empty()) continue;
    const MoeExpert& ex = experts[static_cast<size_t>(e)];
    const auto n = static_cast<int64_t>(idx.size());
    if (xe.rank() != 2 || xe.dim(0) != n) xe = Tensor({n, d_model});
    for (int64_t i = 0; i < n; ++i) xe.matrix().row(i) = x.matrix().row(idx[static_cast<size_t>(i)]);
    gated_mlp(ctx, xe, *ex.w_gate, *ex.w_up, *ex.w_down, ye);
    const std::vector<float>& w = weights_of[static_cast<size_t>(e)];
    for (int64_t i = 0; i < n; ++i)
      y.matrix().row(idx[static_cast<size_t>(i)]) += w[static_cast<size_t>(i)] * ye.matrix().row(i);
  }
}

}  // namespace ckv

#include "analysis/pyramidkv.h"

#include <algorithm>
#include <cmath>

namespace ckv {

int64_t pyramid_budget(int64_t layer, int64_t n_layer, int64_t c, Budget budget, const SelectionParams& params) {
  const auto w = static_cast<double>(params.window), q_len = static_cast<double>(c);
  const double b = budget.per_head(c);  // q_len * (1 - compression_ratio), not rounded
  const double max_capacity = w + b;
  double min_num = (max_capacity - w) / params.pyramid_beta;
  double max_num = (max_capacity - w) * 2 - min_num;
  if (max_num >= q_len - w) {
    max_num = q_len - w;
    min_num = (max_capacity - w) * 2 - max_num;
  }
  // std::nearbyint rounds half to even in the default rounding mode, as Python's round.
  if (!(q_len >= max_num && max_num >= min_num && min_num >= w))
    return std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(b)));
  const double steps = n_layer > 1 ? (max_num - min_num) / static_cast<double>(n_layer - 1) : 0.0;
  return static_cast<int64_t>(std::nearbyint(max_num - static_cast<double>(layer) * steps));
}

}  // namespace ckv

#include "analysis/layer_scores.h"

#include <algorithm>
#include <cmath>

#include "analysis/expected_attention.h"
#include "core/error.h"

namespace ckv {

ScoreMatrix expected_attention_layer_scores(const LayerTensors& t, const LayerRequest& r, ThreadPool* pool) {
  if (!r.rope_inv_freq) fail<InputError>("expectedattention: the model's RoPE frequencies are missing");
  return expected_attention_scores(*t.q, *t.k, *t.v, r.c, *r.rope_inv_freq, r.params, pool);
}

namespace {

// Keys [0, c) of KV head g in double, [c, d_head].
MatrixD context_keys(const LayerTensors& t, int64_t g, int64_t c) {
  const int64_t seq = t.k->dim(1), d = t.k->dim(2);
  if (c <= 0 || c > seq) fail<InputError>("selection: context end {} outside [1, {}]", c, seq);
  return ConstMatrixMap(t.k->data() + g * seq * d, c, d).cast<double>();
}

}  // namespace

ScoreMatrix knorm_layer_scores(const LayerTensors& t, const LayerRequest& r, ThreadPool*) {
  ScoreMatrix s(t.k->dim(0), r.c);
  for (int64_t g = 0; g < s.rows(); ++g) s.row(g) = -context_keys(t, g, r.c).rowwise().norm().transpose();
  return s;
}

ScoreMatrix keydiff_layer_scores(const LayerTensors& t, const LayerRequest& r, ThreadPool*) {
  ScoreMatrix s(t.k->dim(0), r.c);
  for (int64_t g = 0; g < s.rows(); ++g) {
    const MatrixD k = context_keys(t, g, r.c);
    const Eigen::VectorXd norms = k.rowwise().norm();
    Eigen::RowVectorXd anchor = Eigen::RowVectorXd::Zero(k.cols());
    for (int64_t j = 0; j < k.rows(); ++j) anchor += k.row(j) / std::max(norms[j], 1e-12);
    anchor /= static_cast<double>(k.rows());
    const double anchor_norm = std::max(anchor.norm(), 1e-8);
    for (int64_t j = 0; j < k.rows(); ++j) s(g, j) = -k.row(j).dot(anchor) / (std::max(norms[j], 1e-8) * anchor_norm);
  }
  return s;
}

}  // namespace ckv

// GCC 12 reports false -Wmaybe-uninitialized inside its AVX-512 intrinsics when inlining
// Eigen products (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "analysis/expected_attention.h"

#include <cmath>

#include "analysis/perturbation.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/rope.h"

namespace ckv {

ScoreMatrix expected_attention_scores(const Tensor& q, const Tensor& k, const Tensor& v, int64_t c,
                                      std::span<const float> inv_freq, const SelectionParams& params,
                                      ThreadPool* pool) {
  const int64_t n_head = q.dim(0), seq = q.dim(1), d = q.dim(2), n_kv = k.dim(0), group = n_head / n_kv;
  const int64_t half = d / 2, s = params.ea_sinks, n = c - s;
  if (c > seq || k.dim(1) != seq || v.dim(1) != seq)
    fail<InputError>("expectedattention: context end {} beyond the layer's {} positions", c, seq);
  if (n <= 0)
    fail<InputError>("expectedattention: the context of {} tokens is not longer than --ea-sinks {}", c, s);
  if (static_cast<int64_t>(inv_freq.size()) != half || 2 * half != d)
    fail<UnsupportedError>("expectedattention: the model rotates {} of its {} head dims (partial rotary), and "
                           "expectedattention undoes a rotation of the whole head only", 2 * inv_freq.size(), d);

  // The forward pass's cos/sin (float, as applied) for [0, c) and the future [c, c + T).
  const RopeTable table = make_rope_table(inv_freq, c + params.ea_future);
  // R = mean_t [[C, -S], [S, C]] (blocks of the rotate_half layout), per frequency i.
  Eigen::VectorXd cbar = Eigen::VectorXd::Zero(half), sbar = Eigen::VectorXd::Zero(half);
  for (int64_t t = c; t < c + params.ea_future; ++t)
    for (int64_t i = 0; i < half; ++i) {
      cbar[i] += table.cos[static_cast<size_t>(t * half + i)];
      sbar[i] += table.sin[static_cast<size_t>(t * half + i)];
    }
  cbar /= static_cast<double>(params.ea_future);
  sbar /= static_cast<double>(params.ea_future);
  MatrixD rot = MatrixD::Zero(d, d);
  for (int64_t i = 0; i < half; ++i) {
    rot(i, i) = rot(i + half, i + half) = cbar[i];
    rot(i, i + half) = -sbar[i];
    rot(i + half, i) = sbar[i];
  }

  ScoreMatrix per_head(n_head, n);
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
  const auto task = [&](int64_t h) {
    // Pre-RoPE queries of [s, c): x = x' cos + rotate_half^T(x') sin.
    MatrixD x(n, d);
    for (int64_t p = s; p < c; ++p) {
      const float* row = q.data() + (h * seq + p) * d;
      const float* cs = table.cos.data() + p * half;
      const float* sn = table.sin.data() + p * half;
      for (int64_t i = 0; i < half; ++i) {
        const double lo = row[i], hi = row[i + half], co = cs[i], si = sn[i];
        x(p - s, i) = lo * co + hi * si;
        x(p - s, i + half) = hi * co - lo * si;
      }
    }
    const Eigen::RowVectorXd mean = x.colwise().mean();
    const Eigen::VectorXd mu = rot * mean.transpose();
    const MatrixD keys = ConstMatrixMap(k.data() + ((h / group) * seq + s) * d, n, d).cast<double>();
    Eigen::VectorXd z = keys * mu * inv_sqrt_d;
    if (params.ea_covariance) {
      x.rowwise() -= mean;
      const MatrixD cov = (x.transpose() * x) / static_cast<double>(n);
      const MatrixD cov_r = rot * cov * rot.transpose();
      z += ((keys * cov_r).cwiseProduct(keys)).rowwise().sum() / (2.0 * static_cast<double>(d));
    }
    const double top = z.maxCoeff();
    const Eigen::ArrayXd e = (z.array() - top).exp();
    per_head.row(h) = (e / e.sum()).matrix().transpose();
  };
  if (pool) pool->parallel_for(n_head, task);
  else for (int64_t h = 0; h < n_head; ++h) task(h);

  ScoreMatrix out(n_kv, c);
  for (int64_t g = 0; g < n_kv; ++g) {
    Eigen::RowVectorXd row = per_head.middleRows(g * group, group).colwise().mean();
    if (params.ea_vnorm) {
      const MatrixD vals = ConstMatrixMap(v.data() + (g * seq + s) * d, n, d).cast<double>();
      row = ((row.array() + params.ea_epsilon) * vals.rowwise().norm().transpose().array()).matrix();
    }
    out.row(g).tail(n) = row;
  }
  // kvpress pads the sinks with scores.max() + 1 over the layer.
  const double pad = out.rightCols(n).maxCoeff() + 1.0;
  out.leftCols(s).setConstant(pad);
  return out;
}

}  // namespace ckv

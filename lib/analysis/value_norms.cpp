// GCC 12 reports false -Wmaybe-uninitialized inside its AVX-512 intrinsics when inlining
// Eigen products (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "analysis/value_norms.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"

namespace ckv {

namespace {

using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void check_shapes(const Tensor& v, const Tensor& wo, int64_t n_head,
                  const std::vector<int64_t>& heads) {
  if (v.rank() != 3) fail<InputError>("value norms: v must be [n_kv_head, seq, d_head], got {}", v.shape_string());
  const int64_t n_kv_head = v.dim(0), d_head = v.dim(2);
  if (n_head <= 0 || n_kv_head <= 0 || n_head % n_kv_head != 0)
    fail<InputError>("value norms: {} query heads cannot share {} KV heads", n_head, n_kv_head);
  if (wo.rank() != 2 || wo.dim(1) != n_head * d_head)
    fail<InputError>("value norms: o_proj must be [d_model, {}], got {}", n_head * d_head,
                     wo.shape_string());
  for (int64_t h : heads)
    if (h < 0 || h >= n_head) fail<InputError>("value norms: head {} outside [0, {})", h, n_head);
}

}  // namespace

ValueNorms value_norms(const Tensor& v, const Tensor& wo, int64_t n_head,
                       const std::vector<int64_t>& heads_in, const ValueNormOptions& options,
                       ThreadPool* pool) {
  check_shapes(v, wo, n_head, heads_in);
  std::vector<int64_t> heads = heads_in;
  if (heads.empty())
    for (int64_t h = 0; h < n_head; ++h) heads.push_back(h);
  const int64_t n_kv_head = v.dim(0), seq = v.dim(1), d_head = v.dim(2);
  const int64_t d_model = wo.dim(0), group = n_head / n_kv_head;
  const int64_t n_sel = static_cast<int64_t>(heads.size());
  const int64_t block = std::max<int64_t>(1, options.block);

  ValueNorms out;
  if (options.l1) out.l1 = Tensor({n_sel, seq});
  if (options.l2) out.l2 = Tensor({n_sel, seq});
  const ConstMatrixMap wo_map = wo.matrix();  // [d_model, n_head*d_head]

  auto one_head = [&](int64_t i) {
    const int64_t h = heads[static_cast<size_t>(i)];
    const int64_t g = h / group;
    const ConstMatrixMap vg(v.data() + g * seq * d_head, seq, d_head);  // [seq, d_head]
    const auto w_t = wo_map.block(0, h * d_head, d_model, d_head);     // W_h^T: [d_model, d_head]
    if (options.l1) {
      RowMatrix tile(block, d_model);  // [block, d_model]: one tile of P = V W_h
      float* dst = out.l1.data() + i * seq;
      for (int64_t r0 = 0; r0 < seq; r0 += block) {
        const int64_t rows = std::min(block, seq - r0);
        tile.topRows(rows).noalias() = vg.middleRows(r0, rows) * w_t.transpose();
        for (int64_t r = 0; r < rows; ++r) dst[r0 + r] = tile.row(r).cwiseAbs().sum();
      }
    }
    if (options.l2) {
      // Double precision: the quadratic form subtracts nothing, but d_model-long sums of
      // products lose digits in float for large-norm rows.
      const RowMatrixD w_d = w_t.cast<double>();                     // [d_model, d_head]
      const RowMatrixD gram = w_d.transpose() * w_d;                 // [d_head, d_head]
      float* dst = out.l2.data() + i * seq;
      // Blocks of 64 rows keep V's block and its product with G (32 KiB each at d_head 64)
      // in the L1/L2 cache for the second pass.
      const int64_t gram_block = std::min<int64_t>(block, 64);
      for (int64_t r0 = 0; r0 < seq; r0 += gram_block) {
        const int64_t rows = std::min(gram_block, seq - r0);
        const RowMatrixD vb = vg.middleRows(r0, rows).cast<double>();  // [rows, d_head]
        const Eigen::VectorXd sq = (vb * gram).cwiseProduct(vb).rowwise().sum();
        for (int64_t r = 0; r < rows; ++r)
          dst[r0 + r] = static_cast<float>(std::sqrt(std::max(0.0, sq[r])));
      }
    }
  };
  if (pool != nullptr && n_sel > 1) {
    pool->parallel_for(n_sel, one_head);
  } else {
    for (int64_t i = 0; i < n_sel; ++i) one_head(i);
  }
  return out;
}

}  // namespace ckv

// GCC 12 reports false -Wmaybe-uninitialized inside its AVX-512 intrinsics when inlining
// Eigen products (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "analysis/obcache.h"

namespace ckv {

Eigen::RowVectorXd obcache_window_scores(const MatrixD& attn, const MatrixD& logits, const MatrixD& v, int64_t c,
                                         ObcacheScore kind) {
  const int64_t w = attn.rows(), prefix = logits.cols();
  const MatrixD out = attn.leftCols(c) * v.topRows(c);                               // [w, d]  o_r
  const auto vp = v.topRows(prefix);                                                 // [prefix, d]
  const Eigen::RowVectorXd vn = vp.rowwise().squaredNorm().transpose();              // ||v_i||^2
  const Eigen::VectorXd on = out.rowwise().squaredNorm();                            // ||o_r||^2
  const MatrixD vo = out * vp.transpose();                                           // [w, prefix] v_i.o_r
  const auto a = attn.leftCols(prefix).array();
  const Eigen::ArrayXXd a2 = a.square();
  Eigen::ArrayXXd s = Eigen::ArrayXXd::Zero(w, prefix);
  if (kind != ObcacheScore::Key) s += a2.rowwise() * vn.array();
  if (kind != ObcacheScore::Value) {
    const auto z = logits.array();
    // ||v_i - o_r||^2 = ||v_i||^2 + ||o_r||^2 - 2 v_i.o_r, as the scores are formed.
    const Eigen::ArrayXXd dist = (vo.array() * -2.0).rowwise() + vn.array();
    s += (a * z).square() * (dist.colwise() + on.array());
    if (kind == ObcacheScore::Joint) s += 2.0 * a2 * z * ((-vo.array()).rowwise() + vn.array());
  }
  return s.colwise().sum().matrix();
}

}  // namespace ckv

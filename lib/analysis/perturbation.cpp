#include "analysis/perturbation.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ckv {

std::vector<double> attention_row(const float* q, const float* k, int64_t d_head, int64_t p) {
  std::vector<double> a(static_cast<size_t>(p + 1));
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_head));
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i <= p; ++i) {
    double dot = 0;
    const float* ki = k + i * d_head;
    for (int64_t j = 0; j < d_head; ++j) dot += static_cast<double>(q[j]) * ki[j];
    a[static_cast<size_t>(i)] = dot * scale;
    top = std::max(top, dot * scale);
  }
  double sum = 0;
  for (double& x : a) sum += (x = std::exp(x - top));
  for (double& x : a) x /= sum;
  return a;
}

MetricRow perturbation(const HeadQueryInput& in) {
  const auto n = static_cast<int64_t>(in.attn.size());
  const int64_t d = in.d_head;
  MetricRow m{};
  // S, S1 and the sums of Theorems 3.3-C.1 in one pass (MATH.md §3).
  double retained = 0, stage1 = 0, kept_value = 0, kept_value_l2 = 0, value = 0, value_l2 = 0;
  double nu_min = std::numeric_limits<double>::infinity(), nu_min_l2 = nu_min;
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    const double a = in.attn[u], n1 = in.nu_l1[u], n2 = in.nu_l2[u];
    value += a * n1;
    value_l2 += a * n2;
    nu_min = std::min(nu_min, n1);
    nu_min_l2 = std::min(nu_min_l2, n2);
    if (in.stage1[u]) stage1 += a;
    if (in.keep[u]) {
      retained += a;
      kept_value += a * n1;
      kept_value_l2 += a * n2;
    }
  }
  // o - o' = ((A - A') V) W_h with A'_i = N_i A_i / S (Theorem 3.2): first the d_head
  // vector u = (A - A') V, then W_h^T u, d_head * d_model.
  Eigen::VectorXd diff_v = Eigen::VectorXd::Zero(d);  // [d_head]
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    const double delta = in.attn[u] - (in.keep[u] && retained > 0 ? in.attn[u] / retained : 0.0);
    if (delta == 0) continue;
    const float* vi = in.v + i * d;
    for (int64_t j = 0; j < d; ++j) diff_v[j] += delta * vi[j];
  }
  double l1 = 0, l2 = 0;
  const int64_t stride = in.n_head * d;
  for (int64_t r = 0; r < in.d_model; ++r) {
    const float* w = in.wo + r * stride + in.head * d;  // row r of W_h^T
    double x = 0;
    for (int64_t j = 0; j < d; ++j) x += static_cast<double>(w[j]) * diff_v[j];
    l1 += std::abs(x);
    l2 += x * x;
  }
  const double f = 2.0 - 1.0 / retained, f1 = 2.0 - 1.0 / stage1;
  double keep_mass = retained;
  m[kL1] = l1;
  m[kL2] = std::sqrt(l2);
  m[kTheta] = value - f * kept_value;
  m[kThetaHat] = value - f1 * kept_value;
  m[kThetaRel] = value - f1 * nu_min * keep_mass;
  m[kThetaL2] = value_l2 - f * kept_value_l2;
  m[kThetaHatL2] = value_l2 - f1 * kept_value_l2;
  m[kThetaRelL2] = value_l2 - f1 * nu_min_l2 * keep_mass;
  m[kRetained] = retained;
  m[kStage1Mass] = stage1;
  m[kValueMass] = value;
  m[kValueMassL2] = value_l2;
  m[kNuMin] = nu_min;
  m[kNuMinL2] = nu_min_l2;
  m[kKept] = static_cast<double>(in.kept);
  return m;
}

}  // namespace ckv

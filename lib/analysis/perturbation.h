#pragma once
// The actual output perturbation of an eviction and its bounds for one query head and one
// evaluation query (MATH.md §3), in double precision:
//
//   L      = ‖o - o'‖,  o - o' = ((A - A') V) W_h     (never V W_h for all entries)
//   C      = Σ A_i nu_i
//   theta  = C - (2 - 1/S)  Σ N_i A_i nu_i              (Theorem 3.3)
//   theta_hat = C - (2 - 1/S1) Σ N_i A_i nu_i           (Theorem 3.5)
//   theta_rel = C - (2 - 1/S1) nu_min Σ N_i A_i         (Theorem C.1)
//
// for the L1 norm (nu = L1 row norms of P = V W_h) and the L2 norm (Appendix C.3).
// Keys are [0, p] for a query at position p. Entries at positions >= c (the question) are
// never evicted; they count in S and, being always kept with the stage-1 set, in S1.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include <Eigen/Core>

namespace ckv {

using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The metric columns of every output, in this order.
enum Metric : int {
  kL1, kL2,                            // actual perturbation
  kTheta, kThetaHat, kThetaRel,        // L1 bounds
  kThetaL2, kThetaHatL2, kThetaRelL2,  // L2 bounds
  kRetained, kStage1Mass,              // S, S1
  kValueMass, kValueMassL2,            // C (L1 and L2 nu)
  kNuMin, kNuMinL2,
  kKept,                               // kept evictable entries
  kMetricCount
};
inline constexpr std::array<const char*, kMetricCount> kMetricNames = {
    "L1", "L2", "theta", "theta_hat", "theta_rel", "theta_l2", "theta_hat_l2", "theta_rel_l2",
    "S", "S1", "C", "C_l2", "nu_min", "nu_min_l2", "kept"};
using MetricRow = std::array<double, kMetricCount>;

// Softmax(q K^T / sqrt(d)) over keys [0, p]: q [d_head], k [seq, d_head] (row-major).
std::vector<double> attention_row(const float* q, const float* k, int64_t d_head, int64_t p);

struct HeadQueryInput {
  std::span<const double> attn;   // [p+1] A of the evaluation query
  std::span<const char> keep;     // [p+1] N (1 kept); entries >= c must be 1
  std::span<const char> stage1;   // [p+1] the stage-1 set (entries >= c included)
  std::span<const float> nu_l1;   // [>= p+1] ‖P_i‖_1 of this query head
  std::span<const float> nu_l2;   // [>= p+1] ‖P_i‖_2
  const float* v = nullptr;       // [seq, d_head] values of the head's KV head
  const float* wo = nullptr;      // [d_model, n_head*d_head] o_proj.weight
  int64_t d_head = 0, d_model = 0, n_head = 0, head = 0;
  int64_t kept = 0;               // kept evictable count (reported as is)
};

MetricRow perturbation(const HeadQueryInput& in);

}  // namespace ckv

#pragma once
// The actual output perturbation of an eviction and its bounds for one query head and one
// evaluation query (docs/MATH.md §3), in double precision:
//
//   L      = ‖o - o'‖,  o - o' = ((A - A') V) W_h     (never V W_h for all entries)
//   C      = Σ A_i nu_i
//   theta  = C - (2 - 1/S)  Σ N_i A_i nu_i              (Theorem 3.3)
//   theta_hat = C - (2 - 1/S1) Σ N_i A_i nu_i           (Theorem 3.5)
//   theta_rel = C - (2 - 1/S1) nu_min Σ N_i A_i         (Theorem C.1)
//
// nu_min has four readings (NuMinReading, docs/BOUND.md "nu_min"); every one is computed
// into its own column, and the chosen one fills theta_rel, theta_rel_l2, nu_min, nu_min_l2.
//
// for the L1 norm (nu = L1 row norms of P = V W_h) and the L2 norm (Appendix C.3).
// Keys are [0, p] for a query at position p. Entries at positions >= c (the question) are
// never evicted; they count in S and, being always kept with the stage-1 set, in S1.
//
// All evaluation queries of a head are handled at once, and what no selection changes
// (A V, C, nu_min, the question's share) is computed once per head (HeadEval) and shared by
// every method and budget. With A'_i = N_i A_i / S, (A - A') V = A V - (N ⊙ A) V / S, so a
// selection costs only its kept rows: n_query x kept x d_head, then n_query x d_head x d_model.
#include <array>
#include <cstdint>
#include <span>
#include <string>
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
  // theta_rel (L1) under each nu_min reading, whatever --nu-min chose, and nu_min / C of the
  // chosen reading.
  kThetaRelAll, kThetaRelNoSink, kThetaRelStage2, kThetaRelStage2Partial,
  kNuMinOverC,
  kMetricCount
};
inline constexpr std::array<const char*, kMetricCount> kMetricNames = {
    "L1", "L2", "theta", "theta_hat", "theta_rel", "theta_l2", "theta_hat_l2", "theta_rel_l2",
    "S", "S1", "C", "C_l2", "nu_min", "nu_min_l2", "kept",
    "theta_rel_all", "theta_rel_no_sink", "theta_rel_stage2", "theta_rel_stage2_partial",
    "nu_min_over_C"};

// Over which entries Theorem C.1's nu_min is taken (docs/BOUND.md "nu_min"):
//   All           every key up to the query, [0, p]: the theorem as stated; an upper bound
//                 of theta_hat (the default)
//   NoSink        every key but position 0, [1, p]: not a bound when the kept set holds
//                 position 0 with a smaller nu (the attention sink usually does)
//   Stage2        the stage-2 candidates (context entries outside stage 1), applied to all
//                 of S: not a bound (stage-1 and question entries can have a smaller nu)
//   Stage2Partial the stage-2 candidates, applied to the stage-2 kept entries only, stage 1
//                 and the question kept exact: an upper bound of theta_hat
enum class NuMinReading { All, NoSink, Stage2, Stage2Partial };
inline constexpr std::array<const char*, 4> kNuMinReadingNames = {"all", "no-sink", "stage2", "stage2-partial"};
// Throws InputError naming --nu-min for an unknown name.
NuMinReading parse_nu_min_reading(const std::string& name);
inline const char* nu_min_reading_name(NuMinReading r) { return kNuMinReadingNames[static_cast<size_t>(r)]; }
// Whether theta_rel under this reading is an upper bound of theta_hat for every selection.
inline bool nu_min_reading_is_bound(NuMinReading r) {
  return r == NuMinReading::All || r == NuMinReading::Stage2Partial;
}
using MetricRow = std::array<double, kMetricCount>;

// Causal softmax(q K^T / sqrt(d)) of the queries q [r, d_head] at positions pos [r] over
// the keys k [>= max(pos)+1, d_head]: [r, max(pos)+1], row i zero past pos[i]. One GEMM.
// A sliding window W > 0 (docs/MODELS.md "Sliding-window attention") also zeroes the keys
// before pos[i] - W + 1: query p attends to (p - W, p].
MatrixD attention_rows(const Eigen::Ref<const MatrixD>& q, const Eigen::Ref<const MatrixD>& k,
                       std::span<const int64_t> pos, int64_t window = 0);

// The first key a query at position p sees under a sliding window W (0: none).
inline int64_t window_start(int64_t p, int64_t window) { return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0; }

// One row of the above: q [d_head], k [seq, d_head] (row-major), keys [0, p]; [p+1].
std::vector<double> attention_row(const float* q, const float* k, int64_t d_head, int64_t p);

// One query head's tensors.
struct HeadTensors {
  const float* v = nullptr;        // [seq, d_head] values of the head's KV head
  const float* wo = nullptr;       // [d_model, n_head*d_head] o_proj.weight
  int64_t d_head = 0, d_model = 0, n_head = 0, head = 0;
  std::span<const float> nu_l1;    // [>= p+1] ‖P_i‖_1 of this query head
  std::span<const float> nu_l2;    // [>= p+1] ‖P_i‖_2
};

// One selection's view for HeadEval::metrics: evictable positions (< c), distinct, and
// the rows to fill, [n_query].
struct HeadSelection {
  std::span<const int64_t> kept, stage1;
  std::span<MetricRow> out;
};

// The selection-independent part of one query head's evaluation queries.
class HeadEval {
 public:
  // attn: [n_query, len] rows of A (attention_rows), query i at position pos[i] < len;
  // entries in [c, len) are never evicted. Under a sliding window (attention_rows' window)
  // nu_min is taken over the keys each query sees.
  HeadEval(const HeadTensors& t, const MatrixD& attn, std::vector<int64_t> pos, int64_t c,
           NuMinReading reading = NuMinReading::All, int64_t window = 0);

  int64_t n_query() const { return static_cast<int64_t>(pos_.size()); }

  // Metric rows of every evaluation query for each selection (kKept = kept.size()). The
  // selections share one GEMM with W_h.
  void metrics(std::span<const HeadSelection> selections) const;

 private:
  HeadTensors t_;
  NuMinReading reading_;
  int64_t c_;                   // evictable entries [0, c)
  MatrixD attn_t_;              // [len, n_query] A transposed: a kept entry is one row
  std::vector<int64_t> pos_;    // [n_query]
  MatrixD v_;                   // [len, d_head] values
  MatrixD w_;                   // [d_head, d_model] W_h
  MatrixD av_, question_av_;    // [n_query, d_head] A V; the question's part of it
  // [n_query] each: C, C_l2, nu_min over [0, p] and over [1, p] (L1, L2; from the window's
  // first key on a sliding layer), and the
  // question's Σ A, Σ A nu, Σ A nu_l2.
  Eigen::VectorXd value_, value_l2_, nu_min_, nu_min_l2_, nu_min_no_sink_, nu_min_no_sink_l2_;
  Eigen::VectorXd q_mass_, q_value_, q_value_l2_;
};

// One query from flags (the reference form, kept for tests and audits).
struct HeadQueryInput : HeadTensors {
  std::span<const double> attn;   // [p+1] A of the evaluation query
  std::span<const char> keep;     // [p+1] N (1 kept); entries >= c must be 1
  std::span<const char> stage1;   // [p+1] the stage-1 set (entries >= c included)
  int64_t kept = 0;               // kept evictable count (reported as is)
  NuMinReading reading = NuMinReading::All;
};

MetricRow perturbation(const HeadQueryInput& in);

}  // namespace ckv

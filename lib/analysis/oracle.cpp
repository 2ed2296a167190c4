#include "analysis/oracle.h"

#include <cmath>
#include <limits>

namespace ckv {

namespace {

// One (query head, evaluation query): the projected values of its keys and running sums.
struct Track {
  MatrixD p;               // [p+1, d_model] P = V W_h for this head's keys
  Eigen::VectorXd full;    // [d_model] o = A P
  Eigen::VectorXd kept;    // [d_model] Σ_kept A_i P_i
  double retained = 0;     // Σ_kept A_i
  const std::vector<double>* attn = nullptr;
};

std::vector<Track> make_tracks(const OracleInput& in) {
  std::vector<Track> tracks;
  for (const OracleQuery& q : in.queries) {
    const auto n = static_cast<int64_t>(q.attn.size());
    Track t;
    t.attn = &q.attn;
    t.p = MatrixD::Zero(n, in.d_model);
    const int64_t stride = in.n_head * in.d_head;
    for (int64_t r = 0; r < in.d_model; ++r) {
      const float* w = in.wo + r * stride + q.head * in.d_head;  // row r of W_h^T
      for (int64_t i = 0; i < n; ++i) {
        const float* vi = in.v + i * in.d_head;
        double x = 0;
        for (int64_t j = 0; j < in.d_head; ++j) x += static_cast<double>(vi[j]) * w[j];
        t.p(i, r) = x;
      }
    }
    t.full = t.p.transpose() * Eigen::Map<const Eigen::VectorXd>(q.attn.data(), n);
    t.kept = Eigen::VectorXd::Zero(in.d_model);
    for (int64_t i = in.c; i < n; ++i) {  // the question entries are never evicted
      t.kept += q.attn[static_cast<size_t>(i)] * t.p.row(i).transpose();
      t.retained += q.attn[static_cast<size_t>(i)];
    }
    tracks.push_back(std::move(t));
  }
  return tracks;
}

// ‖o - (kept + a P_j) / (retained + a)‖_1, with nothing kept meaning o' = 0.
double l1_with(const Track& t, int64_t j) {
  const double a = j >= 0 ? (*t.attn)[static_cast<size_t>(j)] : 0.0;
  const double s = t.retained + a;
  if (s <= 0) return t.full.lpNorm<1>();
  if (j < 0) return (t.full - t.kept / s).lpNorm<1>();
  return (t.full - (t.kept + a * t.p.row(j).transpose()) / s).lpNorm<1>();
}

}  // namespace

std::vector<int64_t> greedy_order(const OracleInput& in, int64_t picks) {
  std::vector<Track> tracks = make_tracks(in);
  std::vector<char> taken(static_cast<size_t>(in.c), 0);
  std::vector<int64_t> order;
  picks = std::min(picks, in.c);
  for (int64_t step = 0; step < picks; ++step) {
    int64_t best = -1;
    double best_loss = std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < in.c; ++j) {
      if (taken[static_cast<size_t>(j)]) continue;
      double loss = 0;
      for (const Track& t : tracks) loss += l1_with(t, j);
      if (loss < best_loss) {
        best_loss = loss;
        best = j;
      }
    }
    if (best < 0) break;
    taken[static_cast<size_t>(best)] = 1;
    order.push_back(best);
    for (Track& t : tracks) {
      const double a = (*t.attn)[static_cast<size_t>(best)];
      t.kept += a * t.p.row(best).transpose();
      t.retained += a;
    }
  }
  return order;
}

double summed_l1(const OracleInput& in, const std::vector<char>& kept) {
  std::vector<Track> tracks = make_tracks(in);
  double loss = 0;
  for (Track& t : tracks) {
    for (int64_t i = 0; i < in.c; ++i) {
      if (!kept[static_cast<size_t>(i)]) continue;
      const double a = (*t.attn)[static_cast<size_t>(i)];
      t.kept += a * t.p.row(i).transpose();
      t.retained += a;
    }
    loss += l1_with(t, -1);
  }
  return loss;
}

}  // namespace ckv

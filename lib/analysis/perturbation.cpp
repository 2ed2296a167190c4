// GCC 12 reports false -Wmaybe-uninitialized inside its AVX-512 intrinsics when inlining
// Eigen products (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "analysis/perturbation.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/tensor.h"

namespace ckv {

NuMinReading parse_nu_min_reading(const std::string& name) {
  for (size_t i = 0; i < kNuMinReadingNames.size(); ++i)
    if (name == kNuMinReadingNames[i]) return static_cast<NuMinReading>(i);
  fail<InputError>("--nu-min {}: not one of all, no-sink, stage2, stage2-partial", name);
}

MatrixD attention_rows(const Eigen::Ref<const MatrixD>& q, const Eigen::Ref<const MatrixD>& k,
                       std::span<const int64_t> pos, int64_t window) {
  const int64_t r = q.rows();
  const int64_t len = r == 0 ? 0 : *std::max_element(pos.begin(), pos.end()) + 1;
  MatrixD a(r, len);  // [r, len]
  a.noalias() = q * k.topRows(len).transpose();
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.cols()));
  for (int64_t i = 0; i < r; ++i) {
    const int64_t p = pos[static_cast<size_t>(i)], first = window_start(p, window), n = p + 1 - first;
    auto row = a.row(i).segment(first, n).array();
    row *= scale;
    row = (row - row.maxCoeff()).exp();
    row /= row.sum();
    a.row(i).head(first).setZero();
    a.row(i).tail(len - p - 1).setZero();
  }
  return a;
}

std::vector<double> attention_row(const float* q, const float* k, int64_t d_head, int64_t p) {
  const MatrixD qd = ConstMatrixMap(q, 1, d_head).cast<double>();      // [1, d_head]
  const MatrixD kd = ConstMatrixMap(k, p + 1, d_head).cast<double>();  // [p+1, d_head]
  const int64_t pos[] = {p};
  const MatrixD a = attention_rows(qd, kd, pos);
  return {a.data(), a.data() + a.size()};
}

HeadEval::HeadEval(const HeadTensors& t, const MatrixD& attn, std::vector<int64_t> pos, int64_t c,
                   NuMinReading reading, int64_t window)
    : t_(t), reading_(reading), c_(std::min<int64_t>(c, attn.cols())), attn_t_(attn.transpose()),
      pos_(std::move(pos)) {
  const int64_t nq = attn.rows(), len = attn.cols(), d = t.d_head;
  const int64_t q0 = std::min(c, len), n_question = len - q0;
  const ConstMatrixMap wo(t.wo, t.d_model, t.n_head * d);
  w_ = wo.middleCols(t.head * d, d).transpose().cast<double>();       // [d_head, d_model]
  v_ = ConstMatrixMap(t.v, len, d).cast<double>();                    // [len, d_head]
  const Eigen::VectorXd nu1 = ConstVectorMap(t.nu_l1.data(), len).cast<double>();  // [len]
  const Eigen::VectorXd nu2 = ConstVectorMap(t.nu_l2.data(), len).cast<double>();
  av_.noalias() = attn * v_;
  question_av_.noalias() = attn.rightCols(n_question) * v_.bottomRows(n_question);
  value_.noalias() = attn * nu1;
  value_l2_.noalias() = attn * nu2;
  q_mass_ = attn.rightCols(n_question).rowwise().sum();
  q_value_.noalias() = attn.rightCols(n_question) * nu1.tail(n_question);
  q_value_l2_.noalias() = attn.rightCols(n_question) * nu2.tail(n_question);
  nu_min_.resize(nq);
  nu_min_l2_.resize(nq);
  nu_min_no_sink_.resize(nq);
  nu_min_no_sink_l2_.resize(nq);
  for (int64_t i = 0; i < nq; ++i) {
    // The query's keys [first, p]: [0, p], or its sliding window.
    const int64_t p = pos_[static_cast<size_t>(i)], first = window_start(p, window), n = p + 1 - first;
    nu_min_[i] = nu1.segment(first, n).minCoeff();
    nu_min_l2_[i] = nu2.segment(first, n).minCoeff();
    // A query with only position 0 to attend to has no other key: the sink's own nu. Under a
    // window that no longer reaches position 0 there is no sink to leave out.
    const int64_t skip = first == 0 && n > 1 ? 1 : 0;
    nu_min_no_sink_[i] = nu1.segment(first + skip, n - skip).minCoeff();
    nu_min_no_sink_l2_[i] = nu2.segment(first + skip, n - skip).minCoeff();
  }
}

namespace {

// The stage-2 readings of nu_min (NuMinReading) of one selection: the smallest nu of the
// context entries outside stage 1 (the same for every query: all see the whole context), and
// the stage-1 and question part of S and of Σ N A nu, which Stage2Partial keeps exact.
struct Stage2Readings {
  Eigen::VectorXd stage1_value, stage1_value_l2;  // [n_query]
  double cand_min = std::numeric_limits<double>::infinity(), cand_min_l2 = cand_min;
};

Stage2Readings stage2_readings(std::span<const int64_t> stage1, const MatrixD& attn_t, const HeadTensors& t,
                               int64_t c, const Eigen::VectorXd& q_value, const Eigen::VectorXd& q_value_l2,
                               std::vector<char>& in_stage1) {
  Stage2Readings r{q_value, q_value_l2};
  std::fill(in_stage1.begin(), in_stage1.end(), 0);
  for (int64_t i : stage1) {
    if (i >= c) continue;
    in_stage1[static_cast<size_t>(i)] = 1;
    r.stage1_value += attn_t.row(i).transpose() * static_cast<double>(t.nu_l1[static_cast<size_t>(i)]);
    r.stage1_value_l2 += attn_t.row(i).transpose() * static_cast<double>(t.nu_l2[static_cast<size_t>(i)]);
  }
  for (int64_t i = 0; i < c; ++i)
    if (!in_stage1[static_cast<size_t>(i)]) {
      r.cand_min = std::min(r.cand_min, static_cast<double>(t.nu_l1[static_cast<size_t>(i)]));
      r.cand_min_l2 = std::min(r.cand_min_l2, static_cast<double>(t.nu_l2[static_cast<size_t>(i)]));
    }
  return r;
}

}  // namespace

void HeadEval::metrics(std::span<const HeadSelection> selections) const {
  const int64_t nq = n_query(), d = t_.d_head, n_sel = static_cast<int64_t>(selections.size());
  MatrixD u(n_sel * nq, d);  // [selection, n_query, d_head] (A - A') V
  MatrixD ak, vk;            // [kept, n_query] A of the kept entries, [kept, d_head] their values
  Eigen::VectorXd nk1, nk2;  // [kept] their nu
  std::vector<char> in_stage1(static_cast<size_t>(c_));  // [c]
  for (int64_t si = 0; si < n_sel; ++si) {
    const HeadSelection& sel = selections[static_cast<size_t>(si)];
    const auto b = static_cast<int64_t>(sel.kept.size());
    ak.resize(b, nq);
    vk.resize(b, d);
    nk1.resize(b);
    nk2.resize(b);
    for (int64_t j = 0; j < b; ++j) {
      const int64_t i = sel.kept[static_cast<size_t>(j)];
      ak.row(j) = attn_t_.row(i);
      vk.row(j) = v_.row(i);
      nk1[j] = t_.nu_l1[static_cast<size_t>(i)];
      nk2[j] = t_.nu_l2[static_cast<size_t>(i)];
    }
    const Eigen::VectorXd retained = ak.colwise().sum().transpose() + q_mass_;  // S
    Eigen::VectorXd stage1_mass = q_mass_;                                      // S1
    for (int64_t i : sel.stage1) stage1_mass += attn_t_.row(i).transpose();
    const Eigen::VectorXd kept_value = ak.transpose() * nk1 + q_value_;
    const Eigen::VectorXd kept_value_l2 = ak.transpose() * nk2 + q_value_l2_;
    const Stage2Readings r2 = stage2_readings(sel.stage1, attn_t_, t_, c_, q_value_, q_value_l2_, in_stage1);
    const Eigen::VectorXd &stage1_value = r2.stage1_value, &stage1_value_l2 = r2.stage1_value_l2;
    const double cand_min = r2.cand_min, cand_min_l2 = r2.cand_min_l2;
    // u = (A - A') V = A V - (N ⊙ A) V / S; nothing kept leaves o' = 0.
    auto us = u.middleRows(si * nq, nq);
    us.noalias() = ak.transpose() * vk;
    us += question_av_;
    for (int64_t i = 0; i < nq; ++i)
      us.row(i) = retained[i] > 0 ? (av_.row(i) - us.row(i) / retained[i]).eval() : av_.row(i);
    for (int64_t i = 0; i < nq; ++i) {
      const double s = retained[i], f = 2.0 - 1.0 / s, f1 = 2.0 - 1.0 / stage1_mass[i];
      // No stage-2 candidate (stage 1 is the whole context): nothing to relax, the exact value.
      const double c2 = std::isfinite(cand_min) ? cand_min : nu_min_[i];
      const double c2_l2 = std::isfinite(cand_min_l2) ? cand_min_l2 : nu_min_l2_[i];
      const double s2 = s - stage1_mass[i];  // Σ A of the kept entries outside stage 1
      MetricRow& m = sel.out[static_cast<size_t>(i)];
      m[kTheta] = value_[i] - f * kept_value[i];
      m[kThetaHat] = value_[i] - f1 * kept_value[i];
      m[kThetaRelAll] = value_[i] - f1 * nu_min_[i] * s;
      m[kThetaRelNoSink] = value_[i] - f1 * nu_min_no_sink_[i] * s;
      m[kThetaRelStage2] = value_[i] - f1 * c2 * s;
      m[kThetaRelStage2Partial] = value_[i] - f1 * (stage1_value[i] + c2 * s2);
      double nu_min = nu_min_[i], nu_min_l2 = nu_min_l2_[i], rel_l2 = 0;
      switch (reading_) {
        case NuMinReading::All:
          m[kThetaRel] = m[kThetaRelAll];
          rel_l2 = value_l2_[i] - f1 * nu_min_l2 * s;
          break;
        case NuMinReading::NoSink:
          m[kThetaRel] = m[kThetaRelNoSink];
          nu_min = nu_min_no_sink_[i], nu_min_l2 = nu_min_no_sink_l2_[i];
          rel_l2 = value_l2_[i] - f1 * nu_min_l2 * s;
          break;
        case NuMinReading::Stage2:
          m[kThetaRel] = m[kThetaRelStage2];
          nu_min = c2, nu_min_l2 = c2_l2;
          rel_l2 = value_l2_[i] - f1 * nu_min_l2 * s;
          break;
        case NuMinReading::Stage2Partial:
          m[kThetaRel] = m[kThetaRelStage2Partial];
          nu_min = c2, nu_min_l2 = c2_l2;
          rel_l2 = value_l2_[i] - f1 * (stage1_value_l2[i] + c2_l2 * s2);
          break;
      }
      m[kThetaL2] = value_l2_[i] - f * kept_value_l2[i];
      m[kThetaHatL2] = value_l2_[i] - f1 * kept_value_l2[i];
      m[kThetaRelL2] = rel_l2;
      m[kRetained] = s;
      m[kStage1Mass] = stage1_mass[i];
      m[kValueMass] = value_[i];
      m[kValueMassL2] = value_l2_[i];
      m[kNuMin] = nu_min;
      m[kNuMinL2] = nu_min_l2;
      m[kNuMinOverC] = value_[i] > 0 ? nu_min / value_[i] : std::numeric_limits<double>::quiet_NaN();
      m[kKept] = static_cast<double>(b);
    }
  }
  const MatrixD diff = u * w_;  // [selection, n_query, d_model] o - o'
  for (int64_t si = 0; si < n_sel; ++si)
    for (int64_t i = 0; i < nq; ++i) {
      MetricRow& m = selections[static_cast<size_t>(si)].out[static_cast<size_t>(i)];
      m[kL1] = diff.row(si * nq + i).lpNorm<1>();
      m[kL2] = diff.row(si * nq + i).norm();
    }
}

MetricRow perturbation(const HeadQueryInput& in) {
  // The flags carry the question entries, so the whole row counts as evictable here.
  const auto n = static_cast<int64_t>(in.attn.size());
  std::vector<int64_t> kept, stage1;
  for (int64_t i = 0; i < n; ++i) {
    if (in.keep[static_cast<size_t>(i)]) kept.push_back(i);
    if (in.stage1[static_cast<size_t>(i)]) stage1.push_back(i);
  }
  const HeadEval e(in, Eigen::Map<const MatrixD>(in.attn.data(), 1, n), {n - 1}, n, in.reading);
  MetricRow m{};
  const HeadSelection sel{kept, stage1, {&m, 1}};
  e.metrics({&sel, 1});
  m[kKept] = static_cast<double>(in.kept);
  return m;
}

}  // namespace ckv

#include "analysis/mask_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "analysis/perturbation.h"
#include "analysis/value_norms.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace ckv {

namespace {

// Softmax over keys [first, p] of q·k / sqrt(d) in double (first > 0: a sliding window),
// restricted to the entries not `evicted` (null: all). out: [p+1], 0 where not attended.
void softmax_row(const float* q, const float* k, int64_t d, int64_t first, int64_t p, const char* evicted,
                 int64_t c, std::vector<double>& out) {
  out.assign(static_cast<size_t>(p + 1), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  double mx = -std::numeric_limits<double>::infinity();
  const auto attended = [&](int64_t i) { return !(evicted != nullptr && i < c && evicted[i]); };
  for (int64_t i = first; i <= p; ++i) {
    if (!attended(i)) continue;
    double s = 0;
    for (int64_t t = 0; t < d; ++t) s += double{q[t]} * double{k[i * d + t]};
    out[static_cast<size_t>(i)] = s * scale;
    mx = std::max(mx, s * scale);
  }
  double sum = 0;
  for (int64_t i = first; i <= p; ++i) {
    if (!attended(i)) continue;
    out[static_cast<size_t>(i)] = std::exp(out[static_cast<size_t>(i)] - mx);
    sum += out[static_cast<size_t>(i)];
  }
  for (double& x : out) x /= sum;
}

double norm_l1(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::abs(double{a[i]} - double{b[i]});
  return s;
}
double norm_l2(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += (double{a[i]} - double{b[i]}) * (double{a[i]} - double{b[i]});
  return std::sqrt(s);
}

double mean(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return x.empty() ? 0 : s / static_cast<double>(x.size());
}

}  // namespace

MaskCapture::MaskCapture(const ModelConfig& config, const ModelWeights& weights,
                         std::vector<int64_t> eval_rows, int64_t c, const EvictionPlan* plan,
                         CaptureOptions options)
    : config_(config), weights_(weights), eval_rows_(std::move(eval_rows)), c_(c), plan_(plan),
      options_(options) {
  const auto n = static_cast<size_t>(config.n_layer);
  resid.resize(n);
  head_out.resize(n);
  attn.resize(n);
  retained.resize(n);
  nu.resize(n);
  renorm_err.assign(n, 0.0);
  for (int64_t r : eval_rows_)
    if (r < c_) fail<InputError>("mask: evaluation row {} is inside the context [0, {})", r, c_);
}

ForwardRequest MaskCapture::request() {
  ForwardRequest req;
  req.record.qkv = true;
  req.record.attn_rows = eval_rows_;
  req.record.head_out_rows = eval_rows_;
  req.record.residual = true;
  req.recorder = this;
  return req;
}

void MaskCapture::on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) {
  // Only what on_head_outputs reads: the queries of the evaluation rows, every key, and the
  // values only for the physical check (a full copy of q and v per layer is measurable).
  const int64_t n_head = q.dim(0), seq = q.dim(1), d = q.dim(2);
  if (q_.shape() != std::vector<int64_t>{n_head, n_eval(), d}) q_ = Tensor({n_head, n_eval(), d});
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < n_eval(); ++i)
      std::copy_n(q.data() + (h * seq + eval_rows_[static_cast<size_t>(i)]) * d, d, q_.data() + (h * n_eval() + i) * d);
  k_ = k;
  if (options_.verify_physical) v_ = v;
  if (options_.nu) {
    const Tensor wo = weights_.layers[static_cast<size_t>(layer)].wo.to_f32();  // [d_model, n_head*d_head]
    ValueNorms norms = value_norms(v, wo, config_.n_head, {}, {.l1 = true, .l2 = false}, options_.pool);
    Tensor out({config_.n_head, c_});  // [n_head, c]
    for (int64_t h = 0; h < config_.n_head; ++h)
      std::copy_n(norms.l1.data() + h * seq, c_, out.data() + h * c_);
    nu[static_cast<size_t>(layer)] = std::move(out);
  }
}

void MaskCapture::on_attention(int64_t layer, std::span<const int64_t>, const Tensor& probs) {
  attn[static_cast<size_t>(layer)] = probs;
}

void MaskCapture::on_residual(int64_t layer, const Tensor& r) {
  const int64_t d_model = r.dim(1);
  Tensor out({n_eval(), d_model});  // [n_eval, d_model]
  for (int64_t i = 0; i < n_eval(); ++i)
    out.matrix().row(i) = r.matrix().row(eval_rows_[static_cast<size_t>(i)]);
  resid[static_cast<size_t>(layer)] = std::move(out);
}

// Needs this layer's q/k/v (on_qkv) and masked output: computes S per row from the run's
// own unmasked logits and, asked, the output over physically reduced K/V.
void MaskCapture::on_head_outputs(int64_t layer, std::span<const int64_t>, const Tensor& out) {
  const ModelConfig& cf = config_;
  head_out[static_cast<size_t>(layer)] = out;
  const int64_t seq = k_.dim(1), d = cf.d_head, group = cf.n_head / cf.n_kv_head;
  const bool masked = plan_ != nullptr && !plan_->empty();
  Tensor s({cf.n_head, n_eval()});  // [n_head, n_eval]
  const Tensor wo = weights_.layers[static_cast<size_t>(layer)].wo.to_f32();  // [d_model, n_head*d_head]
  const Tensor& rec = attn[static_cast<size_t>(layer)];              // [n_head, n_eval, seq] A'
  const int64_t len = n_eval() > 0 ? *std::max_element(eval_rows_.begin(), eval_rows_.end()) + 1 : 0;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t window = cf.window_of(layer);  // a sliding layer's row p sees (p - W, p]
  std::vector<double> diffs(static_cast<size_t>(cf.n_head), 0.0), mags(diffs), errs(diffs);
  const auto task = [&](int64_t h) {
    const int64_t g = h / group;
    const float* qh = q_.data() + h * n_eval() * d;  // [n_eval, d_head]
    const float* kg = k_.data() + g * seq * d;       // [seq, d_head]
    // S and Theorem 3.2 from this run's unmasked logits, in fp32 like the attention kernel
    // (one GEMM per head; the previous scalar double loop cost a quarter of a forward
    // pass at 2K tokens); sums in double.
    RowMatrix probs;  // [n_eval, len] unnormalised exp(logit - max) of each row's causal prefix
    static const std::vector<int64_t> kNone;
    const std::vector<int64_t>& evicted = masked ? plan_->at(layer, g) : kNone;
    if (masked && !evicted.empty()) {
      probs.noalias() = ConstMatrixMap(qh, n_eval(), d) * ConstMatrixMap(kg, len, d).transpose();
      probs *= scale;
    }
    for (int64_t i = 0; i < n_eval(); ++i) {
      double kept = 1;
      if (probs.size() > 0) {
        // The row's keys [first, p]: its causal prefix, or its sliding window.
        const int64_t p = eval_rows_[static_cast<size_t>(i)], first = window_start(p, window), n = p + 1 - first;
        auto e = probs.row(i).segment(first, n).array();  // [n]
        e = (e - e.maxCoeff()).exp();
        const double total = e.cast<double>().sum();
        double gone = 0;
        for (int64_t j : evicted)  // evicted positions are < c <= p
          if (j >= first) gone += e[j - first];
        kept = 1 - gone / total;
        // Theorem 3.2 in this run: A'_j = N_j A_j / S with A this run's unmasked softmax.
        if (!rec.empty()) {
          const Eigen::Map<const Eigen::ArrayXf> ap(rec.data() + (h * n_eval() + i) * seq + first, n);  // A'
          Eigen::ArrayXf gap = ap - e.transpose() * static_cast<float>(1 / (total - gone));
          for (int64_t j : evicted)
            if (j >= first) gap[j - first] = ap[j - first];
          errs[static_cast<size_t>(h)] = std::max(errs[static_cast<size_t>(h)], double{gap.abs().maxCoeff()});
        }
      }
      s.data()[h * n_eval() + i] = static_cast<float>(kept);
    }
    if (!options_.verify_physical) return;
    // The physically reduced cache: evicted entries removed, not masked; in double, as an
    // independent recomputation.
    const std::vector<char> ev = masked ? plan_->evicted_flags(layer, g) : std::vector<char>();
    std::vector<double> row;
    for (int64_t i = 0; i < n_eval(); ++i) {
      const int64_t p = eval_rows_[static_cast<size_t>(i)];
      softmax_row(qh + i * d, kg, d, window_start(p, window), p, masked ? ev.data() : nullptr, c_, row);
      Eigen::VectorXd o = Eigen::VectorXd::Zero(d);  // [d_head]
      for (int64_t j = 0; j <= p; ++j)
        for (int64_t t = 0; t < d; ++t)
          o[t] += row[static_cast<size_t>(j)] * double{v_.data()[(g * seq + j) * d + t]};
      const float* got = out.data() + (h * n_eval() + i) * cf.d_model;
      for (int64_t m = 0; m < cf.d_model; ++m) {
        double x = 0;
        for (int64_t t = 0; t < d; ++t) x += double{wo.data()[m * cf.n_head * d + h * d + t]} * o[t];
        diffs[static_cast<size_t>(h)] = std::max(diffs[static_cast<size_t>(h)], std::abs(x - double{got[m]}));
        mags[static_cast<size_t>(h)] = std::max(mags[static_cast<size_t>(h)], std::abs(x));
      }
    }
  };
  if (options_.pool != nullptr)
    options_.pool->parallel_for(cf.n_head, task);
  else
    for (int64_t h = 0; h < cf.n_head; ++h) task(h);
  for (int64_t h = 0; h < cf.n_head; ++h) {
    physical_max_diff = std::max(physical_max_diff, diffs[static_cast<size_t>(h)]);
    physical_max_abs = std::max(physical_max_abs, mags[static_cast<size_t>(h)]);
    renorm_err[static_cast<size_t>(layer)] = std::max(renorm_err[static_cast<size_t>(layer)], errs[static_cast<size_t>(h)]);
  }
  retained[static_cast<size_t>(layer)] = std::move(s);
}

double LayerMaskMetrics::resid_l1_mean() const { return mean(resid_l1); }
double LayerMaskMetrics::resid_l2_mean() const { return mean(resid_l2); }

RunMetrics compare_runs(const MaskCapture& full, const MaskCapture& masked, const EvictionPlan& plan,
                        const MaskMetricOptions& options) {
  if (full.eval_rows() != masked.eval_rows() || full.c() != masked.c())
    fail<InputError>("mask: the runs compared have different evaluation rows");
  RunMetrics out;
  const int64_t n_eval = full.n_eval(), c = full.c();
  const int64_t sinks = std::min(options.sinks, c);
  for (int64_t l = 0; l < full.n_layer(); ++l) {
    const auto L = static_cast<size_t>(l);
    if (full.nu[L].empty()) fail<InputError>("mask: the unmasked capture has no nu");
    const Tensor &r0 = full.resid[L], &r1 = masked.resid[L];
    const Tensor &o0 = full.head_out[L], &o1 = masked.head_out[L];
    const Tensor &a0 = full.attn[L], &a1 = masked.attn[L];
    const int64_t d_model = r0.dim(1), n_head = o0.dim(0), seq = a0.dim(2);
    const int64_t group = n_head / plan.n_kv_head;
    LayerMaskMetrics m;
    m.renorm_max_err = masked.renorm_err[L];
    for (int64_t i = 0; i < n_eval; ++i) {
      m.resid_l1.push_back(norm_l1(r1.data() + i * d_model, r0.data() + i * d_model, d_model));
      m.resid_l2.push_back(norm_l2(r1.data() + i * d_model, r0.data() + i * d_model, d_model));
    }
    for (int64_t h = 0; h < n_head; ++h) {
      const std::vector<char> ev = plan.evicted_flags(l, h / group);
      double dt = 0;
      for (int64_t i = 0; i < n_eval; ++i) {
        const int64_t off = (h * n_eval + i) * d_model;
        m.head_l1.push_back(norm_l1(o1.data() + off, o0.data() + off, d_model));
        m.head_l2.push_back(norm_l2(o1.data() + off, o0.data() + off, d_model));
        const float* A = a0.data() + (h * n_eval + i) * seq;
        const float* Ap = a1.data() + (h * n_eval + i) * seq;
        const double S = masked.retained[L].data()[h * n_eval + i];
        double sf = 0, sr = 0, cf = 0, cr = 0;
        for (int64_t j = 0; j < c; ++j) {
          (j < sinks ? sf : cf) += A[j];
          (j < sinks ? sr : cr) += Ap[j];
          if (ev[static_cast<size_t>(j)]) dt += double{A[j]} * double{full.nu[L].data()[h * c + j]};
        }
        m.retained.push_back(S);
        m.sink_full.push_back(sf);
        m.sink_raw.push_back(sr);
        m.sink_corrected.push_back(sr * S);
        m.content_full.push_back(cf);
        m.content_raw.push_back(cr);
        m.content_corrected.push_back(cr * S);
      }
      m.delta_theta.push_back(n_eval > 0 ? dt / static_cast<double>(n_eval) : 0);
      out.delta_theta_total += m.delta_theta.back();
    }
    out.layers.push_back(std::move(m));
  }
  return out;
}

NextToken next_token(std::span<const float> full, std::span<const float> masked) {
  if (full.size() != masked.size() || full.empty()) fail<InputError>("next_token: logits rows differ in size");
  const auto log_softmax = [](std::span<const float> x) {
    double mx = -std::numeric_limits<double>::infinity();
    for (float v : x) mx = std::max(mx, double{v});
    double sum = 0;
    for (float v : x) sum += std::exp(double{v} - mx);
    const double lse = mx + std::log(sum);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = double{x[i]} - lse;
    return out;
  };
  const std::vector<double> lp = log_softmax(full), lq = log_softmax(masked);
  NextToken r;
  for (size_t i = 0; i < lp.size(); ++i) r.kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  r.kl = std::max(0.0, r.kl);  // rounding can leave -1e-17 for identical rows
  r.top1_full = static_cast<int32_t>(std::max_element(full.begin(), full.end()) - full.begin());
  r.top1_masked = static_cast<int32_t>(std::max_element(masked.begin(), masked.end()) - masked.begin());
  r.top1_agree = r.top1_full == r.top1_masked;
  return r;
}

double log_prob(std::span<const float> logits, int32_t token) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : logits) mx = std::max(mx, double{v});
  double sum = 0;
  for (float v : logits) sum += std::exp(double{v} - mx);
  return double{logits[static_cast<size_t>(token)]} - mx - std::log(sum);
}

SinkScores sink_scores(const MaskCapture& full) {
  SinkScores out;
  const int64_t c = full.c(), n_eval = full.n_eval();
  for (int64_t l = 0; l < full.n_layer(); ++l) {
    const Tensor& a = full.attn[static_cast<size_t>(l)];  // [n_head, n_eval, seq]
    const Tensor& nu = full.nu[static_cast<size_t>(l)];   // [n_head, c]
    const int64_t n_head = a.dim(0), seq = a.dim(2);
    Tensor sa({n_head, c}), sv({n_head, c});
    for (int64_t h = 0; h < n_head; ++h)
      for (int64_t j = 0; j < c; ++j) {
        double s = 0;
        for (int64_t i = 0; i < n_eval; ++i) s += a.data()[(h * n_eval + i) * seq + j];
        sa.data()[h * c + j] = static_cast<float>(s);
        sv.data()[h * c + j] = static_cast<float>(s * nu.data()[h * c + j]);
      }
    out.s_attn.push_back(std::move(sa));
    out.s_val.push_back(std::move(sv));
  }
  return out;
}

std::vector<double> delta_theta_weights(const MaskCapture& full, const std::vector<int64_t>& layers,
                                        const std::vector<int64_t>& kv_heads) {
  const int64_t c = full.c(), n_eval = full.n_eval();
  std::vector<double> w(static_cast<size_t>(c), 0.0);
  for (int64_t l : layers) {
    const Tensor& a = full.attn[static_cast<size_t>(l)];
    const Tensor& nu = full.nu[static_cast<size_t>(l)];
    const int64_t n_head = a.dim(0), seq = a.dim(2);
    for (int64_t h = 0; h < n_head; ++h) {
      if (std::find(kv_heads.begin(), kv_heads.end(), h / full.group()) == kv_heads.end()) continue;
      for (int64_t j = 0; j < c; ++j) {
        double s = 0;
        for (int64_t i = 0; i < n_eval; ++i) s += a.data()[(h * n_eval + i) * seq + j];
        w[static_cast<size_t>(j)] += s / static_cast<double>(n_eval) * nu.data()[h * c + j];
      }
    }
  }
  return w;
}

}  // namespace ckv

// Property tests of docs/MATH.md §3 over random inputs (varied n, d, D, GQA, peaked and flat
// attention), and the oracle against the exhaustive optimum for n <= 16.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "analysis/bound_layer.h"
#include "analysis/oracle.h"
#include "analysis/perturbation.h"
#include "analysis/value_norms.h"
#include "core/error.h"

namespace ckv {
namespace {

Tensor random_tensor(std::vector<int64_t> shape, std::mt19937& rng, float scale) {
  Tensor t(std::move(shape));
  std::normal_distribution<float> normal(0.0f, scale);
  for (float& x : t.span()) x = normal(rng);
  return t;
}

struct RandomLayer {
  Tensor q, k, v, wo;
  ValueNorms nu;
  LayerRequest req;
};

RandomLayer make_layer(std::mt19937& rng, int64_t c, int64_t n_question) {
  std::uniform_int_distribution<int> pick(0, 2);
  const int64_t n_kv = 1 + pick(rng), group = 1 + pick(rng), d = 4 << pick(rng), d_model = 8 + 8 * pick(rng);
  const int64_t n = c + n_question;
  const float peak = pick(rng) == 0 ? 0.2f : (pick(rng) == 0 ? 1.0f : 3.0f);  // flat .. peaked
  RandomLayer l;
  l.q = random_tensor({n_kv * group, n, d}, rng, peak);
  l.k = random_tensor({n_kv, n, d}, rng, 1.0f);
  l.v = random_tensor({n_kv, n, d}, rng, 1.0f);
  l.wo = random_tensor({d_model, n_kv * group * d}, rng, 0.5f);
  l.nu = value_norms(l.v, l.wo, n_kv * group, {});
  l.req.c = c;
  l.req.eval_rows = evaluation_rows(c, n);
  l.req.params.window = std::max<int64_t>(1, c / 4);
  l.req.params.kernel = 3;
  l.req.params.h2o_rows = 8;
  for (const char* m : {"attn", "snapkv", "h2o", "streaming", "criticalkv(snapkv)", "adakv(snapkv)",
                        "criticalkv(adakv(snapkv))", "criticalkv(attn)", "criticalkv(h2o)"})
    l.req.methods.push_back(MethodSpec::parse(m));
  return l;
}

TEST(Perturbation, BoundInvariantsOverRandomLayers) {
  std::mt19937 rng(7);
  int64_t checked = 0, with_assumption = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const int64_t c = 8 + static_cast<int64_t>(rng() % 60), nq = static_cast<int64_t>(rng() % 4);
    RandomLayer l = make_layer(rng, c, nq);
    l.req.budgets = {1, std::max<int64_t>(1, c / 5), std::max<int64_t>(1, c / 2), c};
    LayerTensors t{&l.q, &l.k, &l.v, &l.wo, &l.nu.l1, &l.nu.l2};
    const LayerResult r = analyze_layer(t, l.req);
    for (const MetricRow& m : r.metrics) {
      const double tol = 1e-9 * (1 + m[kValueMass]), tol2 = 1e-9 * (1 + m[kValueMassL2]);
      EXPECT_LE(m[kL1], m[kTheta] + tol);  // Theorem 3.3
      EXPECT_LE(m[kL2], m[kThetaL2] + tol2);
      EXPECT_GE(m[kStage1Mass], 0.0);
      EXPECT_LE(m[kStage1Mass], m[kRetained] + 1e-12);  // the selection holds stage 1
      if (m[kStage1Mass] >= 0.5) {  // Theorems 3.5 and C.1
        EXPECT_LE(m[kTheta], m[kThetaHat] + tol);
        EXPECT_LE(m[kThetaHat], m[kThetaRel] + tol);
        EXPECT_LE(m[kThetaL2], m[kThetaHatL2] + tol2);
        EXPECT_LE(m[kThetaHatL2], m[kThetaRelL2] + tol2);
        ++with_assumption;
      }
      ++checked;
    }
    // Keeping every entry (budget c): S = 1, L = 0, theta = 0.
    for (int64_t m = 0; m < r.n_method; ++m)
      for (int64_t h = 0; h < r.n_head; ++h)
        for (int64_t q = 0; q < r.n_query; ++q) {
          const MetricRow& all = r.at(m, 3, h, q);
          EXPECT_NEAR(all[kRetained], 1.0, 1e-12);
          EXPECT_NEAR(all[kL1], 0.0, 1e-12);
          EXPECT_NEAR(all[kL2], 0.0, 1e-12);
          EXPECT_NEAR(all[kTheta], 0.0, 1e-9 * (1 + all[kValueMass]));
          EXPECT_EQ(all[kKept], static_cast<double>(c));
        }
  }
  EXPECT_GT(checked, 10000);
  EXPECT_GT(with_assumption, 1000);
}

// A sliding-window layer (docs/MODELS.md "Sliding-window attention"): every selection
// keeps only entries the first evaluation query's window holds, min(budget, held) of them,
// and L1/L2 equal ||o - o'|| computed here from scratch over the window: softmax over
// (p - W, p], the kept entries renormalised. The Theorem 3.3 bound holds there too.
TEST(Perturbation, SlidingWindowLayerSelectsAmongHeldEntriesAndMeasuresTheWindow) {
  std::mt19937 rng(11);
  int64_t checked = 0, evicting = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t c = 24 + static_cast<int64_t>(rng() % 40), nq = static_cast<int64_t>(rng() % 3);
    RandomLayer l = make_layer(rng, c, nq);
    const int64_t window = 12 + static_cast<int64_t>(rng() % 10);
    l.req.window = window;
    l.req.params.window = 4;
    const int64_t p0 = l.req.eval_rows.front(), held_from = std::max<int64_t>(0, p0 - window + 1);
    const int64_t held = c - held_from;
    l.req.budgets = {1, 5, held - 1, held, c};
    LayerTensors t{&l.q, &l.k, &l.v, &l.wo, &l.nu.l1, &l.nu.l2};
    const LayerResult r = analyze_layer(t, l.req);
    ASSERT_EQ(r.c, c);
    EXPECT_EQ(held_start(l.req), held_from);
    const int64_t n_kv = l.k.dim(0), group = l.q.dim(0) / n_kv, d = l.q.dim(2), d_model = l.wo.dim(0);
    const int64_t n = l.q.dim(1);
    // The layer-selection entry point (mask, eval) selects the same sets.
    const std::vector<Selection> sel = layer_selections(t, l.req);
    for (int64_t m = 0; m < r.n_method; ++m)
      for (int64_t b = 0; b < r.n_budget; ++b) {
        const int64_t want = std::min(l.req.budgets[static_cast<size_t>(b)].kept, held);
        for (int64_t g = 0; g < n_kv; ++g) {
          const int64_t base = (m * r.n_budget + b) * n_kv + g;
          std::vector<int64_t> kept;
          for (int64_t i = 0; i < c; ++i)
            if (r.kept_mask[static_cast<size_t>(base * c + i)]) kept.push_back(i);
          EXPECT_EQ(kept, sel[static_cast<size_t>(m * r.n_budget + b)].kept[static_cast<size_t>(g)]);
          if (l.req.methods[static_cast<size_t>(m)].name().find("adakv") == std::string::npos) {
            EXPECT_EQ(static_cast<int64_t>(kept.size()), want) << l.req.methods[static_cast<size_t>(m)].name();
          }
          for (int64_t i : kept) EXPECT_GE(i, held_from);
          // o - o' per query head of this KV head, in double from the inputs.
          std::vector<char> keep(static_cast<size_t>(n), 1);
          for (int64_t i = 0; i < c; ++i) keep[static_cast<size_t>(i)] = 0;
          for (int64_t i : kept) keep[static_cast<size_t>(i)] = 1;
          for (int64_t h = g * group; h < (g + 1) * group; ++h)
            for (int64_t qi = 0; qi < r.n_query; ++qi) {
              const int64_t p = l.req.eval_rows[static_cast<size_t>(qi)];
              std::vector<double> logit(static_cast<size_t>(p + 1), 0.0);
              double mx = -1e300;
              for (int64_t j = std::max<int64_t>(0, p - window + 1); j <= p; ++j) {
                double s = 0;
                for (int64_t x = 0; x < d; ++x)
                  s += double{l.q.data()[(h * n + p) * d + x]} * double{l.k.data()[(g * n + j) * d + x]};
                logit[static_cast<size_t>(j)] = s / std::sqrt(static_cast<double>(d));
                mx = std::max(mx, logit[static_cast<size_t>(j)]);
              }
              std::vector<double> o(static_cast<size_t>(d), 0.0), o2(static_cast<size_t>(d), 0.0);
              double z = 0, z2 = 0;
              for (int64_t j = std::max<int64_t>(0, p - window + 1); j <= p; ++j) {
                const double e = std::exp(logit[static_cast<size_t>(j)] - mx);
                z += e;
                if (keep[static_cast<size_t>(j)]) z2 += e;
              }
              for (int64_t j = std::max<int64_t>(0, p - window + 1); j <= p; ++j) {
                const double e = std::exp(logit[static_cast<size_t>(j)] - mx);
                for (int64_t x = 0; x < d; ++x) {
                  const double vj = l.v.data()[(g * n + j) * d + x];
                  o[static_cast<size_t>(x)] += e / z * vj;
                  if (keep[static_cast<size_t>(j)]) o2[static_cast<size_t>(x)] += e / z2 * vj;
                }
              }
              double l1 = 0;
              for (int64_t y = 0; y < d_model; ++y) {
                double diff = 0;
                for (int64_t x = 0; x < d; ++x)
                  diff += double{l.wo.data()[y * l.wo.dim(1) + h * d + x]} * (o[static_cast<size_t>(x)] - o2[static_cast<size_t>(x)]);
                l1 += std::abs(diff);
              }
              const MetricRow& got = r.at(m, b, h, qi);
              EXPECT_NEAR(got[kL1], l1, 1e-9 * (1 + l1)) << "trial " << trial << " budget " << b;
              EXPECT_LE(got[kL1], got[kTheta] + 1e-9 * (1 + got[kValueMass]));
              if (want >= held) {
                EXPECT_NEAR(got[kL1], 0.0, 1e-12);
              }
              evicting += want < held && l1 > 1e-9;
              ++checked;
            }
        }
      }
  }
  EXPECT_GT(checked, 2000);
  EXPECT_GT(evicting, 500);
  // What a held part cannot do is refused.
  std::mt19937 rng2(3);
  RandomLayer l = make_layer(rng2, 40, 1);
  l.req.window = 10;
  l.req.budgets = {5};
  l.req.methods = {MethodSpec::parse("expectedattention")};
  LayerTensors t{&l.q, &l.k, &l.v, &l.wo, &l.nu.l1, &l.nu.l2};
  EXPECT_THROW(analyze_layer(t, l.req), InputError);
  l.req.methods = {MethodSpec::parse("snapkv")};
  l.req.eval_rows = {40};
  l.req.window = 1;  // the query sees only itself: no context entry held
  EXPECT_THROW(analyze_layer(t, l.req), InputError);
}

TEST(Perturbation, MaskedSoftmaxEqualsRenormalisedAttention) {
  // Theorem 3.2: softmax with -inf on evicted logits = N * A / S.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t n = 2 + static_cast<int64_t>(rng() % 40), d = 8;
    Tensor q = random_tensor({d}, rng, trial % 2 ? 3.0f : 0.3f), k = random_tensor({n, d}, rng, 1.0f);
    const std::vector<double> a = attention_row(q.data(), k.data(), d, n - 1);
    std::vector<char> keep(static_cast<size_t>(n));
    for (auto& x : keep) x = static_cast<char>(rng() % 2);
    keep[0] = 1;
    double s = 0, top = -1e300;
    std::vector<double> logits(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double dot = 0;
      for (int64_t j = 0; j < d; ++j) dot += double{q.data()[j]} * k.data()[i * d + j];
      logits[static_cast<size_t>(i)] = dot / std::sqrt(double(d));
      if (keep[static_cast<size_t>(i)]) top = std::max(top, logits[static_cast<size_t>(i)]), s += a[static_cast<size_t>(i)];
    }
    double z = 0;
    for (int64_t i = 0; i < n; ++i)
      if (keep[static_cast<size_t>(i)]) z += std::exp(logits[static_cast<size_t>(i)] - top);
    for (int64_t i = 0; i < n; ++i) {
      const double masked = keep[static_cast<size_t>(i)] ? std::exp(logits[static_cast<size_t>(i)] - top) / z : 0.0;
      EXPECT_NEAR(masked, keep[static_cast<size_t>(i)] * a[static_cast<size_t>(i)] / s, 1e-12);
    }
  }
}

// All subsets of size b of [0, c), smallest summed L1.
double exhaustive_best(const OracleInput& in, int64_t b) {
  double best = 1e300;
  for (uint32_t mask = 0; mask < (1u << in.c); ++mask) {
    if (__builtin_popcount(mask) != b) continue;
    std::vector<char> kept(static_cast<size_t>(in.c));
    for (int64_t i = 0; i < in.c; ++i) kept[static_cast<size_t>(i)] = (mask >> i) & 1;
    best = std::min(best, summed_l1(in, kept));
  }
  return best;
}

TEST(Oracle, ExhaustiveOptimumBelowEveryMethodAndGreedy) {
  std::mt19937 rng(11);
  int64_t greedy_not_worse = 0, comparisons = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t c = 6 + static_cast<int64_t>(rng() % 9);  // <= 14 evictable
    RandomLayer l = make_layer(rng, c, static_cast<int64_t>(rng() % 3));
    l.req.params.window = 2;
    l.req.methods.push_back(MethodSpec::parse("oracle"));
    const int64_t b = 1 + static_cast<int64_t>(rng() % (c - 1));
    l.req.budgets = {b};
    l.req.oracle = true;
    LayerTensors t{&l.q, &l.k, &l.v, &l.wo, &l.nu.l1, &l.nu.l2};
    const LayerResult r = analyze_layer(t, l.req);
    const int64_t group = r.n_head / r.n_kv_head;
    for (int64_t g = 0; g < r.n_kv_head; ++g) {
      OracleInput oi{c, l.v.data() + g * l.v.dim(1) * l.v.dim(2), l.wo.data(), l.v.dim(2), l.wo.dim(0), r.n_head, {}};
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t p : l.req.eval_rows)
          oi.queries.push_back({h, attention_row(l.q.data() + (h * l.q.dim(1) + p) * l.q.dim(2),
                                                 l.k.data() + g * l.k.dim(1) * l.k.dim(2), l.q.dim(2), p)});
      std::map<int64_t, double> best_at;  // adakv moves budget between heads: compare at the head's own count
      for (int64_t m = 0; m < r.n_method; ++m) {
        const int64_t kept = r.kept_count[static_cast<size_t>(m * r.n_kv_head + g)];
        if (!best_at.count(kept)) best_at[kept] = exhaustive_best(oi, kept);
        const double best = best_at[kept];
        double sum = 0;
        for (int64_t h = g * group; h < (g + 1) * group; ++h)
          for (int64_t q = 0; q < r.n_query; ++q) sum += r.at(m, 0, h, q)[kL1];
        EXPECT_LE(best, sum + 1e-9 * (1 + sum)) << l.req.methods[static_cast<size_t>(m)].name();
        if (m + 1 == r.n_method) {
          EXPECT_GE(sum, best - 1e-9 * (1 + best));  // greedy is never below the optimum
        } else {
          double oracle = 0;
          for (int64_t h = g * group; h < (g + 1) * group; ++h)
            for (int64_t q = 0; q < r.n_query; ++q) oracle += r.at(r.n_method - 1, 0, h, q)[kL1];
          if (kept == b) {
            greedy_not_worse += oracle <= sum + 1e-9 * (1 + sum);
            ++comparisons;
          }
        }
      }
    }
  }
  // Greedy is no theorem: on these tiny random cases it is at or below a score-based
  // method's L in 540 of 605 comparisons (89%); a drop below 85% means it broke.
  EXPECT_GE(static_cast<double>(greedy_not_worse), 0.85 * static_cast<double>(comparisons));
}

}  // namespace
}  // namespace ckv

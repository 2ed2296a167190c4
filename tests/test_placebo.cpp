// Placebo spans (docs/MATH.md §6): same length, Delta_theta within tolerance, never on the
// target, the sinks, the question or each other, and the same spans for the same seed on
// every machine (the generator is SplitMix64, checked against its published outputs).
#include <gtest/gtest.h>

#include <cmath>

#include "analysis/placebo.h"
#include "core/error.h"

namespace ckv {
namespace {

TEST(SplitMix64, MatchesTheReferenceSequence) {
  // First outputs of Vigna's splitmix64.c for seed 0.
  SplitMix64 r(0);
  EXPECT_EQ(r.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(r.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(r.next(), 0x06c45d188009454fULL);
}

TEST(SplitMix64, BelowStaysInRangeAndCoversIt) {
  SplitMix64 r(42);
  std::vector<int> seen(7, 0);
  for (int i = 0; i < 7000; ++i) {
    const uint64_t x = r.below(7);
    ASSERT_LT(x, 7u);
    ++seen[x];
  }
  for (int n : seen) EXPECT_GT(n, 800);  // 1000 expected each
  EXPECT_THROW(r.below(0), InputError);
}

std::vector<double> weights(int64_t c) {
  std::vector<double> w;
  for (int64_t i = 0; i < c; ++i) w.push_back(1.0 + 0.5 * std::sin(0.3 * static_cast<double>(i)));
  return w;
}

PlaceboRequest request(const std::vector<double>& w) {
  PlaceboRequest r;
  r.length = 6;
  r.c = static_cast<int64_t>(w.size());
  r.sinks = 4;
  r.exclude = {{40, 46}};
  for (int64_t i = 40; i < 46; ++i) r.target += w[static_cast<size_t>(i)];
  r.tolerance = 0.05;
  r.count = 5;
  r.seed = 9;
  return r;
}

TEST(Placebo, MatchedLengthStrengthAndPlacement) {
  const std::vector<double> w = weights(200);
  const PlaceboRequest req = request(w);
  const PlaceboResult res = draw_placebos(w, req);
  ASSERT_EQ(res.spans.size(), 5u);
  EXPECT_GE(res.searched, 5);
  EXPECT_EQ(res.candidates, (200 - 6 - 4 + 1) - 11);  // starts 35..45 overlap the target
  for (size_t i = 0; i < res.spans.size(); ++i) {
    const SpanRange s = res.spans[i].span;
    EXPECT_EQ(s.end - s.start, 6);
    EXPECT_GE(s.start, 4);   // not on the sinks
    EXPECT_LE(s.end, 200);   // not on the question
    EXPECT_TRUE(s.end <= 40 || s.start >= 46) << s.start;  // not on the target
    double dt = 0;
    for (int64_t j = s.start; j < s.end; ++j) dt += w[static_cast<size_t>(j)];
    EXPECT_NEAR(res.spans[i].delta_theta, dt, 1e-9);
    EXPECT_NEAR(res.spans[i].ratio, dt / req.target, 1e-12);
    EXPECT_LE(std::abs(res.spans[i].ratio - 1), 0.05);
    for (size_t k = 0; k < i; ++k)
      EXPECT_TRUE(s.end <= res.spans[k].span.start || s.start >= res.spans[k].span.end);
  }
}

TEST(Placebo, ReproducibleForASeed) {
  const std::vector<double> w = weights(200);
  PlaceboRequest req = request(w);
  const PlaceboResult a = draw_placebos(w, req), b = draw_placebos(w, req);
  ASSERT_EQ(a.spans.size(), b.spans.size());
  for (size_t i = 0; i < a.spans.size(); ++i) EXPECT_EQ(a.spans[i].span, b.spans[i].span);
  req.seed = 10;
  const PlaceboResult c = draw_placebos(w, req);
  bool differs = false;
  for (size_t i = 0; i < c.spans.size(); ++i) differs = differs || !(c.spans[i].span == a.spans[i].span);
  EXPECT_TRUE(differs);
}

TEST(Placebo, TooStrictToleranceFindsNoneAndReportsTheClosest) {
  std::vector<double> w(100, 1.0);
  for (int64_t i = 50; i < 55; ++i) w[static_cast<size_t>(i)] = 10.0;  // the target stands out
  PlaceboRequest r;
  r.length = 5;
  r.c = 100;
  r.exclude = {{50, 55}};
  r.target = 50;
  r.tolerance = 0.01;
  r.count = 3;
  const PlaceboResult res = draw_placebos(w, r);
  EXPECT_TRUE(res.spans.empty());
  EXPECT_EQ(res.searched, res.candidates);
  EXPECT_NEAR(res.best_ratio, 0.1, 1e-12);  // every other span of 5 weighs 5 against 50
}

TEST(Placebo, BadRequests) {
  const std::vector<double> w = weights(30);
  PlaceboRequest r = request(weights(200));  // request() reads entries 40..45: build it on 200,
  r.c = 30;                                   // then cut the context to w's 30 entries
  r.exclude = {};
  r.target = 0;
  EXPECT_THROW(draw_placebos(w, r), InputError);
  r.target = 1;
  r.length = 40;
  EXPECT_THROW(draw_placebos(w, r), InputError);
  r.length = 3;
  r.c = 31;
  EXPECT_THROW(draw_placebos(w, r), InputError);
}

}  // namespace
}  // namespace ckv

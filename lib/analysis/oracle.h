#pragma once
// The oracle selection (docs/MATH.md §4, analysis only): greedy on the actual perturbation. For
// one KV head it adds, one entry at a time, the evictable entry that most lowers the summed
// L1 perturbation ‖o - o'‖_1 of the KV head's query heads at every evaluation query. The
// greedy sequence is nested, so one run to the largest budget serves every smaller one.
// Cost O(picks * c * group * queries * d_model) per KV head, with P = V W_h held for the
// head's keys ([p+1, d_model] doubles per query head): hence --oracle-max-n.
#include <cstdint>
#include <vector>

#include "analysis/perturbation.h"

namespace ckv {

struct OracleQuery {
  int64_t head = 0;          // query head
  std::vector<double> attn;  // [p+1] its attention at one evaluation query
};

struct OracleInput {
  int64_t c = 0;                     // evictable entries [0, c); keys >= c are always kept
  const float* v = nullptr;          // [seq, d_head] values of the KV head
  const float* wo = nullptr;         // [d_model, n_head*d_head]
  int64_t d_head = 0, d_model = 0, n_head = 0;
  std::vector<OracleQuery> queries;  // every (query head of the group, evaluation query)
};

// Positions of [0, c) in greedy pick order, at most `picks` of them (ties: lower position).
std::vector<int64_t> greedy_order(const OracleInput& in, int64_t picks);

// Summed L1 perturbation of a selection (kept: [c] flags over the evictable entries).
double summed_l1(const OracleInput& in, const std::vector<char>& kept);

}  // namespace ckv

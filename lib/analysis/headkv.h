#pragma once
// HeadKV (Fu et al., "Not All Heads Matter: A Head-Level KV Cache Compression Method with
// Integrated Retrieval and Reasoning", ICLR 2025, arXiv 2410.19258), as its code allocates
// (github.com/FYYFU/HeadKV, headkv/snapkv_utils.py, ReasonSnapKVCluster): a head-importance
// profile s[l][h] (offline retrieval scores) shares a global pool of the budget among the
// heads of all layers, and each head keeps its snapkv top entries plus the window.
//
// With b kept per KV head (the window w included, as ckv's snapkv counts it), B = b - w:
//
//   s_hat = s / sum s;  s_hat = s_hat^temp / sum s_hat^temp           (over all layers, heads)
//   pool = (B // beta) * n_layer * n_kv_head,  min = B - B // beta     (Python float //)
//   cap[l][g] = round_half_even(s_hat[l][g] * pool + min)
//
// and KV head g of layer l keeps the window and its cap[l][g] highest snapkv entries of the
// prefix (so cap + w in all; the whole context when cap + w >= c, and every head keeps the
// whole context when B > c - w, as the code does not compress then; with b <= w there is no
// pool and every head keeps b, the window's most recent entries). HeadKV's code runs
// on the query heads with repeated keys; ckv selects per KV head, so a profile of query
// heads is reduced to KV heads by the group mean of s before the allocation (the same
// caps as the mean of the group's caps when temp = 1, up to rounding).
//
// Profile file (JSON, docs/BOUND.md "HeadKV"):
//   {"format": "ckv.headkv_profile", "format_version": 1, "score": "retrieval",
//    "n_layer": 30, "n_head": 9, "records": 100, "scores": [[...n_head...], ...n_layer...]}
// scores may also be [n_layer][n_kv_head] ("n_head" then says n_kv_head).
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "analysis/selection.h"
#include "core/tensor.h"

namespace ckv {

// Reads a profile (see above). Throws InputError naming the file for a missing or
// malformed file, a wrong format or version, a ragged, negative, non-finite or all-zero
// score table, or dimensions that disagree with "n_layer" / "n_head".
std::vector<std::vector<double>> read_headkv_profile(const std::filesystem::path& path);

// The profile as KV-head scores [n_layer][n_kv_head]: as is when it has n_kv_head columns,
// the group mean when it has n_head. Throws InputError when it fits neither.
std::vector<std::vector<double>> headkv_kv_scores(const std::vector<std::vector<double>>& profile,
                                                  int64_t n_layer, int64_t n_head, int64_t n_kv_head);

// Kept entries (window included) of every KV head of `layer` at budget b (kept per KV
// head on average) over c entries, from the KV-head scores.
std::vector<int64_t> headkv_budgets(const std::vector<std::vector<double>>& kv_scores, int64_t layer, int64_t c,
                                    int64_t budget, const SelectionParams& params);

// Python's float floor division a // b (b > 0), as HeadKV's `base_capacity // beta`.
double python_floordiv(double a, double b);

// The retrieval score of Wu et al. ("Retrieval Head Mechanistically Explains Long-Context
// Factuality", arXiv 2404.15574), teacher-forced: for every answer step k (the attention
// row rows[k], which produces token produced[k]) and query head h, the head scores
// 1 / |needle| when its attention's argmax position (the lower on a tie) lies in the needle
// and the token there equals produced[k]. probs: [n_head, r, seq] attention rows;
// in_needle: [seq] 1 inside the needle spans; |needle| = their token count. Adds each
// head's score of this record to score[h].
void add_retrieval_scores(const Tensor& probs, std::span<const int32_t> tokens, std::span<const char> in_needle,
                          std::span<const int32_t> produced, std::vector<double>& score);

}  // namespace ckv

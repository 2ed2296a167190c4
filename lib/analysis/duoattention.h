#pragma once
// DuoAttention (Xiao et al., arXiv 2410.10819) as kvpress 0.5.5's DuoAttentionPress defines
// it (kvpress/presses/duo_attention_press.py): every KV head of every layer is either a
// retrieval head, which keeps its whole cache, or a streaming head, which keeps only the
// first `sink` and the last `recent` context entries. The heads' scores come from a
// pattern file (the DuoAttention repository's attn_patterns/<model>/full_attention_heads.tsv:
// one line per layer, one tab-separated score per KV head, clipped to [0, 1]); the
// round(n_layer * n_kv_head * r) heads of lowest score stream (ties: lower layer, head).
//
// The press is driven by a head ratio r, not a budget. ckv maps a budget b (kept per KV
// head, f = b / c) to the ratio whose mean kept share is f, as kvpress reports it
// (compression_ratio = r (1 - (sink + recent) / c)): r = (1 - f) / (1 - (sink + recent) / c),
// clamped to [0, 1]; so kept counts vary by head and average about b.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "analysis/selection.h"

namespace ckv {

// Reads a pattern TSV ([n_layer][n_kv_head] scores). Throws InputError naming the file for
// a missing file, a non-number, ragged lines or no line.
std::vector<std::vector<double>> read_duo_pattern(const std::filesystem::path& path);

// The streaming-head ratio for budget b of c entries (see above).
double duo_head_ratio(int64_t c, int64_t budget, const SelectionParams& params);

// The layer's selection: streaming heads keep [0, sink) and [c - recent, c), retrieval
// heads everything. Throws InputError when the pattern is missing or not
// [in.n_layer][in.n_kv_head].
Selection select_duo(const SelectionInputs& in, int64_t budget, const SelectionParams& params);

}  // namespace ckv

#include "analysis/duoattention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/input_file.h"

namespace ckv {

std::vector<std::vector<double>> read_duo_pattern(const std::filesystem::path& path) {
  // One line per layer of tab-separated scores: far below this bound for any model.
  std::stringstream in(read_regular_file(path, "the DuoAttention pattern", size_t{64} << 20));
  std::vector<std::vector<double>> rows;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::vector<double> row;
    std::stringstream ss(line);
    for (std::string item; std::getline(ss, item, '\t');) {
      size_t used = 0;
      double x = 0;
      try {
        x = std::stod(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || item.find_first_not_of(" \r", used) != std::string::npos || !std::isfinite(x))
        fail<InputError>("{}: line {}: '{}' is not a number", path.string(), n, item);
      row.push_back(std::clamp(x, 0.0, 1.0));  // kvpress: np.clip(head_scores, 0, 1)
    }
    if (!rows.empty() && row.size() != rows.front().size())
      fail<InputError>("{}: line {} has {} scores, line 1 has {}", path.string(), n, row.size(), rows.front().size());
    rows.push_back(std::move(row));
  }
  if (rows.empty()) fail<InputError>("{}: no head scores (one line per layer, a tab-separated score per KV head)", path.string());
  return rows;
}

double duo_head_ratio(int64_t c, int64_t budget, const SelectionParams& params) {
  const double window = static_cast<double>(params.duo_sink + params.duo_recent) / static_cast<double>(c);
  if (window >= 1) return 0;  // streaming heads would keep everything
  const double kept = static_cast<double>(budget) / static_cast<double>(c);
  return std::clamp((1 - kept) / (1 - window), 0.0, 1.0);
}

Selection select_duo(const SelectionInputs& in, int64_t budget, const SelectionParams& params) {
  if (!params.duo_pattern) fail<InputError>("duoattention needs --duo-pattern");
  const auto& pattern = *params.duo_pattern;
  if (static_cast<int64_t>(pattern.size()) != in.n_layer || static_cast<int64_t>(pattern.front().size()) != in.n_kv_head)
    fail<InputError>("--duo-pattern: {} layers x {} KV heads, the model has {} x {}", pattern.size(),
                     pattern.front().size(), in.n_layer, in.n_kv_head);
  // The n_pruned lowest scores of all layers and heads stream (round: half to even, as Python).
  const int64_t size = in.n_layer * in.n_kv_head;
  const auto n_pruned = static_cast<int64_t>(std::nearbyint(static_cast<double>(size) * duo_head_ratio(in.c, budget, params)));
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), 0);
  const auto score = [&](int64_t i) { return pattern[static_cast<size_t>(i / in.n_kv_head)][static_cast<size_t>(i % in.n_kv_head)]; };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score(a) < score(b); });
  std::vector<char> streaming(static_cast<size_t>(in.n_kv_head), 0);
  for (int64_t i = 0; i < n_pruned; ++i)
    if (order[static_cast<size_t>(i)] / in.n_kv_head == in.layer)
      streaming[static_cast<size_t>(order[static_cast<size_t>(i)] % in.n_kv_head)] = 1;
  Selection out;
  out.kept.resize(static_cast<size_t>(in.n_kv_head));
  for (int64_t g = 0; g < in.n_kv_head; ++g) {
    std::vector<int64_t>& kept = out.kept[static_cast<size_t>(g)];
    // kvpress masks keys [sink : -recent] of a streaming head (a Python slice).
    const int64_t evict_end = in.c - params.duo_recent;
    for (int64_t i = 0; i < in.c; ++i)
      if (!streaming[static_cast<size_t>(g)] || i < params.duo_sink || i >= evict_end) kept.push_back(i);
  }
  out.stage1 = out.kept;
  return out;
}

}  // namespace ckv

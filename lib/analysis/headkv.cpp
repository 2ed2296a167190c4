#include "analysis/headkv.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"

namespace ckv {

namespace {
constexpr int64_t kMaxProfileEntries = 1 << 20;  // layers x heads: far beyond any model
constexpr size_t kMaxProfileBytes = size_t{64} << 20;  // its JSON: far beyond any profile
}  // namespace

std::vector<std::vector<double>> read_headkv_profile(const std::filesystem::path& path) {
  const std::string f = path.string();
  const std::string text = read_regular_file(path, "the HeadKV profile", kMaxProfileBytes);
  refuse_nul_in_json(text, f);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail<InputError>("{}: not valid JSON ({})", f, e.what());
  }
  if (!j.is_object() || j.value("format", nlohmann::json()) != "ckv.headkv_profile")
    fail<InputError>("{}: not a HeadKV profile (\"format\": \"ckv.headkv_profile\"; `ckv profile` writes one)", f);
  if (!j.contains("format_version") || j["format_version"] != 1)
    fail<InputError>("{}: format_version {} (this ckv reads 1)", f, j.value("format_version", nlohmann::json()).dump());
  for (const char* key : {"n_layer", "n_head"})
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 1 ||
        j[key].get<int64_t>() > kMaxProfileEntries)
      fail<InputError>("{}: \"{}\" must be a positive integer", f, key);
  const int64_t n_layer = j["n_layer"].get<int64_t>(), n_head = j["n_head"].get<int64_t>();
  if (n_layer * n_head > kMaxProfileEntries) fail<InputError>("{}: {} x {} heads is not a model", f, n_layer, n_head);
  const nlohmann::json& s = j.contains("scores") ? j["scores"] : nlohmann::json();
  if (!s.is_array() || static_cast<int64_t>(s.size()) != n_layer)
    fail<InputError>("{}: \"scores\" must be a list of {} layers", f, n_layer);
  std::vector<std::vector<double>> out;
  double total = 0;
  for (int64_t l = 0; l < n_layer; ++l) {
    const nlohmann::json& row = s[static_cast<size_t>(l)];
    if (!row.is_array() || static_cast<int64_t>(row.size()) != n_head)
      fail<InputError>("{}: layer {}: expected a list of {} head scores", f, l, n_head);
    std::vector<double> r;
    for (int64_t h = 0; h < n_head; ++h) {
      const nlohmann::json& x = row[static_cast<size_t>(h)];
      if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() < 0)
        fail<InputError>("{}: layer {} head {}: {} is not a finite score >= 0", f, l, h, x.dump());
      r.push_back(x.get<double>());
      total += r.back();
    }
    out.push_back(std::move(r));
  }
  if (!(total > 0)) fail<InputError>("{}: every head scores 0: nothing to allocate by", f);
  // The allocation divides by the sum: one that overflows to inf would make every share 0/inf.
  if (!std::isfinite(total)) fail<InputError>("{}: the scores sum beyond the range of a double; scale them down", f);
  return out;
}

std::vector<std::vector<double>> headkv_kv_scores(const std::vector<std::vector<double>>& profile, int64_t n_layer,
                                                  int64_t n_head, int64_t n_kv_head) {
  const auto width = profile.empty() ? 0 : static_cast<int64_t>(profile.front().size());
  if (static_cast<int64_t>(profile.size()) != n_layer || (width != n_head && width != n_kv_head))
    fail<InputError>("--headkv-profile: {} layers x {} heads, the model has {} layers x {} heads ({} KV heads)",
                     profile.size(), width, n_layer, n_head, n_kv_head);
  if (width == n_kv_head) return profile;
  const int64_t group = n_head / n_kv_head;
  std::vector<std::vector<double>> out(static_cast<size_t>(n_layer), std::vector<double>(static_cast<size_t>(n_kv_head), 0));
  for (int64_t l = 0; l < n_layer; ++l)
    for (int64_t h = 0; h < n_head; ++h)
      out[static_cast<size_t>(l)][static_cast<size_t>(h / group)] +=
          profile[static_cast<size_t>(l)][static_cast<size_t>(h)] / static_cast<double>(group);
  return out;
}

double python_floordiv(double a, double b) {
  // CPython's float_floor_div (Objects/floatobject.c, _float_div_mod).
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) div -= 1.0;
  }
  if (div == 0) return std::copysign(0.0, a / b);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

std::vector<int64_t> headkv_budgets(const std::vector<std::vector<double>>& kv_scores, int64_t layer, int64_t c,
                                    int64_t budget, const SelectionParams& params) {
  const auto n_layer = static_cast<int64_t>(kv_scores.size());
  const auto n_kv = static_cast<int64_t>(kv_scores.front().size());
  const int64_t w = params.window, base = budget - w;
  std::vector<int64_t> kept(static_cast<size_t>(n_kv), c);
  if (base > c - w) return kept;  // HeadKV does not compress
  // No pool below the window (HeadKV's code would slice with negative capacities): every
  // head keeps b, the window's most recent entries, as snapkv.
  if (base <= 0) return std::vector<int64_t>(static_cast<size_t>(n_kv), std::min(budget, c));
  double total = 0;
  for (const auto& row : kv_scores)
    for (double x : row) total += x;
  // s_hat = s / sum, then ^temp, renormalised (torch float64 throughout).
  std::vector<double> hat;
  double total_t = 0;
  for (const auto& row : kv_scores)
    for (double x : row) {
      hat.push_back(std::pow(x / total, params.headkv_temp));
      total_t += hat.back();
    }
  // With a large --headkv-temp every share^temp can underflow to 0 (0/0 shares below).
  if (!(total_t > 0))
    fail<InputError>("--headkv-profile: every normalised score ^ --headkv-temp {} underflows to 0; use a smaller temp",
                     params.headkv_temp);
  const double share = python_floordiv(static_cast<double>(base), params.headkv_beta);
  const double pool = share * static_cast<double>(n_layer * n_kv);
  const double min_num = static_cast<double>(base) - share;
  for (int64_t g = 0; g < n_kv; ++g) {
    const double s = hat[static_cast<size_t>(layer * n_kv + g)] / total_t;
    const auto cap = static_cast<int64_t>(std::nearbyint(s * pool + min_num));
    kept[static_cast<size_t>(g)] = std::clamp<int64_t>(cap + w, 0, c);
  }
  return kept;
}

void add_retrieval_scores(const Tensor& probs, std::span<const int32_t> tokens, std::span<const char> in_needle,
                          std::span<const int32_t> produced, std::vector<double>& score) {
  const int64_t n_head = probs.dim(0), r = probs.dim(1), seq = probs.dim(2);
  if (static_cast<int64_t>(produced.size()) != r || static_cast<int64_t>(in_needle.size()) > seq ||
      static_cast<int64_t>(tokens.size()) < static_cast<int64_t>(in_needle.size()) ||
      static_cast<int64_t>(score.size()) != n_head)
    fail<InputError>("retrieval score: {} rows for {} answer tokens", r, produced.size());
  const auto needle_len = static_cast<double>(std::count(in_needle.begin(), in_needle.end(), 1));
  if (needle_len == 0) fail<InputError>("retrieval score: the needle is empty");
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t k = 0; k < r; ++k) {
      const float* row = probs.data() + (h * r + k) * seq;
      const auto top = static_cast<int64_t>(std::max_element(row, row + seq) - row);  // the first maximum
      if (top < static_cast<int64_t>(in_needle.size()) && in_needle[static_cast<size_t>(top)] &&
          tokens[static_cast<size_t>(top)] == produced[static_cast<size_t>(k)])
        score[static_cast<size_t>(h)] += 1.0 / needle_len;
    }
}

}  // namespace ckv

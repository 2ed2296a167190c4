#include "analysis/mask_plan.h"

#include <algorithm>
#include <charconv>
#include <set>

#include <nlohmann/json.hpp>

#include "analysis/bound_layer.h"
#include "analysis/value_norms.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/text.h"
#include "model/rope_freq.h"

namespace ckv {

namespace {

int64_t parse_position(std::string_view s, std::string_view option, std::string_view item) {
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0)
    fail<UsageError>("{}: '{}' is not a position or a start-end range", option, item);
  return v;
}

void check_lists(const std::vector<int64_t>& layers, const std::vector<int64_t>& kv_heads,
                 int64_t n_layer, int64_t n_kv_head) {
  if (layers.empty()) fail<UsageError>("--layers: no layer selected");
  if (kv_heads.empty()) fail<UsageError>("--heads: no KV head selected");
  for (int64_t l : layers)
    if (l < 0 || l >= n_layer) fail<UsageError>("--layers: layer {} outside the model's {}", l, n_layer);
  for (int64_t g : kv_heads)
    if (g < 0 || g >= n_kv_head)
      fail<UsageError>("--heads: KV head {} outside the model's {}", g, n_kv_head);
}

}  // namespace

EvictionPlan EvictionPlan::none(int64_t n_layer, int64_t n_kv_head, int64_t c, int64_t seq) {
  EvictionPlan p;
  p.n_layer = n_layer;
  p.n_kv_head = n_kv_head;
  p.c = c;
  p.seq = seq;
  p.evicted.assign(static_cast<size_t>(n_layer),
                   std::vector<std::vector<int64_t>>(static_cast<size_t>(n_kv_head)));
  return p;
}

bool EvictionPlan::empty() const { return total_evicted() == 0; }

int64_t EvictionPlan::total_evicted() const {
  int64_t n = 0;
  for (const auto& layer : evicted)
    for (const auto& head : layer) n += static_cast<int64_t>(head.size());
  return n;
}

std::vector<char> EvictionPlan::evicted_flags(int64_t layer, int64_t kv_head) const {
  std::vector<char> flags(static_cast<size_t>(c), 0);
  for (int64_t i : at(layer, kv_head)) flags[static_cast<size_t>(i)] = 1;
  return flags;
}

std::map<int64_t, std::vector<AttentionMaskSpan>> EvictionPlan::to_mask(int64_t q_end) const {
  std::map<int64_t, std::vector<AttentionMaskSpan>> mask;
  if (q_end <= c) return mask;  // no query row after the context: nothing to evict from
  for (int64_t l = 0; l < n_layer; ++l)
    for (int64_t g = 0; g < n_kv_head; ++g)
      if (!at(l, g).empty())
        mask[l].push_back({.kv_head = g, .q_begin = c, .q_end = q_end, .keys = at(l, g)});
  return mask;
}

std::vector<SpanRange> parse_spans(std::string_view text, std::string_view option) {
  std::vector<SpanRange> spans;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) fail<UsageError>("{}: empty item in '{}'", option, text);
    const size_t dash = item.find('-');
    SpanRange r;
    if (dash == std::string_view::npos) {
      r.start = parse_position(item, option, item);
      r.end = r.start + 1;
    } else {
      r.start = parse_position(trim(item.substr(0, dash)), option, item);
      r.end = parse_position(trim(item.substr(dash + 1)), option, item);
      if (r.end <= r.start)
        fail<UsageError>("{}: span '{}' is empty (start-end is half-open: end must exceed start)",
                         option, item);
    }
    spans.push_back(r);
  }
  return spans;
}

void check_spans(const std::vector<SpanRange>& spans, int64_t c, int64_t seq, std::string_view what) {
  if (spans.empty()) fail<InputError>("{}: no span to evict", what);
  if (c >= seq)
    fail<InputError>("{}: the prompt has no question (context end c = {} = its length): "
                     "eviction only affects queries at positions >= c", what, c);
  for (const SpanRange& s : spans) {
    if (s.end <= s.start) fail<InputError>("{}: span {}-{} is empty", what, s.start, s.end);
    if (s.start < 0 || s.end > c)
      fail<InputError>("{}: span {}-{} is not inside the context [0, {}){}", what, s.start, s.end,
                       c, s.end > c && s.end <= seq ? " (it overlaps the question, which is never evicted)"
                          : s.end > seq ? fmt::format(" (the prompt has {} tokens)", seq) : "");
  }
}

EvictionPlan plan_from_spans(const std::vector<SpanRange>& spans, int64_t c, int64_t seq,
                             const std::vector<int64_t>& layers, const std::vector<int64_t>& kv_heads,
                             int64_t n_layer, int64_t n_kv_head, std::string_view what) {
  check_spans(spans, c, seq, what);
  check_lists(layers, kv_heads, n_layer, n_kv_head);
  std::vector<char> flags(static_cast<size_t>(c), 0);
  for (const SpanRange& s : spans)
    for (int64_t i = s.start; i < s.end; ++i) flags[static_cast<size_t>(i)] = 1;
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < c; ++i)
    if (flags[static_cast<size_t>(i)]) positions.push_back(i);
  EvictionPlan plan = EvictionPlan::none(n_layer, n_kv_head, c, seq);
  for (int64_t l : layers)
    for (int64_t g : kv_heads) plan.at(l, g) = positions;
  return plan;
}

std::vector<SpanRange> named_spans(const NamedSpans& spans, std::string_view name, std::string_view record) {
  const auto it = spans.find(std::string(name));
  if (it == spans.end()) {
    std::string known;
    for (const auto& [k, v] : spans) known += (known.empty() ? "" : ", ") + k;
    fail<InputError>("{}: no span named \"{}\" (the record has: {})", record, name,
                     known.empty() ? "none" : known);
  }
  if (it->second.empty()) fail<InputError>("{}: span \"{}\" has no range", record, name);
  return it->second;
}

std::vector<int64_t> complement(const std::vector<int64_t>& kept, int64_t c) {
  std::vector<char> keep(static_cast<size_t>(c), 0);
  for (int64_t i : kept)
    if (i >= 0 && i < c) keep[static_cast<size_t>(i)] = 1;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < c; ++i)
    if (!keep[static_cast<size_t>(i)]) out.push_back(i);
  return out;
}

namespace {

// A selection file's JSON: any file, parsed with one-line errors naming it.
nlohmann::json read_selection_json(const std::filesystem::path& path) {
  const std::string f = path.string();
  const std::string text = read_regular_file(path, "the selection file");
  refuse_nul_in_json(text, f);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail<InputError>("{}: not valid JSON ({})", f, e.what());
  }
}

// The versioned format's header: "format", when given, is "ckv.selection" and
// "format_version", when given, 1.
void check_selection_header(const nlohmann::json& j, const std::string& f) {
  if (j.contains("format") && j["format"] != "ckv.selection")
    fail<InputError>("{}: format {} is not ckv.selection", f, j["format"].dump());
  if (j.contains("format_version") && j["format_version"] != 1)
    fail<InputError>("{}: ckv.selection format_version {}, this ckv reads version 1", f, j["format_version"].dump());
}

int64_t selection_layer(const std::string& key, const std::string& f, int64_t n_layer) {
  int64_t l = -1;
  const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), l);
  if (ec != std::errc() || end != key.data() + key.size() || l < 0 || l >= n_layer)
    fail<InputError>("{}: layer \"{}\" is not a layer index below {}", f, key, n_layer);
  return l;
}

// One layer's lists, one per KV head, of distinct integer positions >= 0.
std::vector<std::vector<int64_t>> selection_lists(const nlohmann::json& heads, const std::string& f, int64_t l,
                                                  int64_t n_kv_head) {
  if (!heads.is_array()) fail<InputError>("{}: layer {}: expected a list of {} lists (one per KV head)", f, l, n_kv_head);
  if (static_cast<int64_t>(heads.size()) != n_kv_head)
    fail<InputError>("{}: layer {}: {} lists, the model has {} KV heads", f, l, heads.size(), n_kv_head);
  std::vector<std::vector<int64_t>> lists;
  for (size_t g = 0; g < heads.size(); ++g) {
    if (!heads[g].is_array()) fail<InputError>("{}: layer {} KV head {}: expected a list of positions", f, l, g);
    std::vector<int64_t> positions;
    std::set<int64_t> seen;
    for (const auto& x : heads[g]) {
      // Integers only: a position 1.5 (or 1.0, or "1") is not a position, never truncated.
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        fail<InputError>("{}: layer {} KV head {}: position {} is not an integer >= 0", f, l, g, x.dump());
      if (!seen.insert(x.get<int64_t>()).second)
        fail<InputError>("{}: layer {} KV head {}: position {} listed twice", f, l, g, x.dump());
      positions.push_back(x.get<int64_t>());
    }
    lists.push_back(std::move(positions));
  }
  return lists;
}

}  // namespace

std::map<int64_t, std::vector<std::vector<int64_t>>> read_layer_selection_file(const std::filesystem::path& path,
                                                                                int64_t n_layer, int64_t n_kv_head,
                                                                                bool* old_format) {
  if (path.empty()) return {};  // no --selection-file
  const std::string f = path.string();
  const nlohmann::json j = read_selection_json(path);
  if (!j.is_object()) fail<InputError>("{}: not a selection file (docs/MASK.md: {{\"format\": \"ckv.selection\", ...}})", f);
  std::map<int64_t, std::vector<std::vector<int64_t>>> out;
  const bool versioned = j.contains("layers");
  if (old_format) *old_format = !versioned;
  if (!versioned) {  // the old {"<layer>": [[kept positions per KV head]]}
    for (const auto& [key, heads] : j.items()) {
      const int64_t l = selection_layer(key, f, n_layer);
      out[l] = selection_lists(heads, f, l, n_kv_head);
    }
    return out;
  }
  check_selection_header(j, f);
  if (!j["layers"].is_object()) fail<InputError>("{}: \"layers\" is not an object {{\"<layer>\": {{\"kept\": [...]}}}}", f);
  for (const auto& [key, entry] : j["layers"].items()) {
    const int64_t l = selection_layer(key, f, n_layer);
    if (!entry.is_object() || !entry.contains("kept") || entry.contains("evicted"))
      fail<InputError>("{}: layer {}: the 'file' method takes \"kept\" lists, one per KV head (\"evicted\" lists "
                       "are ckv mask's and ckv eval's)", f, l);
    out[l] = selection_lists(entry["kept"], f, l, n_kv_head);
  }
  return out;
}

EvictionPlan plan_from_selection_file(const std::filesystem::path& path, int64_t c, int64_t seq,
                                      const std::vector<int64_t>& layers,
                                      const std::vector<int64_t>& kv_heads, int64_t n_layer,
                                      int64_t n_kv_head) {
  const std::string f = path.string();
  check_lists(layers, kv_heads, n_layer, n_kv_head);
  if (c >= seq) fail<InputError>("{}: the prompt has no question (c = {} = its length)", f, c);
  const nlohmann::json j = read_selection_json(path);
  if (!j.is_object() || !j.contains("layers") || !j["layers"].is_object())
    fail<InputError>("{}: expected an object with \"layers\": {{\"<layer>\": {{\"kept\"|\"evicted\": [[...], ...]}}}}", f);
  check_selection_header(j, f);
  if (j.contains("c") && (!j["c"].is_number_integer() || j["c"].get<int64_t>() != c))
    fail<InputError>("{}: selection made for c = {}, the prompt's context ends at {}", f, j["c"].dump(), c);
  EvictionPlan plan = EvictionPlan::none(n_layer, n_kv_head, c, seq);
  const auto wanted = [](const std::vector<int64_t>& list, int64_t x) {
    return std::find(list.begin(), list.end(), x) != list.end();
  };
  for (const auto& [key, entry] : j["layers"].items()) {
    const int64_t l = selection_layer(key, f, n_layer);
    const bool kept = entry.is_object() && entry.contains("kept");
    const char* field = kept ? "kept" : "evicted";
    if (!entry.is_object() || entry.contains("kept") == entry.contains("evicted") ||
        !entry[field].is_array())
      fail<InputError>("{}: layer {}: expected exactly one of \"kept\" or \"evicted\", a list per KV head", f, l);
    const auto& heads = entry[field];
    if (static_cast<int64_t>(heads.size()) != n_kv_head)
      fail<InputError>("{}: layer {}: {} lists, the model has {} KV heads", f, l, heads.size(), n_kv_head);
    for (int64_t g = 0; g < n_kv_head; ++g) {
      std::vector<int64_t> positions;
      if (!heads[static_cast<size_t>(g)].is_array())
        fail<InputError>("{}: layer {} KV head {}: expected a list of positions", f, l, g);
      std::vector<char> seen(static_cast<size_t>(c), 0);
      for (const auto& x : heads[static_cast<size_t>(g)]) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= c)
          fail<InputError>("{}: layer {} KV head {}: position {} outside the context [0, {})", f,
                           l, g, x.dump(), c);
        if (seen[static_cast<size_t>(x.get<int64_t>())]++)
          fail<InputError>("{}: layer {} KV head {}: position {} listed twice", f, l, g, x.dump());
        positions.push_back(x.get<int64_t>());
      }
      if (kept && positions.empty())
        fail<InputError>("{}: layer {} KV head {}: keeps nothing of the context", f, l, g);
      if (!wanted(layers, l) || !wanted(kv_heads, g)) continue;
      plan.at(l, g) = kept ? complement(positions, c) : complement(complement(positions, c), c);
    }
  }
  if (plan.empty()) fail<InputError>("{}: the selection evicts nothing in the chosen layers and heads", f);
  return plan;
}

}  // namespace ckv

// --- --method/--budget ------------------------------------------------------------------

namespace ckv {

int64_t parse_budget(std::string_view text, int64_t c) {
  const int64_t b = budget_from_fraction(c, parse_budget_fraction(text, "--budget"));
  if (b >= c) fail<InputError>("--budget {}: keeps all {} context entries, nothing to evict", text, c);
  return b;
}

Budget mask_budget(std::string_view fraction, int64_t keep, int64_t c) {
  if (!fraction.empty()) return {parse_budget(fraction, c), budget_of_fraction(c, parse_budget_fraction(fraction, "--budget")).keep_share};
  check_keep(keep);
  if (keep >= c) fail<InputError>("--keep {}: keeps all {} context entries, nothing to evict", keep, c);
  return keep;
}

std::function<void(int64_t, const Tensor&, const Tensor&, const Tensor&, std::vector<AttentionMaskSpan>&)>
method_mask_source(const ModelConfig& config, const ModelWeights& weights, const MethodMask& req,
                   EvictionPlan* plan) {
  const MethodSpec::Kind leaf = req.method.leaf().kind;
  if (leaf == MethodSpec::Kind::File || leaf == MethodSpec::Kind::Oracle)
    fail<InputError>("--method {}: not available inside a forward pass (use --selection-file)", req.method.name());
  if (req.budget.kept <= 0) fail<InputError>("--budget: keeps nothing of the context");
  if (req.budget.kept >= req.c) fail<InputError>("--budget {}: keeps the whole context of {}", req.budget.kept, req.c);
  check_lists(req.layers, req.kv_heads, config.n_layer, config.n_kv_head);
  if (plan == nullptr || plan->n_layer != config.n_layer || plan->c != req.c)
    fail<InputError>("method mask: the plan does not match the model");
  const bool needs_nu = req.method.any_has(kNeedsNu);
  if (req.method.layer_global())
    for (int64_t l : req.layers)
      if (!req.layer_totals.count(l))
        fail<InputError>("--method {}: no layer allocation for layer {} (it needs the pre-pass)", req.method.name(), l);
  return [&config, &weights, req, plan, needs_nu](int64_t layer, const Tensor& q, const Tensor& k,
                                                  const Tensor& v, std::vector<AttentionMaskSpan>& spans) {
    if (std::find(req.layers.begin(), req.layers.end(), layer) == req.layers.end()) return;
    const Tensor wo = weights.layers[static_cast<size_t>(layer)].wo.to_f32();  // [d_model, n_head*d_head]
    // Only criticalkv and defensivekv rank by nu; for the others zeros stand in (selection_inputs reads
    // it), which saves a [seq, d_model] product per head and layer.
    const ValueNorms nu = needs_nu ? value_norms(v, wo, config.n_head, {}, {.l1 = true, .l2 = false}, req.pool)
                                   : ValueNorms{.l1 = Tensor({config.n_head, k.dim(1)}), .l2 = {}};
    const LayerTensors t{.q = &q, .k = &k, .v = &v, .wo = &wo, .nu_l1 = &nu.l1, .nu_l2 = nullptr};
    LayerRequest lr;
    lr.methods = {req.method};
    lr.budgets = {req.budget};
    lr.params = req.params;
    lr.c = req.c;
    lr.eval_rows = req.eval_rows;
    lr.layer = layer;
    lr.n_layer = config.n_layer;
    // The frequencies this layer rotated by in this pass (its own base on a Gemma 3 local layer).
    lr.rope_inv_freq = std::make_shared<const std::vector<float>>(
        layer_rope_inv_freq(config, weights.rope_freq_factors, layer, k.dim(1)));
    lr.window = config.window_of(layer);
    if (req.method.layer_global()) lr.layer_totals = {{req.budget, req.layer_totals.at(layer)}};
    const Selection sel = layer_selections(t, lr, req.pool).front();
    const int64_t seq = k.dim(1);
    for (int64_t g : req.kv_heads) {
      std::vector<int64_t> evicted = complement(sel.kept[static_cast<size_t>(g)], req.c);
      plan->at(layer, g) = evicted;
      if (!evicted.empty())
        spans.push_back({.kv_head = g, .q_begin = req.c, .q_end = seq, .keys = std::move(evicted)});
    }
  };
}

}  // namespace ckv

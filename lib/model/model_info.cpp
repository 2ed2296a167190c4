#include "model/model_info.h"

#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/family.h"

namespace ckv {
namespace {

std::string rope_description(const ModelConfig& c) {
  if (c.rope_scaling.type == "llama3") {
    return fmt::format("theta {:g}, llama3 scaling (factor {:g}, low {:g}, high {:g}, original {})",
                       c.rope_theta, c.rope_scaling.factor, c.rope_scaling.low_freq_factor,
                       c.rope_scaling.high_freq_factor, c.rope_scaling.original_max_position);
  }
  if (c.rope_scaling.type == "longrope")
    return fmt::format("theta {:g}, longrope over {} dims", c.rope_theta, c.rope_dim);
  return fmt::format("theta {:g}", c.rope_theta);
}

}  // namespace

nlohmann::json model_info_json(const Model& m) {
  const ModelConfig& c = m.config;
  nlohmann::json j;
  j["path"] = m.source.path.string();
  j["format"] = m.source.format;
  j["architecture"] = c.arch_name;
  j["family"] = family_of(c.arch).name;
  j["features"] = family_features(c);
  j["n_layer"] = c.n_layer;
  j["d_model"] = c.d_model;
  j["n_head"] = c.n_head;
  j["n_kv_head"] = c.n_kv_head;
  j["d_head"] = c.d_head;
  j["d_ff"] = c.d_ff;
  j["vocab"] = c.vocab;
  j["context_length"] = c.context_length;
  j["rms_eps"] = c.rms_eps;
  j["rope"] = {{"theta", c.rope_theta},
               {"type", c.rope_scaling.type},
               {"factor", c.rope_scaling.factor},
               {"low_freq_factor", c.rope_scaling.low_freq_factor},
               {"high_freq_factor", c.rope_scaling.high_freq_factor},
               {"original_max_position", c.rope_scaling.original_max_position},
               {"freq_factors_tensor", !m.weights.rope_freq_factors.empty()}};
  nlohmann::json sliding = nlohmann::json::array();  // docs/MODELS.md "Sliding-window attention"
  for (int64_t l = 0; l < c.n_layer; ++l)
    if (c.window_of(l) > 0) sliding.push_back(l);
  j["sliding_window"] = c.sliding_window;
  j["sliding_layers"] = sliding;
  j["attention_bias"] = c.attention_bias;
  j["tied_embeddings"] = c.tied_embeddings;
  j["tensor_count"] = m.source.tensor_count;
  j["tensor_dtypes"] = m.source.dtype_counts;
  if (m.tokenizer) {
    j["tokenizer"] = {{"kind", m.tokenizer->kind()},
                      {"pre_tokenizer", m.tokenizer->pre_tokenizer()},
                      {"vocab_size", m.tokenizer->vocab_size()},
                      {"bos_id", m.tokenizer->bos_id()},
                      {"eos_id", m.tokenizer->eos_id()},
                      {"chat_template", !m.tokenizer->chat_template().empty()}};
  } else {
    j["tokenizer"] = nullptr;
  }
  return j;
}

std::string model_info_text(const Model& m) {
  std::string text;
  const auto out = std::back_inserter(text);
  const ModelConfig& c = m.config;
  std::string dtypes;
  for (const auto& [name, count] : m.source.dtype_counts) {
    dtypes += fmt::format("{}{} {}", dtypes.empty() ? "" : ", ", name, count);
  }
  fmt::format_to(out, "model         {} ({})\n", m.source.path.string(), m.source.format);
  fmt::format_to(out, "architecture  {}\n", c.arch_name);
  const std::vector<std::string> features = family_features(c);
  fmt::format_to(out, "family        {}{}{}{}\n", family_of(c.arch).name, features.empty() ? "" : " (",
                 fmt::join(features, ", "), features.empty() ? "" : ")");
  fmt::format_to(out, "layers        {}\n", c.n_layer);
  fmt::format_to(out, "d_model       {}   d_ff {}   vocab {}\n", c.d_model, c.d_ff, c.vocab);
  fmt::format_to(out, "heads         {} query, {} KV (group {}), d_head {}\n", c.n_head, c.n_kv_head,
                 c.group_size(), c.d_head);
  fmt::format_to(out, "context       {}\n", c.context_length);
  fmt::format_to(out, "rope          {}{}\n", rope_description(c),
                 m.weights.rope_freq_factors.empty() ? "" : ", rope_freqs tensor");
  fmt::format_to(out, "rms_eps       {:g}\n", c.rms_eps);
  fmt::format_to(out, "qkv bias      {}\n", c.attention_bias ? "yes" : "no");
  fmt::format_to(out, "embeddings    {}\n", c.tied_embeddings ? "tied" : "separate lm_head");
  fmt::format_to(out, "tensors       {}: {}\n", m.source.tensor_count, dtypes);
  if (m.tokenizer) {
    const Tokenizer& t = *m.tokenizer;
    fmt::format_to(out, "tokenizer     {} (pre-tokeniser {}), {} tokens, bos {}, eos {}\n", t.kind(),
                   t.pre_tokenizer(), t.vocab_size(), t.bos_id(), t.eos_id());
    fmt::format_to(out, "chat template {}\n", t.chat_template().empty() ? "none" : "present");
  } else {
    fmt::format_to(out, "tokenizer     none (use --tokens)\n");
  }
  return text;
}

}  // namespace ckv

// ckv info: describe a model (config, tensors, tokenizer) as text or JSON.
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/error.h"
#include "model/family.h"
#include "model/model.h"

namespace ckv::app {
namespace {

struct InfoOptions {
  std::string path;  // model file/directory; empty: --model or the default model
  bool json = false;
};

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

nlohmann::json model_json(const Model& m) {
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

void print_model_text(const Model& m) {
  const ModelConfig& c = m.config;
  std::string dtypes;
  for (const auto& [name, count] : m.source.dtype_counts) {
    dtypes += fmt::format("{}{} {}", dtypes.empty() ? "" : ", ", name, count);
  }
  fmt::print("model         {} ({})\n", m.source.path.string(), m.source.format);
  fmt::print("architecture  {}\n", c.arch_name);
  const std::vector<std::string> features = family_features(c);
  fmt::print("family        {}{}{}{}\n", family_of(c.arch).name, features.empty() ? "" : " (",
             fmt::join(features, ", "), features.empty() ? "" : ")");
  fmt::print("layers        {}\n", c.n_layer);
  fmt::print("d_model       {}   d_ff {}   vocab {}\n", c.d_model, c.d_ff, c.vocab);
  fmt::print("heads         {} query, {} KV (group {}), d_head {}\n", c.n_head, c.n_kv_head,
             c.group_size(), c.d_head);
  fmt::print("context       {}\n", c.context_length);
  fmt::print("rope          {}{}\n", rope_description(c),
             m.weights.rope_freq_factors.empty() ? "" : ", rope_freqs tensor");
  fmt::print("rms_eps       {:g}\n", c.rms_eps);
  fmt::print("qkv bias      {}\n", c.attention_bias ? "yes" : "no");
  fmt::print("embeddings    {}\n", c.tied_embeddings ? "tied" : "separate lm_head");
  fmt::print("tensors       {}: {}\n", m.source.tensor_count, dtypes);
  if (m.tokenizer) {
    const Tokenizer& t = *m.tokenizer;
    fmt::print("tokenizer     {} (pre-tokeniser {}), {} tokens, bos {}, eos {}\n", t.kind(),
               t.pre_tokenizer(), t.vocab_size(), t.bos_id(), t.eos_id());
    fmt::print("chat template {}\n", t.chat_template().empty() ? "none" : "present");
  } else {
    fmt::print("tokenizer     none (use --tokens)\n");
  }
}

void run_info(const InfoOptions& o, const GlobalOptions& g) {
  std::string path = o.path.empty() ? g.model_path() : o.path;
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".h5") return info_dump(path, o.json);
  if (ext == ".json" || ext == ".jsonl" || ext == ".csv" || ext == ".txt" || ext == ".tsv")
    fail<UsageError>("{}: not a model nor a ckv output file: `ckv info` describes a .gguf file, an HF safetensors "
                     "directory or a ckv .h5 file", path);
  Model m = load_model(path);
  if (o.json) {
    fmt::print("{}\n", model_json(m).dump(2));
  } else {
    print_model_text(m);
  }
}

}  // namespace

void register_info(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Describe a model (config, tensors, tokenizer) or a ckv output file (.h5)");
  cmd->add_option("path", o->path, "Model (.gguf or HF directory) or output file (.h5); default: --model or the default model");
  add_model_options(*cmd, g);
  cmd->add_flag("--json", o->json, "Print JSON for scripts");
  cmd->callback([o, &g] { run_info(*o, g); });
}

}  // namespace ckv::app

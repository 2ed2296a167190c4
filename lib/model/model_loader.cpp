// load_model: a GGUF file or an HF safetensors directory to weights in HF layout, the
// matrices kept in their stored dtype in the memory-mapped file (fused ones split into row
// views). File names go through the
// canonical table (io/tensor_names.h); every tensor's shape is checked against the config
// before it is read; GGUF's llama Q/K row permutation is undone by a row map.
#include <cstdlib>
#include <fstream>
#include <functional>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/gguf.h"
#include "io/weight_check.h"
#include "io/safetensors.h"
#include "io/tensor_names.h"
#include "model/family.h"
#include "model/model.h"

namespace ckv {
namespace {

using NameFn = std::function<std::string(WeightKind, int64_t)>;
// The tensor of one expert in a format that stores each on its own (HF); null where the
// experts of a layer are stacked in one tensor per projection (GGUF).
using ExpertNameFn = std::function<std::string(WeightKind, int64_t layer, int64_t expert)>;

// The HF shape each weight must have under config c.
std::vector<int64_t> expected_shape(WeightKind kind, const ModelConfig& c) {
  const int64_t q_rows = c.n_head * c.d_head;
  const int64_t kv_rows = c.n_kv_head * c.d_head;
  switch (kind) {
    case WeightKind::TokenEmbd:
    case WeightKind::Output:
      return {c.vocab, c.d_model};
    case WeightKind::OutputNorm:
    case WeightKind::AttnNorm:
    case WeightKind::FfnNorm:
    case WeightKind::PostAttnNorm:
    case WeightKind::PostFfnNorm:
      return {c.d_model};
    case WeightKind::RopeFreqs:
      return {c.d_head / 2};
    case WeightKind::RopeFactorsShort:
    case WeightKind::RopeFactorsLong:
      return {c.rope_dim / 2};
    case WeightKind::AttnQkv:
      return {q_rows + 2 * kv_rows, c.d_model};
    case WeightKind::AttnQNorm:
    case WeightKind::AttnKNorm:
      return {c.d_head};
    case WeightKind::FfnGateUp:
      return {2 * c.d_ff, c.d_model};
    case WeightKind::AttnQ:
      return {q_rows, c.d_model};
    case WeightKind::AttnK:
    case WeightKind::AttnV:
      return {kv_rows, c.d_model};
    case WeightKind::AttnQBias:
      return {q_rows};
    case WeightKind::AttnKBias:
    case WeightKind::AttnVBias:
      return {kv_rows};
    case WeightKind::AttnOutput:
      return {c.d_model, q_rows};
    case WeightKind::FfnGate:
    case WeightKind::FfnUp:
      return {c.d_ff, c.d_model};
    case WeightKind::FfnDown:
      return {c.d_model, c.d_ff};
    case WeightKind::FfnGateInp:
      return {c.n_expert, c.d_model};
    case WeightKind::FfnGateExps:
    case WeightKind::FfnUpExps:
      return {c.n_expert, c.d_ff_expert, c.d_model};
    case WeightKind::FfnDownExps:
      return {c.n_expert, c.d_model, c.d_ff_expert};
  }
  return {};
}

// Lists every tensor the config calls for (the family's features, model/family.h) and
// checks presence and shape in table order (so the first problem reported is deterministic).
// Matrices become views of the mapped file in their stored dtype (`src` stays alive through
// `owner`); a fused matrix becomes one view per part, each a run of whole rows (a
// quantisation block never crosses a row), with no copy. The small vectors are float32.
void load_weights(const std::shared_ptr<const TensorSource>& src, const NameFn& name_of,
                  const ExpertNameFn& expert_name_of, const ModelConfig& c, const std::string& source,
                  ModelWeights& w) {
  struct Part {
    WeightMatrix* dst;
    int64_t rows;  // consecutive rows of the stored matrix, after the previous parts'
  };
  struct Job {
    Tensor* vec = nullptr;    // a small float32 tensor, or
    std::vector<Part> parts;  // a matrix kept in its stored dtype, whole or split by rows
    std::string file_name;
    std::vector<int64_t> shape;
  };
  std::vector<Job> jobs;
  auto add_vec = [&](Tensor* dst, WeightKind kind, int64_t layer) {
    jobs.push_back({dst, {}, name_of(kind, layer), expected_shape(kind, c)});
  };
  auto add_split = [&](WeightKind kind, int64_t layer, std::vector<Part> parts) {
    jobs.push_back({nullptr, std::move(parts), name_of(kind, layer), expected_shape(kind, c)});
  };
  auto add_mat = [&](WeightMatrix* dst, WeightKind kind, int64_t layer) {
    add_split(kind, layer, {{dst, expected_shape(kind, c)[0]}});
  };
  // An expert layer's router and experts: from one tensor per expert and projection, or
  // from a stacked [n_expert, rows, cols] tensor per projection viewed as n_expert row runs.
  auto add_experts = [&](LayerWeights& L, int64_t layer) {
    add_mat(&L.ffn_gate_inp, WeightKind::FfnGateInp, layer);
    L.experts.resize(static_cast<size_t>(c.n_expert));
    for (const auto& [kind, member] : {std::pair{WeightKind::FfnGateExps, &ExpertWeights::w_gate},
                                       std::pair{WeightKind::FfnUpExps, &ExpertWeights::w_up},
                                       std::pair{WeightKind::FfnDownExps, &ExpertWeights::w_down}}) {
      const std::vector<int64_t> shape = expected_shape(kind, c);  // [n_expert, rows, cols]
      std::vector<Part> parts;
      for (ExpertWeights& e : L.experts) parts.push_back({&(e.*member), shape[1]});
      if (!expert_name_of) {
        add_split(kind, layer, std::move(parts));
        continue;
      }
      for (int64_t e = 0; e < c.n_expert; ++e)
        jobs.push_back({nullptr, {parts[static_cast<size_t>(e)]}, expert_name_of(kind, layer, e), {shape[1], shape[2]}});
    }
  };
  add_mat(&w.token_embd, WeightKind::TokenEmbd, 0);
  add_vec(&w.output_norm, WeightKind::OutputNorm, 0);
  if (!c.tied_embeddings) add_mat(&w.output, WeightKind::Output, 0);
  w.layers.resize(static_cast<size_t>(c.n_layer));
  const int64_t q_rows = c.n_head * c.d_head, kv_rows = c.n_kv_head * c.d_head;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    add_vec(&L.attn_norm, WeightKind::AttnNorm, l);
    if (c.fused_qkv) {
      add_split(WeightKind::AttnQkv, l, {{&L.wq, q_rows}, {&L.wk, kv_rows}, {&L.wv, kv_rows}});
    } else {
      add_mat(&L.wq, WeightKind::AttnQ, l);
      add_mat(&L.wk, WeightKind::AttnK, l);
      add_mat(&L.wv, WeightKind::AttnV, l);
    }
    if (c.attention_bias) {
      add_vec(&L.bq, WeightKind::AttnQBias, l);
      add_vec(&L.bk, WeightKind::AttnKBias, l);
      add_vec(&L.bv, WeightKind::AttnVBias, l);
    }
    if (c.qk_norm) {
      add_vec(&L.q_norm, WeightKind::AttnQNorm, l);
      add_vec(&L.k_norm, WeightKind::AttnKNorm, l);
    }
    add_mat(&L.wo, WeightKind::AttnOutput, l);
    if (c.post_norms) add_vec(&L.post_attn_norm, WeightKind::PostAttnNorm, l);
    add_vec(&L.ffn_norm, WeightKind::FfnNorm, l);
    if (c.post_norms) add_vec(&L.post_ffn_norm, WeightKind::PostFfnNorm, l);
    if (c.expert_layer(l)) {
      add_experts(L, l);
      continue;
    }
    if (c.fused_gate_up) {
      add_split(WeightKind::FfnGateUp, l, {{&L.w_gate, c.d_ff}, {&L.w_up, c.d_ff}});
    } else {
      add_mat(&L.w_gate, WeightKind::FfnGate, l);
      add_mat(&L.w_up, WeightKind::FfnUp, l);
    }
    add_mat(&L.w_down, WeightKind::FfnDown, l);
  }
  for (const Job& job : jobs) {
    const TensorInfo* info = src->find(job.file_name);
    if (info == nullptr) fail<FormatError>("{}: missing tensor '{}'", source, job.file_name);
    if (info->shape != job.shape) {
      fail<FormatError>("{}: tensor '{}' has shape [{}], expected [{}] from the config", source,
                        job.file_name, fmt::join(info->shape, ", "), fmt::join(job.shape, ", "));
    }
  }
  for (const Job& job : jobs) {
    if (job.vec != nullptr) {
      *job.vec = src->load_f32(job.file_name);
      continue;
    }
    const TensorInfo& info = *src->find(job.file_name);
    const std::span<const uint8_t> bytes = src->stored_bytes(job.file_name);
    try {
      // Each part views its rows of the whole (the whole is checked first, so a row's bytes
      // are bytes.size() / rows).
      // A stacked [n, rows, cols] tensor is viewed as [n*rows, cols].
      const int64_t cols = info.shape.back();
      int64_t rows = 1;
      for (size_t d = 0; d + 1 < info.shape.size(); ++d) rows *= info.shape[d];
      const WeightMatrix whole = WeightMatrix::view(info.dtype, rows, cols, bytes, src);
      int64_t first = 0;
      for (const Part& part : job.parts) {
        *part.dst = WeightMatrix::view(info.dtype, part.rows, cols,
                                       bytes.subspan(static_cast<size_t>(first * whole.row_bytes()),
                                                     static_cast<size_t>(part.rows * whole.row_bytes())),
                                       src);
        first += part.rows;
      }
    } catch (const FormatError& e) {
      fail<FormatError>("{}: tensor '{}': {}", source, job.file_name, e.what());
    }
  }
  // A NaN or infinity in a matrix is refused at load, from its stored form (block scales
  // for the quantised types): one read of the file, no conversion.
  ThreadPool pool(0);
  pool.parallel_for(static_cast<int64_t>(jobs.size()), [&](int64_t i) {
    const Job& job = jobs[static_cast<size_t>(i)];
    const std::string what = fmt::format("{}: tensor '{}'", source, job.file_name);
    if (job.vec != nullptr) check_finite(what, job.vec->span());
    for (const Part& part : job.parts) check_finite(what, *part.dst);
  });
}

// llama.cpp's converter stores the rows of each llama q/k head interleaved (docs/MODELS.md):
// GGUF row h*d_head + 2i + j holds HF row h*d_head + j*d_head/2 + i.
std::vector<int32_t> unpermute_map(int64_t n_heads, int64_t d_head) {
  const int64_t half = d_head / 2;
  std::vector<int32_t> map(static_cast<size_t>(n_heads * d_head));  // HF row -> GGUF row
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        map[static_cast<size_t>(h * d_head + j * half + i)] = static_cast<int32_t>(h * d_head + 2 * i + j);
  return map;
}

// The same permutation applied to a bias [heads*d_head] (a row of one column).
void unpermute_bias(Tensor& t, int64_t n_heads, int64_t d_head) {
  if (t.empty()) return;
  const std::vector<int32_t> map = unpermute_map(n_heads, d_head);
  std::vector<float> out(t.storage().size());
  for (size_t r = 0; r < map.size(); ++r) out[r] = t.data()[map[r]];
  t.storage() = std::move(out);
}

// Where a multimodal checkpoint (Gemma3ForConditionalGeneration) keeps its language model's
// "model." tensors: "model.language_model." (transformers >= 4.52) or "language_model.model."
// (earlier); "" for a text-only checkpoint. Its vision tower's tensors are never read.
std::string text_model_prefix(const TensorSource& src) {
  if (src.find(hf_name(WeightKind::TokenEmbd)) != nullptr) return "";
  for (const char* prefix : {"model.language_model.", "language_model.model."})
    if (src.find(std::string(prefix) + "embed_tokens.weight") != nullptr) return prefix;
  return "";
}

// Gemma's RMSNorm multiplies by 1 + w where HF stores w: every norm weight + 1 (in fp32, as
// HF's `1.0 + self.weight.float()`), the form GGUF stores.
void add_one_to_norms(ModelWeights& w) {
  auto shift = [](Tensor& t) {
    for (float& x : t.storage()) x += 1.0f;
  };
  shift(w.output_norm);
  for (LayerWeights& L : w.layers)
    for (Tensor* t : {&L.attn_norm, &L.post_attn_norm, &L.ffn_norm, &L.post_ffn_norm, &L.q_norm, &L.k_norm})
      shift(*t);
}

void fill_source_info(const TensorSource& src, const std::filesystem::path& path, Model& m) {
  m.source.path = path;
  m.source.format = std::string(src.format());
  m.source.tensor_count = src.tensors().size();
  for (const TensorInfo& t : src.tensors())
    ++m.source.dtype_counts[std::string(dtype_name(t.dtype))];
}

Model load_gguf(const std::filesystem::path& path) {
  const std::string source = path.string();
  const auto file = std::make_shared<const GgufFile>(path);
  const GgufFile& gguf = *file;
  Model m;
  m.config = config_from_gguf(gguf);
  m.config.validate(source);
  load_weights(
      file, [](WeightKind k, int64_t l) { return gguf_name(k, l); }, nullptr, m.config, source, m.weights);
  if (family_of(m.config.arch).gguf_permuted_qk) {
    const std::vector<int32_t> q_map = unpermute_map(m.config.n_head, m.config.d_head);
    const std::vector<int32_t> k_map = unpermute_map(m.config.n_kv_head, m.config.d_head);
    for (LayerWeights& L : m.weights.layers) {
      L.wq.set_row_map(q_map);
      unpermute_bias(L.bq, m.config.n_head, m.config.d_head);
      L.wk.set_row_map(k_map);
      unpermute_bias(L.bk, m.config.n_kv_head, m.config.d_head);
    }
  }
  const std::string rope_name = gguf_name(WeightKind::RopeFreqs);
  if (const TensorInfo* info = gguf.find(rope_name)) {
    const std::vector<int64_t> want = expected_shape(WeightKind::RopeFreqs, m.config);
    if (info->shape != want) {
      fail<FormatError>("{}: tensor '{}' has shape [{}], expected [{}] (d_head/2)", source,
                        rope_name, fmt::join(info->shape, ", "), fmt::join(want, ", "));
    }
    m.weights.rope_freq_factors = gguf.load_f32(rope_name).storage();
    check_finite(fmt::format("{}: tensor '{}'", source, rope_name), m.weights.rope_freq_factors);
  }
  // "none" is llama.cpp's mark of a model without a vocabulary (the random-weight models of
  // bench/make_random_model.py): such a model takes token ids only, in ckv as in llama.cpp.
  if (const auto tok = gguf.get_string("tokenizer.ggml.model"); tok && *tok != "none")
    m.tokenizer = tokenizer_from_gguf(gguf);
  fill_source_info(gguf, path, m);
  return m;
}

Model load_hf_dir(const std::filesystem::path& dir) {
  const std::filesystem::path config_path = dir / "config.json";
  if (!std::filesystem::exists(config_path)) {
    fail<FormatError>("{}: no config.json in the model directory", dir.string());
  }
  const MappedFile config_file(config_path);
  const auto* text = reinterpret_cast<const char*>(config_file.bytes().data());
  const nlohmann::json j =
      nlohmann::json::parse(text, text + config_file.size(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail<FormatError>("{}: not valid JSON", config_path.string());
  Model m;
  m.config = config_from_hf_json(j, config_path.string());
  m.config.validate(config_path.string());
  const auto weights = std::make_shared<const SafetensorsDir>(dir);
  const Family& family = family_of(m.config.arch);
  const std::string prefix = text_model_prefix(*weights);
  const bool mixtral = m.config.hf_mixtral_expert_names;
  // "model.X" -> prefix + "X"; lm_head under "language_model." where the prefix is there.
  const auto prefixed = [&prefix](std::string name) {
    if (prefix.empty()) return name;
    if (name.starts_with("model.")) return prefix + name.substr(6);
    return prefix.starts_with("language_model.") ? "language_model." + name : name;
  };
  load_weights(
      weights,
      [&](WeightKind k, int64_t l) {
        std::string name = family.hf_name != nullptr ? family.hf_name(k, l) : "";
        if (name.empty()) name = hf_name(k, l, mixtral);
        return prefixed(std::move(name));
      },
      [&](WeightKind k, int64_t l, int64_t e) { return prefixed(hf_expert_name(k, l, e, mixtral)); }, m.config,
      dir.string(), m.weights);
  if (family.hf_norm_plus_one) add_one_to_norms(m.weights);
  const std::filesystem::path tokenizer_path = dir / "tokenizer.json";
  if (std::filesystem::exists(tokenizer_path)) m.tokenizer = tokenizer_from_json(tokenizer_path);
  fill_source_info(*weights, dir, m);
  return m;
}

}  // namespace

Model load_model(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    fail<IoError>("{}: no such file or directory", path.string());
  }
  if (std::filesystem::is_directory(status)) return load_hf_dir(path);
  // stat, not open: opening a FIFO would block until a writer appears.
  if (!std::filesystem::is_regular_file(status))
    fail<IoError>("{}: not a regular file (a .gguf file or an HF model directory)", path.string());
  // A file of an HF checkpoint stands for its directory.
  const std::string name = path.filename().string();
  if (name == "config.json" || name.ends_with(".safetensors") || name.ends_with(".index.json")) {
    return load_hf_dir(path.parent_path().empty() ? "." : path.parent_path());
  }
  return load_gguf(path);
}

std::filesystem::path default_model_path() {
  if (const char* env = std::getenv("CKV_MODEL"); env != nullptr && *env != '\0') {
    if (!std::filesystem::exists(env)) {
      fail<InputError>("CKV_MODEL={}: no such file or directory", env);
    }
    return env;
  }
  const std::filesystem::path relative = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::vector<std::filesystem::path> starts;
  std::error_code ec;
  starts.push_back(std::filesystem::current_path(ec));
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  for (std::filesystem::path dir : starts) {
    while (!dir.empty()) {
      const std::filesystem::path candidate = dir / relative;
      if (std::filesystem::is_regular_file(candidate, ec)) return candidate;
      if (dir == dir.root_path() || dir.parent_path() == dir) break;
      dir = dir.parent_path();
    }
  }
  fail<InputError>(
      "default model {} not found in the working directory, next to the "
      "executable or any of their parents; run scripts/setup.sh (or "
      "scripts/fetch_model.sh) to fetch it, or pass --model / set CKV_MODEL",
      relative.string());
}

}  // namespace ckv

// load_model against models written by HF transformers and gguf-py
// (tests/reference/make_loader_data.py): the GGUF and safetensors forms of one model must
// give bit-identical HF-layout weights, which checks the llama Q/K un-permutation against
// llama.cpp's converter permutation; the default model's q/k rows must equal what
// transformers' GGUF loader produces.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/family.h"
#include "model/model.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
const fs::path kDefaultModel =
    fs::path(CKV_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

void expect_bit_equal(const ckv::Tensor& a, const ckv::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  int64_t differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    differ += std::bit_cast<uint32_t>(a.data()[i]) != std::bit_cast<uint32_t>(b.data()[i]);
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << a.numel() << " elements differ";
}

void expect_bit_equal(const ckv::WeightMatrix& a, const ckv::WeightMatrix& b, const std::string& what) {
  expect_bit_equal(a.to_f32(), b.to_f32(), what);
}

void expect_same_weights(const ckv::ModelWeights& a, const ckv::ModelWeights& b, bool biases) {
  expect_bit_equal(a.token_embd, b.token_embd, "token_embd");
  expect_bit_equal(a.output_norm, b.output_norm, "output_norm");
  EXPECT_EQ(a.output.empty(), b.output.empty());
  if (!a.output.empty()) expect_bit_equal(a.output, b.output, "output");
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const ckv::LayerWeights& x = a.layers[l];
    const ckv::LayerWeights& y = b.layers[l];
    const std::string at = " layer " + std::to_string(l);
    expect_bit_equal(x.attn_norm, y.attn_norm, "attn_norm" + at);
    expect_bit_equal(x.wq, y.wq, "wq" + at);
    expect_bit_equal(x.wk, y.wk, "wk" + at);
    expect_bit_equal(x.wv, y.wv, "wv" + at);
    expect_bit_equal(x.wo, y.wo, "wo" + at);
    expect_bit_equal(x.ffn_norm, y.ffn_norm, "ffn_norm" + at);
    expect_bit_equal(x.w_gate, y.w_gate, "w_gate" + at);
    expect_bit_equal(x.w_up, y.w_up, "w_up" + at);
    expect_bit_equal(x.w_down, y.w_down, "w_down" + at);
    if (biases) {
      expect_bit_equal(x.bq, y.bq, "bq" + at);
      expect_bit_equal(x.bk, y.bk, "bk" + at);
      expect_bit_equal(x.bv, y.bv, "bv" + at);
    }
  }
}

// A scratch model directory, removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir()
      : path_(fs::temp_directory_path() / ("ckv_loader_test_" + std::to_string(::getpid()) + "_" +
                                           std::to_string(counter_++))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  // tiny_llama's weights with config.json edited by `edit`.
  void tiny_llama(const std::function<void(nlohmann::json&)>& edit) const {
    fs::copy_file(ckv::test::kLoadersDir / "tiny_llama" / "model.safetensors",
                  path_ / "model.safetensors");
    nlohmann::json config = read_json(ckv::test::kLoadersDir / "tiny_llama" / "config.json");
    edit(config);
    std::ofstream(path_ / "config.json") << config.dump();
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

template <typename E>
void expect_load_error(const fs::path& path, const std::string& what) {
  try {
    ckv::load_model(path);
    ADD_FAILURE() << "no error; expected one containing '" << what << "'";
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  } catch (const ckv::Error& e) {
    ADD_FAILURE() << "wrong error type: " << e.what();
  }
}

}  // namespace

TEST(ModelLoader, TinyLlamaGgufEqualsSafetensors) {
  const ckv::Model hf = ckv::load_model(ckv::test::kLoadersDir / "tiny_llama");
  const ckv::Model gg = ckv::load_model(ckv::test::kLoadersDir / "tiny_llama.gguf");
  for (const ckv::ModelConfig* c : {&hf.config, &gg.config}) {
    EXPECT_EQ(c->arch, ckv::Architecture::Llama);
    EXPECT_EQ(c->n_layer, 2);
    EXPECT_EQ(c->d_model, 32);
    EXPECT_EQ(c->n_head, 4);
    EXPECT_EQ(c->n_kv_head, 2);
    EXPECT_EQ(c->d_head, 8);
    EXPECT_EQ(c->d_ff, 32);
    EXPECT_EQ(c->vocab, 32);
    EXPECT_EQ(c->context_length, 256);
    EXPECT_EQ(c->rope_theta, 500000.0);
    EXPECT_FALSE(c->tied_embeddings);
  }
  EXPECT_EQ(hf.config.rope_scaling.type, "llama3");
  EXPECT_EQ(hf.config.rope_scaling.factor, 8.0);
  EXPECT_EQ(hf.config.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(hf.config.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(hf.config.rope_scaling.original_max_position, 64);
  EXPECT_FALSE(hf.config.attention_bias);
  EXPECT_TRUE(gg.config.attention_bias);  // the GGUF carries q/k/v biases

  // The file really is permuted, so equality below tests the un-permutation.
  const ckv::GgufFile raw(ckv::test::kLoadersDir / "tiny_llama.gguf");
  const ckv::Tensor stored_q = raw.load_f32("blk.0.attn_q.weight");
  EXPECT_NE(0, std::memcmp(stored_q.data(), hf.weights.layers[0].wq.to_f32().data(), 4 * 32 * 32));
  // The GGUF q/k are views of the file with a row map, not float32 copies.
  EXPECT_TRUE(gg.weights.layers[0].wq.has_row_map());
  EXPECT_FALSE(hf.weights.layers[0].wq.has_row_map());
  expect_same_weights(hf.weights, gg.weights, /*biases=*/false);

  const ckv::SafetensorsFile biases(ckv::test::kLoadersDir / "tiny_llama_biases.safetensors");
  for (size_t l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    expect_bit_equal(gg.weights.layers[l].bq, biases.load_f32(p + "q_proj.bias"), "bq");
    expect_bit_equal(gg.weights.layers[l].bk, biases.load_f32(p + "k_proj.bias"), "bk");
    expect_bit_equal(gg.weights.layers[l].bv, biases.load_f32(p + "v_proj.bias"), "bv");
  }
  const auto want_rope = read_json(ckv::test::kLoadersDir / "manifest.json")
                             .at("tiny_llama_rope_freqs")
                             .get<std::vector<double>>();
  ASSERT_EQ(gg.weights.rope_freq_factors.size(), want_rope.size());
  for (size_t i = 0; i < want_rope.size(); ++i) {
    EXPECT_EQ(gg.weights.rope_freq_factors[i], static_cast<float>(want_rope[i]));
  }
  EXPECT_TRUE(hf.weights.rope_freq_factors.empty());
  EXPECT_EQ(gg.source.format, "gguf");
  EXPECT_EQ(hf.source.format, "safetensors");
  EXPECT_EQ(gg.source.tensor_count, raw.tensors().size());
  EXPECT_EQ(gg.source.dtype_counts.at("F32"), raw.tensors().size());
}

TEST(ModelLoader, TinyQwen2GgufEqualsShardedBf16) {
  const ckv::Model hf = ckv::load_model(ckv::test::kLoadersDir / "tiny_qwen2");
  const ckv::Model gg = ckv::load_model(ckv::test::kLoadersDir / "tiny_qwen2.gguf");
  for (const ckv::ModelConfig* c : {&hf.config, &gg.config}) {
    EXPECT_EQ(c->arch, ckv::Architecture::Qwen2);
    EXPECT_EQ(c->n_kv_head, 1);
    EXPECT_TRUE(c->tied_embeddings);
    EXPECT_TRUE(c->attention_bias);
    EXPECT_EQ(static_cast<float>(c->rms_eps), 1e-6f);
  }
  EXPECT_TRUE(hf.weights.output.empty());
  EXPECT_EQ(&hf.weights.lm_head(), &hf.weights.token_embd);
  expect_same_weights(hf.weights, gg.weights, /*biases=*/true);
  EXPECT_EQ(hf.source.dtype_counts.at("BF16"), hf.source.tensor_count);
  // A file of the checkpoint stands for its directory.
  EXPECT_EQ(ckv::load_model(ckv::test::kLoadersDir / "tiny_qwen2" / "config.json").source.path,
            ckv::test::kLoadersDir / "tiny_qwen2");
}

TEST(ModelLoader, DefaultModelQkMatchTransformers) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << "default model not fetched";
  const nlohmann::json want = read_json(ckv::test::kLoadersDir / "default_model_expected.json");
  const auto start = std::chrono::steady_clock::now();
  const ckv::Model m = ckv::load_model(kDefaultModel);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("load_seconds", std::to_string(seconds));
  EXPECT_EQ(m.config.n_layer, want.at("n_layer").get<int64_t>());
  EXPECT_TRUE(m.weights.output.empty());
  EXPECT_EQ(m.source.tensor_count, want.at("tensor_count").get<size_t>());
  EXPECT_EQ(m.source.dtype_counts, (want.at("dtype_counts").get<std::map<std::string, size_t>>()));
  ASSERT_NE(m.tokenizer, nullptr);
  for (const auto& [key, slice] : want.at("hf_slices").items()) {
    SCOPED_TRACE(key);
    const auto layer = static_cast<size_t>(std::stoi(key.substr(0, key.find('.'))));
    const bool is_q = key.ends_with("q_proj");
    const ckv::Tensor w = (is_q ? m.weights.layers.at(layer).wq : m.weights.layers.at(layer).wk).to_f32();
    const auto cols = slice.at("columns").get<std::vector<int64_t>>();
    const auto bits = slice.at("f32_bits").get<std::vector<int32_t>>();
    ASSERT_EQ(bits.size(), static_cast<size_t>(w.dim(0)) * cols.size());
    int64_t differ = 0;
    for (int64_t r = 0; r < w.dim(0); ++r) {
      for (size_t c = 0; c < cols.size(); ++c) {
        const float got = w.data()[r * w.dim(1) + cols[c]];
        differ += std::bit_cast<int32_t>(got) != bits[static_cast<size_t>(r) * cols.size() + c];
      }
    }
    EXPECT_EQ(differ, 0);
  }
}

// tokenizer.ggml.model "none" (llama.cpp's model without a vocabulary) loads without a
// tokenizer and with the same weights; any other unknown tokenizer model stays an error.
TEST(ModelLoader, TokenizerModelNoneMeansNoTokenizer) {
  const fs::path src = fs::path(CKV_TEST_DATA_DIR) / "models" / "tiny_llama3_rope.gguf";
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "tokenizer.ggml.model";
  const std::string value_gpt2 = std::string("\x08\0\0\0\x04\0\0\0\0\0\0\0", 12) + "gpt2";
  const size_t at = bytes.find(key + value_gpt2);
  ASSERT_NE(at, std::string::npos) << "the tiny model's tokenizer is no longer gpt2";
  const ckv::Model with = ckv::load_model(src);
  ASSERT_NE(with.tokenizer, nullptr);
  ScratchDir d;
  const auto write = [&](const std::string& model_name) {
    std::string b = bytes;
    b.replace(at + key.size() + 12, 4, model_name);
    const fs::path p = d.path() / (model_name + ".gguf");
    std::ofstream(p, std::ios::binary) << b;
    return p;
  };
  const ckv::Model none = ckv::load_model(write("none"));
  EXPECT_EQ(none.tokenizer, nullptr);
  expect_bit_equal(none.weights.layers.at(0).wq.to_f32(), with.weights.layers.at(0).wq.to_f32(), "wq");
  expect_load_error<ckv::UnsupportedError>(write("bert"), "tokenizer.ggml.model 'bert' is not supported");
}

TEST(ModelLoader, MissingInputs) {
  expect_load_error<ckv::IoError>(ckv::test::kLoadersDir / "absent.gguf", "no such file");
  ScratchDir empty;
  expect_load_error<ckv::FormatError>(empty.path(), "no config.json");
  ScratchDir no_weights;
  std::ofstream(no_weights.path() / "config.json")
      << read_json(ckv::test::kLoadersDir / "tiny_llama" / "config.json").dump();
  expect_load_error<ckv::FormatError>(no_weights.path(), "no model.safetensors");
}

TEST(ModelLoader, UnsupportedArchitecture) {
  expect_load_error<ckv::UnsupportedError>(
      ckv::test::kLoadersDir / "bad_arch.gguf",
      "unsupported architecture 'gpt2' (supported: llama, qwen2, qwen3, phi3, qwen3moe, gemma3)");
  ScratchDir d;
  d.tiny_llama([](nlohmann::json& c) { c["model_type"] = "gemma2"; });
  expect_load_error<ckv::UnsupportedError>(d.path(), "unsupported architecture 'gemma2'");
  ScratchDir mm;  // a multimodal gemma3 config must carry its language model's config
  mm.tiny_llama([](nlohmann::json& c) { c["model_type"] = "gemma3"; });
  expect_load_error<ckv::FormatError>(mm.path(), "needs a text_config object");
  ScratchDir bias;
  bias.tiny_llama([](nlohmann::json& c) { c["attention_bias"] = true; });
  expect_load_error<ckv::UnsupportedError>(bias.path(), "attention_bias");
  ScratchDir rope;
  rope.tiny_llama([](nlohmann::json& c) { c["rope_parameters"]["rope_type"] = "yarn"; });
  expect_load_error<ckv::UnsupportedError>(rope.path(), "rope type 'yarn'");
}

// Where each family applies a sliding window (HF's rules): Mistral's on every layer, Qwen2's
// only under use_sliding_window and from max_window_layers on (or as layer_types says), none
// for a null window (Mistral v0.3); a malformed one is a FormatError.
TEST(ModelLoader, SlidingWindowLayers) {
  auto layers_of = [](const ckv::ModelConfig& c) {
    std::string out;
    for (int64_t l = 0; l < c.n_layer; ++l) out += c.window_of(l) > 0 ? 'S' : 'F';
    return out;
  };
  ScratchDir window;
  window.tiny_llama([](nlohmann::json& c) {
    c["model_type"] = "mistral";
    c["sliding_window"] = 16;
  });
  const ckv::Model m = ckv::load_model(window.path());
  EXPECT_EQ(m.config.sliding_window, 16);
  EXPECT_EQ(layers_of(m.config), std::string(static_cast<size_t>(m.config.n_layer), 'S'));
  ScratchDir none;
  none.tiny_llama([](nlohmann::json& c) {
    c["model_type"] = "mistral";
    c["sliding_window"] = nullptr;
  });
  EXPECT_EQ(layers_of(ckv::load_model(none.path()).config).find('S'), std::string::npos);
  ScratchDir bad;
  bad.tiny_llama([](nlohmann::json& c) {
    c["model_type"] = "mistral";
    c["sliding_window"] = -3;
  });
  expect_load_error<ckv::FormatError>(bad.path(), "'sliding_window' is -3");

  const nlohmann::json j = nlohmann::json::parse(R"({"model_type": "qwen2", "num_hidden_layers": 4,
      "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 300,
      "sliding_window": 32, "max_window_layers": 1})");
  EXPECT_EQ(layers_of(ckv::config_from_hf_json(j, "q")), "FFFF");  // use_sliding_window false
  nlohmann::json on = j;
  on["use_sliding_window"] = true;
  EXPECT_EQ(layers_of(ckv::config_from_hf_json(on, "q")), "FSSS");
  on["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  EXPECT_EQ(layers_of(ckv::config_from_hf_json(on, "q")), "SFSF");
  on["layer_types"] = {"sliding_attention"};
  EXPECT_THROW(ckv::config_from_hf_json(on, "q"), ckv::FormatError);
}

// Gemma 3's config as the hub writes it (rope_theta, rope_local_base_freq, rope_scaling,
// sliding_window_pattern) and as transformers 5 saves it (rope_parameters per layer type):
// the same model; a multimodal config's text_config fills in Gemma3TextConfig's defaults.
TEST(ModelLoader, Gemma3Config) {
  const nlohmann::json hub = nlohmann::json::parse(R"({"model_type": "gemma3_text", "num_hidden_layers": 7,
      "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
      "intermediate_size": 128, "vocab_size": 300, "sliding_window": 16, "sliding_window_pattern": 3,
      "rope_theta": 20000.0, "rope_local_base_freq": 50.0, "query_pre_attn_scalar": 16,
      "rope_scaling": {"rope_type": "linear", "factor": 4.0}})");
  nlohmann::json v5 = hub;
  for (const char* key : {"rope_theta", "rope_local_base_freq", "rope_scaling"}) v5.erase(key);
  v5["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 20000.0}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 50.0}}}};
  for (const nlohmann::json& j : {hub, v5}) {
    const ckv::ModelConfig c = ckv::config_from_hf_json(j, "g");
    std::string layers;
    for (int64_t l = 0; l < c.n_layer; ++l) layers += c.window_of(l) > 0 ? 'S' : 'F';
    EXPECT_EQ(layers, "SSFSSFS");
    EXPECT_EQ(c.rope_theta, 20000.0);
    EXPECT_EQ(c.rope_local_theta, 50.0);
    EXPECT_EQ(c.rope_scaling.type, "linear");
    EXPECT_EQ(c.rope_scaling.factor, 4.0);
    EXPECT_EQ(c.attn_scale, 0.25);
    // 0.25 is not 1/sqrt(32): the analyses that recompute attention refuse the model.
    EXPECT_THROW(ckv::require_default_attention_scale(c, "ckv bound"), ckv::UnsupportedError);
    EXPECT_TRUE(c.tied_embeddings && c.post_norms && c.qk_norm);
    EXPECT_EQ(c.embed_scale, 8.0);
  }
  const nlohmann::json mm = {{"model_type", "gemma3"},
                             {"text_config", {{"hidden_size", 2560}, {"num_hidden_layers", 34},
                                              {"intermediate_size", 10240}, {"sliding_window", 1024}}}};
  const ckv::ModelConfig c = ckv::config_from_hf_json(mm, "mm");
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_kv_head, 4);
  EXPECT_EQ(c.d_head, 256);
  EXPECT_EQ(c.vocab, 262208);
  EXPECT_EQ(c.arch_name, "gemma3 (text_config)");
  EXPECT_NO_THROW(ckv::require_default_attention_scale(c, "ckv bound"));  // 256^-0.5 = 1/sqrt(256)
  nlohmann::json soft = hub;
  soft["attn_logit_softcapping"] = 50.0;
  EXPECT_THROW(ckv::config_from_hf_json(soft, "g"), ckv::UnsupportedError);
}

TEST(ModelLoader, ConfigAndShapeMismatches) {
  ScratchDir ff;
  ff.tiny_llama([](nlohmann::json& c) { c["intermediate_size"] = 48; });
  expect_load_error<ckv::FormatError>(
      ff.path(),
      "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [32, 32], expected [48, 32]");
  ScratchDir layers;
  layers.tiny_llama([](nlohmann::json& c) { c["num_hidden_layers"] = 3; });
  expect_load_error<ckv::FormatError>(layers.path(),
                                      "missing tensor 'model.layers.2.input_layernorm.weight'");
  ScratchDir heads;
  heads.tiny_llama([](nlohmann::json& c) { c["num_key_value_heads"] = 3; });
  expect_load_error<ckv::FormatError>(heads.path(), "not a multiple of n_kv_head");
  ScratchDir type;
  type.tiny_llama([](nlohmann::json& c) { c["hidden_size"] = "32"; });
  expect_load_error<ckv::FormatError>(type.path(), "'hidden_size'");
  ScratchDir json;
  json.tiny_llama([](nlohmann::json&) {});
  std::ofstream(json.path() / "config.json") << "{\"model_type\": ";
  expect_load_error<ckv::FormatError>(json.path(), "not valid JSON");
}

TEST(ModelLoader, DefaultModelPathFromEnvironment) {
  const char* old = std::getenv("CKV_MODEL");
  const std::string saved = old ? old : "";
  ::setenv("CKV_MODEL", (ckv::test::kLoadersDir / "tiny_llama.gguf").c_str(), 1);
  EXPECT_EQ(ckv::default_model_path(), ckv::test::kLoadersDir / "tiny_llama.gguf");
  ::setenv("CKV_MODEL", (ckv::test::kLoadersDir / "absent.gguf").c_str(), 1);
  EXPECT_THROW(ckv::default_model_path(), ckv::InputError);
  if (old)
    ::setenv("CKV_MODEL", saved.c_str(), 1);
  else
    ::unsetenv("CKV_MODEL");
  if (fs::exists(kDefaultModel)) {
    EXPECT_EQ(fs::canonical(ckv::default_model_path()), fs::canonical(kDefaultModel));
  }
}

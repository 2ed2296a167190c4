// The mixture-of-experts MLP (ops/moe.h) against a float64 reference of HF's
// Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock computed token by token here, and the MoE
// config options of qwen3moe and mixtral (model/config.h): read, honoured, or refused in one
// line. The forward pass against HF itself is test_forward.cpp's goldens (tiny_qwen3moe,
// tiny_qwen3moe_sparse, tiny_mixtral and their GGUF copies).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/family.h"
#include "model/model.h"
#include "ops/moe.h"
#include "random_blocks.h"
#include "test_util.h"

namespace ckv {
namespace {

TEST(MoeRoute, SoftmaxTopKAndRenormalisation) {
  const Tensor logits({2, 4}, {1, 3, 2, 0, 0.5f, 0.5f, -1, 0.5f});
  const double s = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0);
  const MoeRouting raw = moe_route(logits, 2, false);
  EXPECT_EQ(raw.expert, (std::vector<int32_t>{1, 2, 0, 1}));  // equal probabilities: lower index first
  EXPECT_NEAR(raw.weight[0], std::exp(3.0) / s, 1e-7);
  EXPECT_NEAR(raw.weight[1], std::exp(2.0) / s, 1e-7);
  const MoeRouting norm = moe_route(logits, 2, true);
  EXPECT_EQ(norm.expert, raw.expert);
  // Renormalised top-k probabilities are the softmax over the top-k logits (Mixtral's reading).
  EXPECT_NEAR(norm.weight[0], 1 / (1 + std::exp(-1.0)), 1e-7);
  EXPECT_NEAR(norm.weight[1], 1 / (1 + std::exp(1.0)), 1e-7);
  EXPECT_NEAR(norm.weight[2], 0.5, 1e-7);
  EXPECT_NEAR(norm.weight[3], 0.5, 1e-7);
  EXPECT_THROW(moe_route(logits, 0, true), InputError);
  EXPECT_THROW(moe_route(logits, 5, true), InputError);
  EXPECT_THROW(moe_route(Tensor({1, 3}, {0, INFINITY, 1}), 1, true), FormatError);
  EXPECT_THROW(moe_route(Tensor({1, 3}, {0, NAN, 1}), 1, true), FormatError);
}

struct TinyMoe {
  int64_t d_model = 32, d_ff = 32, n_expert = 5, n_used = 2;
  Tensor router = random_tensor({n_expert, d_model}, 1, 0.5f);
  std::vector<Tensor> gate, up, down;
  std::vector<WeightMatrix> mats;  // gate, up, down of each expert
  std::vector<MoeExpert> experts;
  TinyMoe() {
    for (int64_t e = 0; e < n_expert; ++e) {
      gate.push_back(random_tensor({d_ff, d_model}, 10 + static_cast<uint32_t>(e), 0.2f));
      up.push_back(random_tensor({d_ff, d_model}, 20 + static_cast<uint32_t>(e), 0.2f));
      down.push_back(random_tensor({d_model, d_ff}, 30 + static_cast<uint32_t>(e), 0.2f));
    }
    for (int64_t e = 0; e < n_expert; ++e)
      for (const Tensor* t : {&gate[static_cast<size_t>(e)], &up[static_cast<size_t>(e)], &down[static_cast<size_t>(e)]})
        mats.push_back(WeightMatrix::borrow(*t));
    for (int64_t e = 0; e < n_expert; ++e)
      experts.push_back({&mats[static_cast<size_t>(3 * e)], &mats[static_cast<size_t>(3 * e + 1)],
                         &mats[static_cast<size_t>(3 * e + 2)]});
  }
  // HF's block for one token, in float64: softmax, top-k, optional renormalisation, the
  // weighted sum of the chosen experts' down(silu(gate x) * up x).
  std::vector<double> reference(const float* x, bool normalize) const {
    const auto mat = [](const Tensor& t) { return t.matrix().cast<double>(); };
    const Eigen::VectorXd xv = Eigen::Map<const Eigen::VectorXf>(x, d_model).cast<double>();
    Eigen::VectorXd p = mat(router) * xv;
    p = (p.array() - p.maxCoeff()).exp();
    p /= p.sum();
    std::vector<int> order(static_cast<size_t>(n_expert));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double kept = 0;
    for (int64_t j = 0; j < n_used; ++j) kept += p[order[static_cast<size_t>(j)]];
    Eigen::VectorXd y = Eigen::VectorXd::Zero(d_model);
    for (int64_t j = 0; j < n_used; ++j) {
      const auto e = static_cast<size_t>(order[static_cast<size_t>(j)]);
      const Eigen::ArrayXd g = (mat(gate[e]) * xv).array();
      const Eigen::VectorXd h = (g / (1 + (-g).exp()) * (mat(up[e]) * xv).array()).matrix();
      y += (normalize ? p[static_cast<long>(e)] / kept : p[static_cast<long>(e)]) * (mat(down[e]) * h);
    }
    return {y.data(), y.data() + d_model};
  }
};

// Prefill (40 rows: the tiled GEMM path, several rows per expert) and decode (3 rows: the
// few-row path) both equal HF's per-token sum within float32 rounding.
TEST(MoeMlp, EqualsTheWeightedSumOfEachTokensExperts) {
  const TinyMoe m;
  ExecContext ctx({.threads = 2});
  for (const int64_t rows : {40, 3}) {
    for (const bool normalize : {true, false}) {
      SCOPED_TRACE(testing::Message() << rows << " rows, normalize " << normalize);
      const Tensor x = random_tensor({rows, m.d_model}, 7);
      Tensor y;
      moe_mlp(ctx, x, WeightMatrix::borrow(m.router), m.experts, m.n_used, normalize, y);
      ASSERT_EQ(y.shape(), (std::vector<int64_t>{rows, m.d_model}));
      double worst = 0, scale = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<double> want = m.reference(x.data() + r * m.d_model, normalize);
        for (int64_t i = 0; i < m.d_model; ++i) {
          worst = std::max(worst, std::abs(y.data()[r * m.d_model + i] - want[static_cast<size_t>(i)]));
          scale = std::max(scale, std::abs(want[static_cast<size_t>(i)]));
        }
      }
      EXPECT_GT(scale, 0.1);
      EXPECT_LE(worst, 1e-5 * scale);
    }
  }
}

TEST(MoeMlp, IndependentOfThreads) {
  const TinyMoe m;
  const Tensor x = random_tensor({70, m.d_model}, 8);
  Tensor y1, y3;
  ExecContext one({.threads = 1}), three({.threads = 3});
  moe_mlp(one, x, WeightMatrix::borrow(m.router), m.experts, m.n_used, true, y1);
  moe_mlp(three, x, WeightMatrix::borrow(m.router), m.experts, m.n_used, true, y3);
  ASSERT_EQ(y1.shape(), y3.shape());
  for (int64_t i = 0; i < y1.numel(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(y1.data()[i]), std::bit_cast<uint32_t>(y3.data()[i])) << i;
  Tensor bad_router = random_tensor({m.n_expert + 1, m.d_model}, 2);
  EXPECT_THROW(moe_mlp(one, x, WeightMatrix::borrow(bad_router), m.experts, m.n_used, true, y1), InputError);
}

nlohmann::json qwen3moe_config() {
  return {{"model_type", "qwen3_moe"}, {"num_hidden_layers", 4}, {"hidden_size", 64},
          {"num_attention_heads", 4},  {"num_key_value_heads", 2}, {"head_dim", 16},
          {"intermediate_size", 96},   {"vocab_size", 256},        {"num_experts", 4},
          {"num_experts_per_tok", 2},  {"moe_intermediate_size", 32}, {"norm_topk_prob", true}};
}

ModelConfig read(const nlohmann::json& j) {
  ModelConfig c = config_from_hf_json(j, "config.json");
  c.validate("config.json");
  return c;
}

template <typename E>
void expect_refused(const nlohmann::json& j, const std::string& needle) {
  try {
    read(j);
    ADD_FAILURE() << "accepted " << j.dump();
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MoeConfig, Qwen3MoeExpertLayersFollowSparseStepAndMlpOnlyLayers) {
  ModelConfig c = read(qwen3moe_config());
  EXPECT_EQ(c.arch, Architecture::Qwen3Moe);
  EXPECT_EQ(family_of(c.arch).name, "qwen3moe");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.n_expert, 4);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.d_ff_expert, 32);
  EXPECT_EQ(c.d_ff, 96);
  EXPECT_TRUE(c.norm_topk_prob);
  for (int64_t l = 0; l < 4; ++l) EXPECT_TRUE(c.expert_layer(l)) << l;
  const std::vector<std::string> features = family_features(c);
  EXPECT_EQ(std::vector<std::string>(features.end() - 3, features.end()),
            (std::vector<std::string>{"4 experts of d_ff 32", "2 experts per token", "top-k weights renormalised"}));
  nlohmann::json j = qwen3moe_config();
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  j["norm_topk_prob"] = false;
  c = read(j);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ((std::vector<bool>{c.expert_layer(0), c.expert_layer(1), c.expert_layer(2), c.expert_layer(3)}),
            (std::vector<bool>{false, true, false, false}));
  const std::vector<std::string> sparse = family_features(c);
  EXPECT_EQ(std::vector<std::string>(sparse.end() - 2, sparse.end()),
            (std::vector<std::string>{"top-k weights as routed", "3 dense layers"}));
  // transformers 5 writes Qwen3MoeConfig's num_experts as num_local_experts.
  nlohmann::json local = qwen3moe_config();
  local.erase("num_experts");
  local["num_local_experts"] = 6;
  EXPECT_EQ(read(local).n_expert, 6);
  local["num_experts"] = 5;
  expect_refused<FormatError>(local, "num_experts 5 and num_local_experts 6 differ");
  j["num_experts"] = 0;  // HF: every layer dense
  c = read(j);
  for (int64_t l = 0; l < 4; ++l) EXPECT_FALSE(c.expert_layer(l)) << l;
}

TEST(MoeConfig, Qwen3MoeRefusals) {
  nlohmann::json j = qwen3moe_config();
  j["shared_expert_intermediate_size"] = 64;
  expect_refused<UnsupportedError>(j, "shared experts (shared_expert_intermediate_size)");
  j = qwen3moe_config();
  j["decoder_sparse_step"] = 0;
  expect_refused<FormatError>(j, "decoder_sparse_step = 0");
  j = qwen3moe_config();
  j["mlp_only_layers"] = {4};
  expect_refused<FormatError>(j, "mlp_only_layers holds 4 of 4 layers");
  j["mlp_only_layers"] = 1;
  expect_refused<FormatError>(j, "'mlp_only_layers' is 1, not a list");
  j = qwen3moe_config();
  j["num_experts_per_tok"] = 5;
  expect_refused<FormatError>(j, "5 experts per token of 4");
  j = qwen3moe_config();
  j["use_sliding_window"] = true;
  expect_refused<UnsupportedError>(j, "qwen3moe sliding-window attention");
}

TEST(MoeConfig, MixtralIsLlamaWithExperts) {
  nlohmann::json j = qwen3moe_config();
  j["model_type"] = "mixtral";
  j.erase("num_experts");
  j["num_local_experts"] = 8;
  const ModelConfig c = read(j);
  EXPECT_EQ(c.arch, Architecture::Llama);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.d_ff_expert, c.d_ff);    // Mixtral's experts have intermediate_size
  EXPECT_TRUE(c.norm_topk_prob);       // HF Mixtral always renormalises
  EXPECT_TRUE(c.hf_mixtral_expert_names);
  for (int64_t l = 0; l < 4; ++l) EXPECT_TRUE(c.expert_layer(l)) << l;
}


namespace moe_files {

namespace fs = std::filesystem;
const fs::path kModels = fs::path(CKV_TEST_DATA_DIR) / "models";

// tiny_qwen3moe.gguf with the uint32 value of metadata `key` replaced, written to `out`.
fs::path with_u32(const std::string& key, uint32_t value, const fs::path& out) {
  std::string b = ckv::test::read_file(kModels / "tiny_qwen3moe.gguf");
  const size_t at = b.find(key);
  EXPECT_NE(at, std::string::npos) << key;
  const size_t type_at = at + key.size();
  EXPECT_EQ(b[type_at], 4) << key << " is not a uint32 (GGUF type 4)";
  std::memcpy(b.data() + type_at + 4, &value, 4);
  std::ofstream(out, std::ios::binary) << b;
  return out;
}

template <typename E>
void expect_load_refused(const fs::path& p, const std::string& needle) {
  try {
    load_model(p);
    ADD_FAILURE() << "loaded " << p;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MoeFiles, BothFormatsLoadTheSameExperts) {
  const Model hf = load_model(kModels / "tiny_qwen3moe");
  const Model gguf = load_model(kModels / "tiny_qwen3moe.gguf");
  ASSERT_EQ(hf.weights.layers.size(), 2u);
  for (size_t l = 0; l < 2; ++l) {
    const LayerWeights& a = hf.weights.layers[l];
    const LayerWeights& b = gguf.weights.layers[l];
    ASSERT_EQ(a.experts.size(), 8u);
    ASSERT_EQ(b.experts.size(), 8u);
    EXPECT_TRUE(a.w_gate.empty() && b.w_gate.empty()) << "an expert layer has no dense MLP";
    // The GGUF's F32 stacked tensor of each layer (blk.0 ffn_down_exps, blk.1 ffn_gate_exps)
    // holds the bf16 values of the safetensors file exactly; each expert is a row view.
    for (size_t e = 0; e < 8; ++e) {
      const WeightMatrix& x = l == 0 ? a.experts[e].w_down : a.experts[e].w_gate;
      const WeightMatrix& y = l == 0 ? b.experts[e].w_down : b.experts[e].w_gate;
      EXPECT_EQ(y.dtype(), DType::F32);
      const Tensor xf = x.to_f32(), yf = y.to_f32();
      ASSERT_EQ(xf.shape(), yf.shape());
      EXPECT_TRUE(std::equal(xf.span().begin(), xf.span().end(), yf.span().begin())) << "layer " << l << " expert " << e;
    }
    EXPECT_EQ(b.experts[0].w_gate.dtype(), l == 0 ? DType::Q8_0 : DType::F32);  // stored dtype kept
  }
  // Stacked: expert e's rows follow expert e-1's in the mapped file.
  const WeightMatrix& e0 = gguf.weights.layers[0].experts[0].w_up;
  const WeightMatrix& e1 = gguf.weights.layers[0].experts[1].w_up;
  EXPECT_EQ(e1.row(0), e0.row(0) + e0.stored_bytes());
}

TEST(MoeFiles, HostileExpertMetadataIsRefusedBeforeAnyTensorIsRead) {
  const fs::path dir = fs::temp_directory_path() / ("ckv_moe_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  expect_load_refused<FormatError>(with_u32("qwen3moe.expert_used_count", 9, dir / "used.gguf"),
                                   "invalid config: 9 experts per token of 8");
  expect_load_refused<FormatError>(with_u32("qwen3moe.expert_count", 7, dir / "count.gguf"),
                                   "tensor 'blk.0.ffn_gate_inp.weight' has shape [8, 64], expected [7, 64]");
  expect_load_refused<FormatError>(with_u32("qwen3moe.expert_count", 1u << 30, dir / "huge.gguf"),
                                   "invalid config: n_expert = 1073741824");
  expect_load_refused<FormatError>(with_u32("qwen3moe.expert_feed_forward_length", 48, dir / "ff.gguf"),
                                   "tensor 'blk.0.ffn_gate_exps.weight' has shape [8, 32, 64], expected [8, 48, 64]");
  fs::remove_all(dir);
}

}  // namespace moe_files
}  // namespace
}  // namespace ckv

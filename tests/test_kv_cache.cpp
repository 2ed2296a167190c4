// The KV cache (model/kv_cache.h) and decoding over it (Forward::run_cached,
// model/decode.h): cached decoding equals recomputing the whole sequence every step (logits
// within fp32 tolerance, identical greedy tokens) on the tiny models and the default model;
// a cache with evicted entries equals the -inf logit mask of the same entries (docs/MATH.md §2:
// masking is eviction); and the cache's own bookkeeping refuses what it cannot hold.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/decode.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "logits_util.h"
#include "model/model.h"
#include "ops/attention.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;

fs::path model_path(const std::string& name) {
  if (name == "default") return fs::path(CKV_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  return fs::path(CKV_TEST_DATA_DIR) / "models" / name;
}

const Model& cached_model(const std::string& name) {
  static std::map<std::string, Model> models;
  auto it = models.find(name);
  if (it == models.end()) it = models.emplace(name, load_model(model_path(name))).first;
  return it->second;
}

using test::random_tokens;
using test::relative_error;

class CachedDecode : public ::testing::TestWithParam<std::string> {};

// Greedy decoding over the cache against a full recomputation at every step: the logits of
// each step within 1e-4 of the logit range (fp32; the GEMMs block differently), the same
// tokens. The prefill is also split into chunks (a prompt fed in three pieces).
TEST_P(CachedDecode, EqualsFullRecomputation) {
  if (!fs::exists(model_path(GetParam()))) GTEST_SKIP() << model_path(GetParam()) << " absent";
  const Model& model = cached_model(GetParam());
  Forward fwd(model, {.threads = 2});
  const int64_t prompt_len = GetParam() == "default" ? 200 : 40, steps = GetParam() == "default" ? 6 : 10;
  std::vector<int32_t> seq = random_tokens(prompt_len, model.config.vocab, 7);

  KvCache cache(model.config);
  ForwardRequest prefill;
  prefill.cache = &cache;
  ForwardResult out = fwd.run(seq, prefill);
  ASSERT_EQ(cache.next_position(), prompt_len);
  ASSERT_EQ(cache.size(0, 0), prompt_len);

  // The same prompt fed into a second cache in three pieces.
  KvCache pieces(model.config);
  const int64_t a = prompt_len / 3, b = 2 * prompt_len / 3;
  fwd.run_cached(std::span(seq).first(static_cast<size_t>(a)), pieces);
  fwd.run_cached(std::span(seq).subspan(static_cast<size_t>(a), static_cast<size_t>(b - a)), pieces);
  const ForwardResult piecewise = fwd.run_cached(std::span(seq).subspan(static_cast<size_t>(b)), pieces);
  EXPECT_LE(relative_error(piecewise.logits.span(), out.logits.span()), 1e-4);

  for (int64_t step = 0; step < steps; ++step) {
    const int32_t next = greedy_token(out.logits.span());
    seq.push_back(next);
    const std::vector<int32_t> one{next};
    out = fwd.run_cached(one, cache);
    const ForwardResult full = fwd.run(seq);
    SCOPED_TRACE(fmt::format("step {}", step));
    EXPECT_LE(relative_error(out.logits.span(), full.logits.span()), 1e-4);
    EXPECT_EQ(greedy_token(out.logits.span()), greedy_token(full.logits.span()));
    ASSERT_EQ(cache.next_position(), static_cast<int64_t>(seq.size()));
  }

  // greedy_decode gives the same tokens as the loop above.
  KvCache again(model.config);
  ForwardRequest req;
  req.cache = &again;
  const ForwardResult first = fwd.run(std::span(seq).first(static_cast<size_t>(prompt_len)), req);
  DecodeOptions opts;
  opts.max_new_tokens = steps + 1;
  const Decoded d = greedy_decode(fwd, again, first.logits.span(), opts);
  ASSERT_EQ(d.tokens.size(), static_cast<size_t>(steps + 1));
  EXPECT_EQ(d.stop, "max-new-tokens");
  for (int64_t i = 0; i < steps; ++i) EXPECT_EQ(d.tokens[static_cast<size_t>(i)], seq[static_cast<size_t>(prompt_len + i)]);
}

INSTANTIATE_TEST_SUITE_P(Models, CachedDecode,
                         ::testing::Values("tiny_llama_gqa", "tiny_llama_tied", "tiny_qwen2_bias",
                                           "tiny_llama3_rope.gguf", "tiny_llama_quant.gguf", "default",
                                           // sliding windows of 8-12 keys under the 40-token prompt
                                           "tiny_mistral_swa", "tiny_qwen2_swa", "tiny_gemma3",
                                           "tiny_gemma3_6l.gguf"));

// A cache that drops, on every sliding layer, the entries no later query can see
// (trim_to_windows after each run) decodes as the full recomputation does, and holds at most
// `window` entries per KV head there.
TEST(KvCacheWindow, TrimmedCacheEqualsFullRecomputation) {
  for (const std::string name : {"tiny_gemma3", "tiny_mistral_swa"}) {
    SCOPED_TRACE(name);
    if (!fs::exists(model_path(name))) GTEST_SKIP() << model_path(name) << " absent";
    const Model& model = cached_model(name);
    const ModelConfig& c = model.config;
    Forward fwd(model, {.threads = 2});
    std::vector<int32_t> seq = random_tokens(30, c.vocab, 11);
    KvCache cache(c);
    ForwardResult out = fwd.run_cached(seq, cache);
    cache.trim_to_windows(c);
    for (int64_t step = 0; step < 8; ++step) {
      const int32_t next = greedy_token(out.logits.span());
      seq.push_back(next);
      const std::vector<int32_t> one{next};
      out = fwd.run_cached(one, cache);
      cache.trim_to_windows(c);
      const ForwardResult full = fwd.run(seq);
      EXPECT_LE(relative_error(out.logits.span(), full.logits.span()), 1e-4) << "step " << step;
      for (int64_t l = 0; l < c.n_layer; ++l) {
        const int64_t held = cache.size(l, 0), n = static_cast<int64_t>(seq.size());
        EXPECT_EQ(held, c.window_of(l) > 0 ? std::min(n, c.window_of(l) - 1) : n) << "layer " << l;
      }
    }
  }
}

// Physically evicting entries from the cache and then feeding the question equals one pass
// over the whole prompt with those keys masked (-inf) for the question's rows: per layer and
// KV head a different set, as AdaKV makes them.
TEST(KvCacheEviction, EqualsLogitMask) {
  const Model& model = cached_model("tiny_llama_gqa");
  const ModelConfig& cf = model.config;
  Forward fwd(model, {.threads = 2});
  const int64_t c = 30, n = 38;
  const std::vector<int32_t> tokens = random_tokens(n, cf.vocab, 11);
  std::map<int64_t, std::vector<AttentionMaskSpan>> mask;
  KvCache cache(cf);
  ForwardRequest pre;
  pre.cache = &cache;
  fwd.run(std::span(tokens).first(static_cast<size_t>(c)), pre);
  std::mt19937_64 rng(3);
  for (int64_t l = 0; l < cf.n_layer; ++l)
    for (int64_t g = 0; g < cf.n_kv_head; ++g) {
      std::vector<int64_t> evicted;
      for (int64_t i = 0; i < c; ++i)
        if (rng() % 3 == 0) evicted.push_back(i);  // about a third, different per head
      cache.evict(l, g, evicted);
      EXPECT_EQ(cache.size(l, g), c - static_cast<int64_t>(evicted.size()));
      mask[l].push_back({.kv_head = g, .q_begin = c, .q_end = n, .keys = evicted});
    }
  CachedRequest q_req;
  q_req.logit_rows.resize(static_cast<size_t>(n - c));
  std::iota(q_req.logit_rows.begin(), q_req.logit_rows.end(), 0);
  const ForwardResult cached = fwd.run_cached(std::span(tokens).subspan(static_cast<size_t>(c)), cache, q_req);
  ForwardRequest masked;
  masked.mask = mask;
  for (int64_t i = c; i < n; ++i) masked.logit_rows.push_back(i);
  const ForwardResult reference = fwd.run(tokens, masked);
  EXPECT_LE(relative_error(cached.logits.span(), reference.logits.span()), 1e-4);
  // And it differs from the unmasked pass (the eviction mattered).
  ForwardRequest plain;
  plain.logit_rows = masked.logit_rows;
  EXPECT_GT(relative_error(fwd.run(tokens, plain).logits.span(), reference.logits.span()), 1e-3);
}

// Teacher forcing then truncating back: the cache after truncate(n) decodes as if the forced
// tokens had never been fed.
TEST(KvCacheEviction, TruncateUndoesFedTokens) {
  const Model& model = cached_model("tiny_llama_gqa");
  Forward fwd(model, {.threads = 1});
  const std::vector<int32_t> prompt = random_tokens(20, model.config.vocab, 5);
  KvCache cache(model.config);
  const ForwardResult first = fwd.run_cached(prompt, cache);
  cache.evict(1, 0, std::vector<int64_t>{3, 4, 5});
  const std::vector<int32_t> forced = random_tokens(6, model.config.vocab, 6);
  fwd.run_cached(forced, cache);
  EXPECT_EQ(cache.next_position(), 26);
  cache.truncate(20);
  EXPECT_EQ(cache.next_position(), 20);
  EXPECT_EQ(cache.size(1, 0), 17);
  EXPECT_EQ(cache.size(0, 0), 20);
  const std::vector<int32_t> one{greedy_token(first.logits.span())};
  const ForwardResult after = fwd.run_cached(one, cache);
  KvCache fresh(model.config);
  fwd.run_cached(prompt, fresh);
  fresh.evict(1, 0, std::vector<int64_t>{3, 4, 5});
  EXPECT_EQ(fwd.run_cached(one, fresh).logits.span()[0], after.logits.span()[0]);
}

TEST(KvCache, RefusesWhatItDoesNotHold) {
  KvCache cache(2, 2, 4);
  Tensor k({2, 3, 4}), v({2, 3, 4});
  for (int64_t l = 0; l < 2; ++l) cache.append(l, k, v, 0);
  cache.advance(3);
  EXPECT_EQ(cache.entries(), 12);
  EXPECT_THROW(cache.append(0, k, v, 1), InputError);  // not at next_position
  EXPECT_THROW(cache.keep(0, 0, std::vector<int64_t>{0, 7}), InputError);  // 7 not held
  EXPECT_THROW(cache.keep(0, 0, std::vector<int64_t>{2, 1}), InputError);  // not increasing
  EXPECT_THROW(cache.evict(0, 2, std::vector<int64_t>{0}), InputError);     // no KV head 2
  EXPECT_THROW(cache.truncate(4), InputError);
  cache.keep(0, 1, std::vector<int64_t>{0, 2});
  EXPECT_EQ(std::vector<int64_t>(cache.positions(0, 1).begin(), cache.positions(0, 1).end()),
            (std::vector<int64_t>{0, 2}));
  EXPECT_THROW(cache.keep(0, 1, std::vector<int64_t>{1}), InputError);  // already evicted
}

// A run that fails part-way leaves the cache as it was (an out-of-range token in the new
// rows fails before any layer; a bad logit row likewise).
TEST(KvCache, FailedRunLeavesCacheUnchanged) {
  const Model& model = cached_model("tiny_llama_gqa");
  Forward fwd(model, {.threads = 1});
  KvCache cache(model.config);
  fwd.run_cached(random_tokens(8, model.config.vocab, 1), cache);
  const std::vector<int32_t> bad{1, static_cast<int32_t>(model.config.vocab)};
  EXPECT_THROW(fwd.run_cached(bad, cache), InputError);
  CachedRequest req;
  req.before_attention = [](int64_t layer, const Tensor&, const Tensor&, const Tensor&, KvCache&) {
    if (layer == 1) throw InputError("stop");
  };
  EXPECT_THROW(fwd.run_cached(random_tokens(3, model.config.vocab, 2), cache, req), InputError);
  EXPECT_EQ(cache.next_position(), 8);
  for (int64_t l = 0; l < model.config.n_layer; ++l) EXPECT_EQ(cache.size(l, 0), 8);
  KvCache other(1, 1, 2);
  EXPECT_THROW(fwd.run_cached(random_tokens(3, model.config.vocab, 2), other), InputError);
}

}  // namespace
}  // namespace ckv

#pragma once
// Greedy decoding over a KV cache: each step feeds the previous token as one new row
// (Forward::run_cached) and takes the argmax of its logits (the lower id on a tie).
//
//   KvCache cache(model.config);
//   ForwardResult first = fwd.run_cached(prompt, cache);
//   Decoded out = greedy_decode(fwd, cache, first.logits.span(), {.max_new_tokens = 32,
//                               .eos_id = tok.eos_id(), .stop_strings = {"\n"}, .tokenizer = &tok});
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/forward.h"
#include "model/kv_cache.h"

namespace ckv {

class Tokenizer;

struct DecodeOptions {
  int64_t max_new_tokens = 32;
  int32_t eos_id = -1;                    // stops before emitting it; -1: none
  std::vector<std::string> stop_strings;  // stops once the decoded text contains one (needs tokenizer)
  const Tokenizer* tokenizer = nullptr;   // for the text and stop strings; may be null
  std::function<void()> on_token;         // called after each generated token (progress)
};

struct Decoded {
  std::vector<int32_t> tokens;  // generated ids (EOS not included)
  std::string text;             // decoded tokens, cut before the first stop string
  std::string stop;             // "eos", "stop-string", "max-new-tokens" or "context"
};

// The argmax of `logits` (the lower id on a tie).
int32_t greedy_token(std::span<const float> logits);

// Decodes after the tokens already in `cache`, starting from `logits` ([vocab], the last
// fed row's). Stops at EOS, a stop string, max_new_tokens, or the model's context length.
Decoded greedy_decode(Forward& forward, KvCache& cache, std::span<const float> logits, const DecodeOptions& options);

}  // namespace ckv

#include "model/decode.h"

#include <algorithm>

#include "model/tokenizer.h"

namespace ckv {

int32_t greedy_token(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

namespace {

// The earliest occurrence of any stop string in text, or npos.
size_t first_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t at = std::string::npos;
  for (const std::string& s : stops)
    if (!s.empty()) at = std::min(at, text.find(s));
  return at;
}

}  // namespace

Decoded greedy_decode(Forward& forward, KvCache& cache, std::span<const float> logits, const DecodeOptions& options) {
  Decoded out;
  const int64_t context = forward.config().context_length;
  const bool stop_strings = options.tokenizer != nullptr && !options.stop_strings.empty();
  std::vector<float> row(logits.begin(), logits.end());
  out.stop = "max-new-tokens";
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    const int32_t next = greedy_token(row);
    if (next == options.eos_id) {
      out.stop = "eos";
      break;
    }
    out.tokens.push_back(next);
    if (options.on_token) options.on_token();
    if (stop_strings && first_stop(options.tokenizer->decode(out.tokens), options.stop_strings) != std::string::npos) {
      out.stop = "stop-string";
      break;
    }
    if (step + 1 == options.max_new_tokens) break;
    if (context > 0 && cache.next_position() + 1 > context) {
      out.stop = "context";
      break;
    }
    const std::vector<int32_t> one{next};
    const ForwardResult res = forward.run_cached(one, cache);
    row.assign(res.logits.span().begin(), res.logits.span().end());
  }
  if (options.tokenizer != nullptr) {
    out.text = options.tokenizer->decode(out.tokens);
    if (const size_t at = first_stop(out.text, options.stop_strings); at != std::string::npos) out.text.resize(at);
  }
  return out;
}

}  // namespace ckv

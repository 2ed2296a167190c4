// Prefill timing used by docs/PERF.md (see time_prefill in forward.h).
#include <chrono>
#include <limits>

#include "core/error.h"
#include "model/forward.h"

namespace ckv {

namespace {
// Copies what it is given, as a dump would before writing it out.
class CopyingRecorder : public Recorder {
 public:
  void on_qkv(int64_t, const Tensor& q, const Tensor& k, const Tensor& v) override {
    q_ = q;
    k_ = k;
    v_ = v;
  }
  void on_attention(int64_t, std::span<const int64_t>, const Tensor& probs) override {
    probs_ = probs;
  }
  void on_residual(int64_t, const Tensor& resid) override { resid_ = resid; }

 private:
  Tensor q_, k_, v_, probs_, resid_;
};
}  // namespace

PrefillTiming time_prefill(const ModelConfig& config, const ModelWeights& weights, int64_t n_tokens,
                           ForwardOptions options, bool record, int repeats) {
  if (n_tokens <= 0 || repeats <= 0)
    fail<InputError>("time_prefill: {} tokens, {} repeats must be positive", n_tokens, repeats);
  Forward forward(config, weights, options);
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i)  // deterministic ids spread over the vocabulary
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % config.vocab);
  CopyingRecorder recorder;
  ForwardRequest request;
  if (record) {
    request.record.qkv = true;
    request.record.attn_rows = {n_tokens - 1};
    request.record.residual = true;
    request.recorder = &recorder;
  }
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    forward.run(tokens, request);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count());
  }
  return {n_tokens, forward.threads(), best, static_cast<double>(n_tokens) / best};
}

}  // namespace ckv

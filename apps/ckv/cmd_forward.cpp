// ckv forward: one forward pass over a prompt; prints the greedy continuation (decoded over
// the KV cache the prefill fills) and per-layer statistics of the last prompt position. Also
// the timing entry point of bench/bench_prefill.py and bench/bench_decode.py (--repeats,
// --timing-json, --record-all, --ignore-eos).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common.h"
#include "flag_rules.h"
#include "core/error.h"
#include "model/decode.h"
#include "model/forward.h"
#include "model/model.h"
#include "prompt_input.h"
#include "record_job.h"

namespace ckv::app {
namespace {

constexpr const char* kForwardPrompt = "What is the capital of France? Answer in one sentence.";

struct ForwardCmdOptions {
  PromptOptions input;
  int generate = 8;       // greedy tokens to generate after the prompt (--max-new-tokens)
  std::vector<std::string> stop;  // stop strings
  bool ignore_eos = false;
  int top = 5;            // candidates shown for the first next token
  int repeats = 1;        // prefill repetitions (timing)
  bool timing = false;      // --timing-json given
  std::string timing_json;  // its file; empty or "-": stdout
  bool record_all = false;
};

// Per-layer statistics of the last prompt position, from the recorded residual stream and
// attention row.
struct LayerStats {
  double resid_rms = 0;      // root mean square of the residual stream after the layer
  double attn_entropy = 0;   // mean over heads of the attention row's entropy (nats)
  double sink_mass = 0;      // mean over heads of the attention on position 0
  double max_weight = 0;     // largest single attention weight over heads and keys
};

class StatsRecorder : public Recorder {
 public:
  explicit StatsRecorder(int64_t n_layer) : stats(static_cast<size_t>(n_layer)) {}
  void on_attention(int64_t layer, std::span<const int64_t> /*rows*/, const Tensor& probs) override {
    const int64_t n_head = probs.dim(0), seq = probs.dim(2);  // probs: [n_head, 1, seq]
    LayerStats& s = stats[static_cast<size_t>(layer)];
    for (int64_t h = 0; h < n_head; ++h) {
      const float* row = probs.data() + h * seq;
      double entropy = 0;
      for (int64_t j = 0; j < seq; ++j) {
        if (row[j] > 0) entropy -= row[j] * std::log(static_cast<double>(row[j]));
        s.max_weight = std::max(s.max_weight, static_cast<double>(row[j]));
      }
      s.attn_entropy += entropy / static_cast<double>(n_head);
      s.sink_mass += row[0] / static_cast<double>(n_head);
    }
  }
  void on_residual(int64_t layer, const Tensor& resid) override {
    const int64_t seq = resid.dim(0), d_model = resid.dim(1);  // resid: [seq, d_model]
    const float* last = resid.data() + (seq - 1) * d_model;
    double sum_sq = 0;
    for (int64_t i = 0; i < d_model; ++i) sum_sq += static_cast<double>(last[i]) * last[i];
    stats[static_cast<size_t>(layer)].resid_rms = std::sqrt(sum_sq / static_cast<double>(d_model));
  }
  std::vector<LayerStats> stats;  // [n_layer]
};

// Keeps a copy of everything recorded, as `dump` does before writing (timing only).
class CopyingRecorder : public Recorder {
 public:
  void on_qkv(int64_t, const Tensor& q, const Tensor& k, const Tensor& v) override {
    q_ = q, k_ = k, v_ = v;
  }
  void on_attention(int64_t, std::span<const int64_t>, const Tensor& probs) override { p_ = probs; }
  void on_residual(int64_t, const Tensor& resid) override { r_ = resid; }

 private:
  Tensor q_, k_, v_, p_, r_;
};

std::string show_token(const Tokenizer* tok, int32_t id) {
  return tok ? fmt::format("{:?}", tok->token_text(id)) : fmt::format("#{}", id);
}

void run_timing(const ForwardCmdOptions& o, Forward& forward, const std::vector<int32_t>& ids) {
  CopyingRecorder copier;
  ForwardRequest request;
  if (o.record_all) {
    request.record.qkv = true;
    request.record.attn_rows = {static_cast<int64_t>(ids.size()) - 1};
    request.record.residual = true;
    request.recorder = &copier;
  }
  // Wall time, and the CPU time of all threads (comparable across engines on a busy machine).
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  std::vector<double> seconds, cpu_seconds;
  KvCache cache(forward.config());
  ForwardResult last;
  for (int i = 0; i < o.repeats; ++i) {
    cache.truncate(0);
    request.cache = o.generate > 0 ? &cache : nullptr;  // the decode below continues the last prefill
    const double cpu_start = cpu_now();
    auto start = std::chrono::steady_clock::now();
    last = forward.run(ids, request);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    cpu_seconds.push_back(cpu_now() - cpu_start);
  }
  nlohmann::json j = {{"tokens", ids.size()},          {"threads", forward.threads()},
                      {"compute_dtype", compute_dtype_name(forward.compute())},
                      {"gemm_engine", gemm_engine_name()},
                      {"record_all", o.record_all},    {"prefill_seconds", seconds},
                      {"prefill_cpu_seconds", cpu_seconds}};
  if (forward.compute() == ComputeDType::BF16) j["bf16_kernel"] = bf16_kernel_name();
  if (o.generate > 0) {
    // Decoding over the cache: the first token comes from the prefill's last row; one
    // untimed step (a warm-up, as bench/bench_decode.py takes for every engine), then
    // generate - 1 timed steps, each feeding one token and reading its logits.
    DecodeOptions decode;
    decode.max_new_tokens = 1;  // EOS ignored: every run decodes the same count
    const Decoded warm = greedy_decode(forward, cache, last.logits.span(), decode);
    const std::vector<int32_t> next{warm.tokens.back()};
    const ForwardResult step = forward.run_cached(next, cache);
    decode.max_new_tokens = o.generate;
    const double cpu_start = cpu_now();
    auto start = std::chrono::steady_clock::now();
    const Decoded d = greedy_decode(forward, cache, step.logits.span(), decode);
    j["decode_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    j["decode_cpu_seconds"] = cpu_now() - cpu_start;
    j["decode_tokens"] = d.tokens.size() - 1;  // model steps timed: the last token is not fed
    j["kv_cache_bytes"] = cache.bytes();
  }
  if (o.timing_json.empty() || o.timing_json == "-") {
    fmt::print("{}\n", j.dump());
    return;
  }
  std::ofstream f(o.timing_json, std::ios::binary | std::ios::trunc);
  f << j.dump() << '\n';
  if (!f.flush()) fail<IoError>("--timing-json {}: cannot write", o.timing_json);
}

void run_forward(const ForwardCmdOptions& o, const GlobalOptions& g) {
  LoadedModel loaded(g);
  const Model& model = loaded.model();
  std::vector<int32_t> ids = prompt_tokens(o.input, model, kForwardPrompt);
  Forward& forward = loaded.forward();
  if (o.timing) return run_timing(o, forward, ids);

  const Tokenizer* tok = model.tokenizer.get();
  const int64_t seq = static_cast<int64_t>(ids.size());
  StatsRecorder stats(model.config.n_layer);
  ForwardRequest request;
  request.record.attn_rows = {seq - 1};
  request.record.residual = true;
  request.recorder = &stats;
  KvCache cache(model.config);
  request.cache = &cache;

  auto start = std::chrono::steady_clock::now();
  ForwardResult first = forward.run(ids, request);
  double prefill = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  fmt::print("prompt        {} tokens{}; prefill {:.3f} s ({:.0f} tokens/s, {} threads)\n", seq,
             o.input.chat ? " (chat template)" : "", prefill, static_cast<double>(seq) / prefill,
             forward.threads());

  // The first prediction's candidates, as probabilities.
  std::span<const float> logits = first.logits.span();  // [vocab]
  float max_logit = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l - max_logit));
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const int top = std::clamp<int>(o.top, 0, static_cast<int>(order.size()));
  std::partial_sort(order.begin(), order.begin() + top, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  fmt::print("next token    ");
  for (int i = 0; i < top; ++i) {
    double p = std::exp(static_cast<double>(logits[order[i]] - max_logit)) / z;
    fmt::print("{}{} {:.3f}", i ? ", " : "", show_token(tok, order[i]), p);
  }
  fmt::print("\n");

  // Greedy continuation over the KV cache the prefill filled: one new row per step.
  const auto decode_start = std::chrono::steady_clock::now();
  Progress progress("generate", o.generate, "tokens", g.progress_mode());
  const Decoded decoded = greedy_decode(forward, cache, logits,
                                       {.max_new_tokens = o.generate,
                                        .eos_id = tok && !o.ignore_eos ? tok->eos_id() : -1,
                                        .stop_strings = o.stop,
                                        .tokenizer = tok,
                                        .on_token = [&] { progress.advance(); }});
  progress.finish();
  const double decode = std::chrono::duration<double>(std::chrono::steady_clock::now() - decode_start).count();
  const std::vector<int32_t>& generated = decoded.tokens;
  if (o.generate > 0) {
    std::vector<std::string> shown;
    for (int32_t id : generated) shown.push_back(show_token(tok, id));
    fmt::print("greedy        {}\n", fmt::join(shown, " "));
    if (tok) fmt::print("continuation  {:?}\n", decoded.text);
    fmt::print("stopped       {} after {} tokens; decode {:.3f} s ({:.1f} tokens/s, KV cache {:.1f} MiB)\n",
               decoded.stop, generated.size(), decode,
               generated.size() > 1 ? static_cast<double>(generated.size() - 1) / decode : 0.0,
               static_cast<double>(cache.bytes()) / (1024.0 * 1024.0));
  }

  fmt::print("\nper layer, last prompt position (attention averaged over {} heads):\n",
             model.config.n_head);
  fmt::print("{:>5}  {:>10}  {:>12}  {:>9}  {:>10}\n", "layer", "resid_rms", "attn_entropy",
             "sink_mass", "max_weight");
  for (size_t l = 0; l < stats.stats.size(); ++l) {
    const LayerStats& s = stats.stats[l];
    fmt::print("{:>5}  {:>10.4f}  {:>12.4f}  {:>9.4f}  {:>10.4f}\n", l, s.resid_rms, s.attn_entropy,
               s.sink_mass, s.max_weight);
  }
}

}  // namespace

void register_forward(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<ForwardCmdOptions>();
  CLI::App* cmd = add_forward_subcommand(
      app, g, "forward",
      "Run the model over a prompt: greedy next tokens and per-layer statistics");
  add_prompt_options(*cmd, o->input);
  cmd->add_option("-n,--generate,--max-new-tokens", o->generate,
                  "Greedy tokens to generate over the KV cache, a count >= 0 (stops earlier at EOS or a --stop string)")
      ->capture_default_str()->check(at_least(0));
  cmd->add_option("--stop", o->stop, "Stop generating once the text contains this string (repeatable)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Generate past the end-of-sequence token (benchmarks)");
  cmd->add_option("--top", o->top, "Candidates shown for the next token, a count >= 0")->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "Prefill repetitions (with --timing-json), a count >= 1")
      ->check(at_least(1));
  CLI::Option* timing = cmd->add_option("--timing-json", o->timing_json,
                                        "Instead of the report, only time the prefill --repeats times, then --generate "
                                        "tokens of decoding (EOS ignored), and write the timings as JSON to this file "
                                        "(as `ckv dump --timing-json FILE`); without a file, or with -, to stdout "
                                        "(for benchmarks)")
                              ->expected(0, 1);
  cmd->add_flag("--record-all", o->record_all,
                "With --timing-json: record Q/K/V, the last attention row and the residual of "
                "every layer, as a dump does");
  cmd->callback([o, &g, timing] {
    o->timing = timing->count() > 0;
    run_forward(*o, g);
  });
}

}  // namespace ckv::app

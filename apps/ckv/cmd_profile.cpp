// ckv profile: a HeadKV head-importance profile (lib/analysis/headkv.h) from `ckv niah`
// records: the retrieval score of every query head (Wu et al. 2024), teacher-forced on each
// record's answer, averaged over the records (docs/BOUND.md "HeadKV").
#include <cctype>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/headkv.h"
#include "analysis/mask_plan.h"
#include "common.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/progress.h"
#include "data/records.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "record_job.h"

namespace ckv::app {
namespace {

struct ProfileOptions {
  std::string input;
  std::string span = "needle";
  std::string out = "profile.json";
  bool force = false, no_answer_space = false;
};

// Adds every layer's retrieval scores of one record.
class RetrievalRecorder : public Recorder {
 public:
  RetrievalRecorder(std::vector<std::vector<double>>& scores, std::span<const int32_t> tokens,
                    std::span<const char> in_needle, std::span<const int32_t> produced)
      : scores_(scores), tokens_(tokens), in_needle_(in_needle), produced_(produced) {}
  void on_attention(int64_t layer, std::span<const int64_t> /*rows*/, const Tensor& probs) override {
    add_retrieval_scores(probs, tokens_, in_needle_, produced_, scores_[static_cast<size_t>(layer)]);
  }

 private:
  std::vector<std::vector<double>>& scores_;
  std::span<const int32_t> tokens_;
  std::span<const char> in_needle_;
  std::span<const int32_t> produced_;
};

void run_profile(const ProfileOptions& o, const GlobalOptions& g) {
  const AtomicOutputOptions output_options{.force = o.force, .resumable = false};
  AtomicOutput::check(o.out, output_options);
  LoadedModel loaded(g);
  const Model& model = loaded.model();
  if (!model.tokenizer) fail<InputError>("{}: the model has no tokenizer (profile encodes the answers)", g.model_path());
  const ModelConfig& cf = model.config;
  Forward& forward = loaded.forward();
  std::vector<std::vector<double>> sums(static_cast<size_t>(cf.n_layer),
                                        std::vector<double>(static_cast<size_t>(cf.n_head), 0.0));
  RecordReader reader(o.input);
  int64_t count = 0;
  Progress progress("profile", 0, "records", g.progress_mode());
  while (const std::optional<InputRecord> rec = reader.next()) {
    const std::string who = fmt::format("{}: record \"{}\"", o.input, rec->id);
    if (!rec->answer || rec->answer->empty()) fail<InputError>("{}: no \"answer\" to teacher-force", who);
    const RecordPrompt prompt = tokenize_record(*rec, *model.tokenizer, false);
    const auto n = static_cast<int64_t>(prompt.tokens.size());
    std::vector<char> in_needle(static_cast<size_t>(n), 0);
    for (const SpanRange& s : named_spans(prompt.token_spans, o.span, who))
      for (int64_t i = std::max<int64_t>(0, s.start); i < std::min(n, s.end); ++i) in_needle[static_cast<size_t>(i)] = 1;
    const bool space = !o.no_answer_space && !std::isspace(static_cast<unsigned char>(rec->answer->front()));
    const std::vector<int32_t> answer = model.tokenizer->encode((space ? " " : "") + *rec->answer, false);
    if (answer.empty()) fail<InputError>("{}: the answer encodes to no token", who);
    std::vector<int32_t> tokens = prompt.tokens;
    tokens.insert(tokens.end(), answer.begin(), answer.end());
    if (cf.context_length > 0 && static_cast<int64_t>(tokens.size()) > cf.context_length)
      fail<InputError>("{}: {} tokens with the answer, longer than the model's context of {}", who, tokens.size(),
                       cf.context_length);
    // Row n - 1 + k produces answer token k (teacher forcing: one pass, no cache).
    ForwardRequest req;
    for (int64_t k = 0; k < static_cast<int64_t>(answer.size()); ++k) req.record.attn_rows.push_back(n - 1 + k);
    RetrievalRecorder recorder(sums, tokens, in_needle, answer);
    req.recorder = &recorder;
    forward.run(tokens, req);
    ++count;
    progress.advance();
  }
  progress.finish();
  if (count == 0) fail<InputError>("{}: no record", o.input);
  nlohmann::json scores = nlohmann::json::array();
  for (const auto& layer : sums) {
    nlohmann::json row = nlohmann::json::array();
    for (double x : layer) row.push_back(x / static_cast<double>(count));
    scores.push_back(std::move(row));
  }
  const nlohmann::json j = {{"format", "ckv.headkv_profile"},
                            {"format_version", 1},
                            {"score", "retrieval"},
                            {"span", o.span},
                            {"model", std::filesystem::path(g.model_path()).filename().string()},
                            {"compute_dtype", compute_dtype_name(g.compute)},
                            {"input", std::filesystem::path(o.input).filename().string()},
                            {"records", count},
                            {"n_layer", cf.n_layer},
                            {"n_head", cf.n_head},
                            {"scores", scores}};
  AtomicOutput out(o.out, output_options);
  {
    std::ofstream f(out.partial_path());
    f << j.dump() << "\n";
    if (!f) fail<IoError>("{}: write failed", out.partial_path().string());
  }
  out.commit();
}

}  // namespace

void register_profile(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<ProfileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "HeadKV head profile: each head's retrieval score on `ckv niah` records (JSON for --headkv-profile)");
  add_model_options(*cmd, g);
  add_compute_option(*cmd, g);
  cmd->add_option("-i,--input", o->input, "JSONL records with \"answer\" and the needle span (`ckv niah`)")->required();
  cmd->add_option("--span", o->span, "The record span that holds the answer (the needle)")->capture_default_str();
  cmd->add_flag("--no-answer-space", o->no_answer_space, "Encode the answer without a leading space");
  cmd->add_option("-o,--out", o->out, "Output profile (JSON)")->capture_default_str();
  cmd->add_flag("--force", o->force, "Replace an existing output");
  cmd->callback([o, &g] { run_profile(*o, g); });
}

}  // namespace ckv::app

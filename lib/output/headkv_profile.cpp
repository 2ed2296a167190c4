#include "output/headkv_profile.h"

#include <algorithm>
#include <cctype>
#include <span>
#include <utility>

#include "analysis/headkv.h"
#include "analysis/mask_plan.h"
#include "core/error.h"
#include "model/tokenizer.h"

namespace ckv {
namespace {

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

}  // namespace

RetrievalProfile::RetrievalProfile(const Model& model, Forward& forward, std::string span, bool answer_space)
    : model_(model), forward_(forward), span_(std::move(span)), answer_space_(answer_space),
      sums_(static_cast<size_t>(model.config.n_layer),
            std::vector<double>(static_cast<size_t>(model.config.n_head), 0.0)) {}

void RetrievalProfile::add(const InputRecord& rec, const std::string& who) {
  const ModelConfig& cf = model_.config;
  if (!rec.answer || rec.answer->empty()) fail<InputError>("{}: no \"answer\" to teacher-force", who);
  const RecordPrompt prompt = tokenize_record(rec, *model_.tokenizer, false);
  const auto n = static_cast<int64_t>(prompt.tokens.size());
  std::vector<char> in_needle(static_cast<size_t>(n), 0);
  for (const SpanRange& s : named_spans(prompt.token_spans, span_, who))
    for (int64_t i = std::max<int64_t>(0, s.start); i < std::min(n, s.end); ++i) in_needle[static_cast<size_t>(i)] = 1;
  const bool space = answer_space_ && !std::isspace(static_cast<unsigned char>(rec.answer->front()));
  const std::vector<int32_t> answer = model_.tokenizer->encode((space ? " " : "") + *rec.answer, false);
  if (answer.empty()) fail<InputError>("{}: the answer encodes to no token", who);
  std::vector<int32_t> tokens = prompt.tokens;
  tokens.insert(tokens.end(), answer.begin(), answer.end());
  if (cf.context_length > 0 && static_cast<int64_t>(tokens.size()) > cf.context_length)
    fail<InputError>("{}: {} tokens with the answer, longer than the model's context of {}", who, tokens.size(),
                     cf.context_length);
  // Row n - 1 + k produces answer token k (teacher forcing: one pass, no cache).
  ForwardRequest req;
  for (int64_t k = 0; k < static_cast<int64_t>(answer.size()); ++k) req.record.attn_rows.push_back(n - 1 + k);
  RetrievalRecorder recorder(sums_, tokens, in_needle, answer);
  req.recorder = &recorder;
  forward_.run(tokens, req);
  ++records_;
}

nlohmann::json RetrievalProfile::to_json(const std::string& model_name, const std::string& compute_dtype,
                                         const std::string& input_name) const {
  nlohmann::json scores = nlohmann::json::array();
  for (const auto& layer : sums_) {
    nlohmann::json row = nlohmann::json::array();
    for (double x : layer) row.push_back(x / static_cast<double>(records_));
    scores.push_back(std::move(row));
  }
  return {{"format", "ckv.headkv_profile"},
          {"format_version", 1},
          {"score", "retrieval"},
          {"span", span_},
          {"model", model_name},
          {"compute_dtype", compute_dtype},
          {"input", input_name},
          {"records", records_},
          {"n_layer", model_.config.n_layer},
          {"n_head", model_.config.n_head},
          {"scores", scores}};
}

}  // namespace ckv

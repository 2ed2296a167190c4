#pragma once
// The HeadKV head profile `ckv profile` writes for --headkv-profile (format
// "ckv.headkv_profile" version 1, read by read_headkv_profile in analysis/headkv.h;
// docs/BOUND.md "HeadKV"): the retrieval score of every query head (Wu et al. 2024),
// teacher-forced on each record's answer, averaged over the records.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/records.h"
#include "model/forward.h"
#include "model/model.h"

namespace ckv {

class RetrievalProfile {
 public:
  // `span`: the record span that holds the answer (the needle); `answer_space`: encode the
  // answer after a space unless it starts with one. The model must have a tokenizer.
  RetrievalProfile(const Model& model, Forward& forward, std::string span, bool answer_space);

  // Adds one record's scores: its answer fed after its prompt in one pass, each answer row's
  // attention scored against the needle. Throws InputError naming `who` for a record with
  // no answer or needle span, an answer of no token, or one longer than the model's context.
  void add(const InputRecord& record, const std::string& who);
  int64_t records() const { return records_; }

  // The profile: the mean scores [n_layer][n_head] over the records added, and the names
  // of the model, the compute dtype and the input it was made with.
  nlohmann::json to_json(const std::string& model_name, const std::string& compute_dtype,
                         const std::string& input_name) const;

 private:
  const Model& model_;
  Forward& forward_;
  std::string span_;
  bool answer_space_;
  std::vector<std::vector<double>> sums_;  // [n_layer][n_head]
  int64_t records_ = 0;
};

}  // namespace ckv

#pragma once
// The record-job driver: what the batch subcommands (`ckv bound`, `check`, `mask`, `eval`,
// `dump`) share, written once. A job
//   1. refuses outputs it may not write before any work (AtomicOutput::check);
//   2. loads the model, hashes it, builds the forward pass and fills the provenance (model,
//      input file and hash, shard and input size);
//   3. checks the file a --resume continues, takes its outputs, and lets the subcommand open
//      its file (whose complete records are passed over);
//   4. hands every record of its shard, the JSONL batch's or the one prompt's, to the
//      subcommand's analysis, counting what was written and passed over;
//   5. on failure removes a file it created that holds no record (nothing to resume); on
//      success the subcommand closes its file and writes its summaries into the other
//      outputs' partial paths, and commit() commits them all, in order.
// The subcommand keeps what is particular to it: its flags, its record's analysis and its
// summary.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common.h"
#include "core/atomic_file.h"
#include "core/shard.h"
#include "data/records.h"
#include "model/forward.h"
#include "model/model.h"
#include "output/batch_output.h"
#include "output/provenance.h"
#include "prompt_input.h"

namespace ckv::app {

// --shard, --force, --resume.
struct JobFlags {
  std::string shard;  // --shard i/N; empty: Slurm array variables, else 0/1
  bool force = false, resume = false;
};
void add_job_flags(CLI::App& cmd, JobFlags& f);

// Where the records come from: a JSONL batch (--input) or one prompt (the prompt flags,
// with the question and answer some subcommands add to it).
struct JobInput {
  PromptOptions prompt;
  std::string jsonl;             // --input
  std::string question, answer;  // --question, --answer (hashed with the prompt)
};
// -i/--input, excluding the prompt flags (add_prompt_options first); `help` says what a line holds.
CLI::Option* add_jsonl_option(CLI::App& cmd, JobInput& in, const std::string& help);

// One record as the analysis gets it.
struct JobRecord {
  std::string id;
  int64_t index = 0;
  const InputRecord* input = nullptr;  // the JSONL line; null for a prompt
  RecordPrompt prompt;                 // tokens, context end, token spans
  std::optional<std::string> answer;
};

// The model the flags name, loaded once: the one place every subcommand that runs a model
// (the record jobs, `ckv forward`, `ckv profile`) loads it, hashes it when its outputs name
// the hash, and builds its forward pass (--device, --threads, --compute-dtype).
class LoadedModel {
 public:
  // `hash`: also the model's sha256 (model_sha256), for outputs that name it.
  explicit LoadedModel(const GlobalOptions& g, bool hash = false);
  // A model read from elsewhere (a dump's, model_from_dump) with the hash its file names.
  LoadedModel(const GlobalOptions& g, Model model, std::string sha256)
      : g_(g), model_(std::move(model)), sha_(std::move(sha256)) {}
  LoadedModel(const LoadedModel&) = delete;  // the forward pass refers to the model
  LoadedModel& operator=(const LoadedModel&) = delete;

  Model& model() { return model_; }
  const Model& model() const { return model_; }
  // The forward pass, built on first use (a job that only reads a dump builds none).
  Forward& forward();
  const std::string& sha256() const { return sha_; }  // empty unless hashed

 private:
  const GlobalOptions& g_;
  Model model_;
  std::string sha_;
  std::unique_ptr<Forward> forward_;
};

class RecordJob {
 public:
  // Steps 1 and the shard: `outputs` are the paths the job writes, the HDF5 file first.
  RecordJob(const GlobalOptions& g, const JobFlags& flags, const JobInput& input, std::vector<std::filesystem::path> outputs);

  // Step 2. `run_model`: build the forward pass (a job that only reads a dump does not; its
  // provenance names the CPU). describe_input: the input's provenance, by default the JSONL
  // batch or the prompt (input_file(), input_sha256(), its record count).
  void load(bool run_model = true);
  // Step 2 for a job that reads only a dump: `model` is the one the dump carries (config and
  // W_O, model_from_dump) with the dump's model hash; no forward pass.
  void load_from_dump(Model model, const std::string& model_sha256);
  void describe_input(const std::string& file, const std::string& sha256, int64_t records);
  void describe_input();

  // Step 3: the --resume check (the file's schema, version, kind, if not empty, and settings;
  // model, input, command and shard from the provenance), then the outputs, the first
  // restarted when it holds no header.
  void open(const std::string& schema, int64_t version, const std::string& kind, const nlohmann::json& settings);
  // The path the subcommand writes output `i` to, until commit().
  const std::filesystem::path& partial(size_t i = 0) const { return outputs_.at(i).partial_path(); }
  bool continuing() const { return outputs_.front().continuing(); }

  // Step 4: for the records of the shard not in `done`, `each`; `prompt_record` makes the
  // record of a prompt (id "0"). Returns the number passed over as done. Step 5 on a throw
  // (guarded).
  int64_t for_each_record(const std::set<std::string>& done, const std::function<JobRecord()>& prompt_record,
                          const std::function<void(JobRecord&)>& each);
  // Runs `body`; when it throws, `release` (which must not throw; may be null) lets go of the
  // subcommand's file, a file this run created with no record written is removed (nothing
  // to resume), and the error goes on.
  template <class Body>
  auto guarded(Body&& body, const std::function<void()>& release = nullptr) {
    try {
      return body();
    } catch (...) {
      remove_if_empty(release);
      throw;
    }
  }
  // Counts a record written (what decides whether a failed run's file is kept).
  void written() { ++written_; }
  // Step 4's report, one style for every record job: a bar over the shard's records (the
  // count describe_input gave) when stderr is a terminal or with --progress, else `line` on
  // stderr for each record (what a batch log keeps); nothing with -q. `label` names the
  // subcommand on the bar; finish_progress() ends it.
  void start_progress(const std::string& label);
  // `results` (a subcommand's per-record console table, if it prints one) go to stdout, above
  // the bar; not with -q. Off a terminal they stand for `line`, as they open with the record.
  void record_done(const std::string& line, std::string_view results = {});
  // A note on the data (a line "ckv <sub>: note: ..." on stderr, above the bar; also with -q:
  // it says what the outputs lack).
  void note(std::string_view text);
  void finish_progress();
  int64_t written_count() const { return written_; }
  // Step 5 on success: commits every output.
  void commit();

  Model& model() { return loaded_->model(); }
  const Model& model() const { return loaded_->model(); }
  Forward& forward() { return loaded_->forward(); }
  Provenance& provenance() { return prov_; }
  const std::string& model_sha256() const { return loaded_->sha256(); }
  const Shard& shard() const { return shard_; }
  const JobInput& input() const { return input_; }

  // What identifies the input for --resume and `ckv merge`: the bytes of the JSONL batch,
  // the prompt file or the token file, or the prompt text; the question and answer, when
  // given, follow the text after a newline each. Empty for the built-in prompt.
  std::string input_sha256() const;
  // The JSONL batch, the prompt file or the token file ("" for a --prompt text).
  std::string input_file() const;

 private:
  void describe_model(const std::string& device);  // the provenance of the loaded model
  void remove_if_empty(const std::function<void()>& release);

  const GlobalOptions& g_;
  JobFlags flags_;
  const JobInput& input_;
  std::vector<std::filesystem::path> paths_;
  std::vector<AtomicOutput> outputs_;
  Shard shard_;
  std::optional<LoadedModel> loaded_;
  Provenance prov_;
  int64_t written_ = 0;
  int64_t shard_records_ = 0;  // the input's records in this shard (describe_input)
  std::unique_ptr<Progress> progress_;
};

}  // namespace ckv::app

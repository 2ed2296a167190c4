#include "record_job.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/input_file.h"
#include "core/sha256.h"

namespace ckv::app {

void add_job_flags(CLI::App& cmd, JobFlags& f) {
  cmd.add_option("--shard", f.shard,
                 "Only the records of --input with index % N == i, given as i/N (default: "
                 "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT when set)");
  auto* force = cmd.add_flag("--force", f.force, "Replace existing outputs");
  cmd.add_flag("--resume", f.resume, "Continue an interrupted output, skipping its complete records")->excludes(force);
}

CLI::Option* add_jsonl_option(CLI::App& cmd, JobInput& in, const std::string& help) {
  auto* jsonl = cmd.add_option("-i,--input", in.jsonl, help);
  for (const char* other : {"--prompt", "--prompt-file", "--tokens"}) jsonl->excludes(cmd.get_option(other));
  return jsonl;
}

LoadedModel::LoadedModel(const GlobalOptions& g, bool hash) : g_(g), model_(load_model(g.model_path())) {
  if (hash) sha_ = ckv::model_sha256(model_.source.path);
}

Forward& LoadedModel::forward() {
  if (!forward_) forward_ = std::make_unique<Forward>(model_, g_.forward_options());
  return *forward_;
}

RecordJob::RecordJob(const GlobalOptions& g, const JobFlags& flags, const JobInput& input,
                     std::vector<std::filesystem::path> outputs)
    : g_(g), flags_(flags), input_(input), paths_(std::move(outputs)), shard_(Shard::resolve(flags.shard)) {
  if (!shard_.is_whole() && input_.jsonl.empty())
    fail<UsageError>("--shard {}: sharding needs a JSONL batch (--input)", shard_.to_string());
  // Refuse existing outputs before the model load and hashing; the real checks follow.
  for (const auto& p : paths_) AtomicOutput::check(p, {.force = flags_.force, .resume = flags_.resume});
}

void RecordJob::load(bool run_model) {
  loaded_.emplace(g_, /*hash=*/true);
  // The forward pass is built before the provenance: its context is the device that runs it.
  describe_model(run_model ? forward().context().device_string() : std::string(device_name(Device::CPU)));
}

void RecordJob::load_from_dump(Model model, const std::string& model_sha256) {
  loaded_.emplace(g_, std::move(model), model_sha256);
  describe_model(std::string(device_name(Device::CPU)));
}

void RecordJob::describe_model(const std::string& device) {
  const Model& model = loaded_->model();
  prov_ = g_.provenance(device);
  prov_.set("model_path", model.source.path.string());
  prov_.set("model_sha256", loaded_->sha256());
  // A model's sliding-window layers are named in every output's provenance and said once
  // (docs/MODELS.md "Sliding windows").
  if (const std::string note = set_sliding_layers(prov_, model.config); !note.empty() && !g_.quiet)
    fmt::print(stderr, "ckv: note: {}\n", note);
}

void RecordJob::describe_input(const std::string& file, const std::string& sha256, int64_t records) {
  prov_.set("input_file", file);
  prov_.set("input_sha256", sha256);
  set_shard_provenance(prov_, shard_, records);
  shard_records_ = 0;
  for (int64_t i = 0; i < records; ++i) shard_records_ += shard_.contains(i) ? 1 : 0;
}

void RecordJob::start_progress(const std::string& label) {
  progress_ = std::make_unique<Progress>(label, shard_records_, "records", g_.progress_mode());
}

void RecordJob::record_done(const std::string& line, std::string_view results) {
  const bool bar = progress_ && progress_->enabled();
  if (!results.empty() && !g_.quiet) {
    if (bar) {
      progress_->print_above(stdout, results);
    } else {
      fmt::print("{}", results);
      std::fflush(stdout);
    }
  }
  if (bar) progress_->advance();
  else if (!g_.quiet && results.empty()) fmt::print(stderr, "{}\n", line);  // results name the record already
}

void RecordJob::note(std::string_view text) {
  const std::string line = fmt::format("{}\n", text);
  if (progress_ && progress_->enabled()) progress_->print_above(stderr, line);
  else fmt::print(stderr, "{}", line);
}

void RecordJob::finish_progress() {
  if (progress_) progress_->finish();
}

void RecordJob::describe_input() {
  describe_input(input_file(), input_sha256(), input_.jsonl.empty() ? 1 : count_input_records(input_.jsonl));
}

std::string RecordJob::input_file() const {
  return !input_.jsonl.empty() ? input_.jsonl
         : !input_.prompt.prompt_file.empty() ? input_.prompt.prompt_file
                                              : input_.prompt.tokens_file;
}

std::string RecordJob::input_sha256() const {
  if (!input_.jsonl.empty()) return sha256_file(input_.jsonl);
  // A prompt or token file is read as the prompt is (one line for a FIFO or a directory);
  // the hash of its bytes is sha256_file's.
  const std::string file = input_file();
  const std::string text = file.empty()                       ? input_.prompt.prompt
                           : file == input_.prompt.tokens_file ? read_regular_file(file, "the token file (--tokens takes the path of a file of token ids)")
                                                               : read_text_file(file);
  if (input_.question.empty() && input_.answer.empty()) return text.empty() ? "" : sha256_hex(text);
  return sha256_hex(text + "\n" + input_.question + "\n" + input_.answer);
}

void RecordJob::open(const std::string& schema, int64_t version, const std::string& kind,
                     const nlohmann::json& settings) {
  if (flags_.resume) {
    auto value = [&](const char* key) { return prov_.find(key) ? prov_.find(key)->get<std::string>() : std::string(); };
    check_output_to_resume(paths_.front(), {.schema = schema, .schema_version = version, .kind = kind,
                                            .model_sha256 = value("model_sha256"),
                                            .input_sha256 = value("input_sha256"), .settings = settings,
                                            .command_line = prov_.command_line, .shard = shard_});
  }
  const AtomicOutputOptions opt{.force = flags_.force, .resume = flags_.resume};
  for (const auto& p : paths_) {
    outputs_.emplace_back(p, opt);
    if (outputs_.size() == 1) restart_headerless(outputs_.front());
  }
}

int64_t RecordJob::for_each_record(const std::set<std::string>& done, const std::function<JobRecord()>& prompt_record,
                                   const std::function<void(JobRecord&)>& each) {
  if (input_.jsonl.empty()) {
    if (done.count("0")) return 1;
    JobRecord r = prompt_record();
    each(r);
    return 0;
  }
  const Model& m = model();
  if (!m.tokenizer) fail<InputError>("{}: --input needs a model with a tokenizer", m.source.path.string());
  // In input order; the reader refuses an id used twice, in any shard (naming the line).
  int64_t skipped = 0;
  RecordReader reader(input_.jsonl);
  while (std::optional<InputRecord> in = reader.next()) {
    if (!shard_.contains(in->index)) continue;
    if (done.count(in->id)) {
      ++skipped;
      continue;
    }
    JobRecord r{.id = in->id, .index = in->index, .input = &*in,
                .prompt = tokenize_record(*in, *m.tokenizer, input_.prompt.chat), .answer = in->answer};
    each(r);
  }
  return skipped;
}

void RecordJob::remove_if_empty(const std::function<void()>& release) {
  // The error may be a failed write (a full disk): `release` lets the file go without more
  // errors. Complete records were flushed when they finished, so the partial file keeps
  // them for --resume; a run that created the file and finished no record leaves nothing.
  if (release) release();
  if (!outputs_.empty() && !continuing() && written_ == 0) {
    std::error_code ignored;
    std::filesystem::remove(partial(), ignored);
  }
}

void RecordJob::commit() {
  for (AtomicOutput& out : outputs_) out.commit();
}

}  // namespace ckv::app

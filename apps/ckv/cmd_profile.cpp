// ckv profile: a HeadKV head-importance profile from `ckv niah` records, the retrieval score
// of every query head averaged over the records (lib/output/headkv_profile.h; docs/BOUND.md
// "HeadKV"), for --headkv-profile.
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/progress.h"
#include "data/records.h"
#include "output/headkv_profile.h"
#include "record_job.h"

namespace ckv::app {
namespace {

struct ProfileOptions {
  std::string input;
  std::string span = "needle";
  std::string out = "profile.json";
  bool force = false, no_answer_space = false;
};

void run_profile(const ProfileOptions& o, const GlobalOptions& g) {
  const AtomicOutputOptions output_options{.force = o.force, .resumable = false};
  AtomicOutput::check(o.out, output_options);
  LoadedModel loaded(g);
  if (!loaded.model().tokenizer)
    fail<InputError>("{}: the model has no tokenizer (profile encodes the answers)", g.model_path());
  RetrievalProfile profile(loaded.model(), loaded.forward(), o.span, !o.no_answer_space);
  RecordReader reader(o.input);
  // As the record jobs report (RecordJob::record_done): a bar on a terminal, else a line a record.
  Progress progress("profile", count_input_records(o.input), "records", g.progress_mode());
  while (const std::optional<InputRecord> rec = reader.next()) {
    profile.add(*rec, fmt::format("{}: record \"{}\"", o.input, rec->id));
    if (progress.enabled()) progress.advance();
    else if (!g.quiet) fmt::print(stderr, "record \"{}\": scored\n", rec->id);
  }
  progress.finish();
  if (profile.records() == 0) fail<InputError>("{}: no record", o.input);
  const nlohmann::json j = profile.to_json(std::filesystem::path(g.model_path()).filename().string(),
                                           std::string(compute_dtype_name(g.compute)),
                                           std::filesystem::path(o.input).filename().string());
  AtomicOutput out(o.out, output_options);
  {
    std::ofstream f(out.partial_path());
    f << j.dump() << "\n";
    if (!f) fail<IoError>("{}: write failed", out.partial_path().string());
  }
  out.commit();
  if (!g.quiet) fmt::print("wrote {}: the retrieval scores of {} records\n", o.out, profile.records());
}

}  // namespace

void register_profile(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<ProfileOptions>();
  CLI::App* cmd = add_forward_subcommand(
      app, g, "profile",
      "HeadKV head profile: each head's retrieval score on `ckv niah` records (JSON for --headkv-profile)");
  cmd->add_option("-i,--input", o->input, "JSONL records with \"answer\" and the needle span (`ckv niah`)")->required();
  cmd->add_option("--span", o->span, "The record span that holds the answer (the needle)")->capture_default_str();
  cmd->add_flag("--no-answer-space", o->no_answer_space, "Encode the answer without a leading space");
  cmd->add_option("-o,--out", o->out, "Output profile (JSON)")->capture_default_str();
  cmd->add_flag("--force", o->force, "Replace an existing output");
  cmd->callback([o, &g] { run_profile(*o, g); });
}

}  // namespace ckv::app

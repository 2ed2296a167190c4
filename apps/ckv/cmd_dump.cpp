// ckv dump: run the model over one prompt or a JSONL batch and record, per layer and head,
// post-RoPE Q/K/V, attention rows, value-projected norms nu and optionally head outputs,
// the residual stream, last-position logits and W_O, into one HDF5 file (docs/DUMP.md).
// Records stream to disk layer by layer as the forward pass produces them
// (lib/output/dump_run.h); this file is the flags, the records and the totals.
#include <chrono>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "common.h"
#include "flag_rules.h"
#include "core/error.h"
#include "core/shard.h"
#include "core/thread_pool.h"
#include "output/describe.h"
#include "output/dump_run.h"
#include "output/dump_schema.h"
#include "output/dump_timing.h"
#include "data/records.h"
#include "model/forward.h"
#include "model/model.h"
#include "record_job.h"

namespace ckv::app {
namespace {

constexpr const char* kDumpPrompt =
    "The Eiffel Tower is in Paris. The Colosseum is in Rome. Big Ben is in London. "
    "Question: In which city is the Colosseum? Answer:";

struct DumpOptions {
  JobInput input;  // the prompt flags, --input
  std::string out = "dump.h5";
  std::string layers = "all", heads = "all";
  std::string what = "q,k,v,attn,nu,logits";
  std::string attn_rows = "window";
  int64_t window = 32;
  int64_t max_bytes = int64_t{4} << 30;
  std::string dtype = "f16";
  JobFlags job;
  std::string timing_json;  // --timing-json FILE
  int compress = 0;
  bool skip_bad = false, verbose = false;
};

// The records of the run: passes over those complete in the file, writes the others
// (DumpRecorder) and counts them.
struct Run {
  const DumpOptions& o;
  const GlobalOptions& g;
  const Model& model;
  const DumpSettings& settings;
  DumpRecorder& recorder;
  Progress& progress;
  RecordJob& job;  // counts the records written
  std::set<std::string> complete, seen{};  // complete in the file; ids met so far
  int64_t written = 0, skipped = 0, tokens = 0;
  double seconds = 0;
  bool window_given = false;

  void record(RecordMeta meta) {
    if (!seen.insert(meta.id).second)
      fail<InputError>("{}: record id \"{}\" appears twice{}", o.input.jsonl, meta.id,
                       meta.line > 0 ? fmt::format(" (again on line {})", meta.line) : "");
    if (complete.count(meta.id)) {
      ++skipped;
      progress.advance();
      return;
    }
    const auto n = static_cast<int64_t>(meta.tokens.size());
    const std::string name = fmt::format("record \"{}\"", meta.id);
    meta.token_text = token_texts(model.tokenizer.get(), meta.tokens);
    if (settings.what.attn || settings.what.attn_out) {
      meta.attn_rows = attention_rows(o.attn_rows, o.window, window_given, meta.context_end, n, name);
      if (o.attn_rows == "all") check_full_attention(n, name);
    }
    const auto start = std::chrono::steady_clock::now();
    recorder.record(meta, progress,
                    seconds > 0 ? fmt::format(", {:.0f} tokens/s", static_cast<double>(tokens) / seconds) : "");
    job.written();
    const double took = seconds_since(start);
    ++written;
    tokens += n;
    seconds += took;
    progress.advance();
    // The one progress style (README "Progress"): off a terminal, a line a record on stderr.
    const std::string line = fmt::format("record {} \"{}\": {} tokens, c={}, {:.2f} s\n", meta.index, meta.id, n,
                                         meta.context_end, took);
    if (o.verbose) {
      fmt::print("{}", line);
      std::fflush(stdout);
    } else if (!progress.enabled() && !g.quiet) {
      fmt::print(stderr, "{}", line);
    }
  }

  void check_full_attention(int64_t n, const std::string& name) const {
    const int64_t bytes = static_cast<int64_t>(settings.layers.size() * settings.heads.size()) * n *
                          n * static_cast<int64_t>(h5::dtype_size(settings.dtype));
    if (!g.quiet)
      fmt::print(stderr, "{}: full attention {} layers x {} heads x {} x {} = {:.1f} MiB\n", name,
                 settings.layers.size(), settings.heads.size(), n, n,
                 static_cast<double>(bytes) / (1 << 20));
    if (bytes > o.max_bytes)
      fail<InputError>("{}: the full attention needs {} bytes, above --max-bytes {}", name, bytes,
                       o.max_bytes);
  }
};

RecordMeta prompt_meta(const DumpOptions& o, const Model& model) {
  RecordMeta meta;
  meta.id = "0";
  const PromptOptions& in = o.input.prompt;
  meta.tokens = prompt_tokens(in, model, kDumpPrompt);
  if (in.tokens_file.empty() && in.prompt_file.empty())
    meta.context = in.prompt.empty() ? kDumpPrompt : in.prompt;
  meta.context_end = static_cast<int64_t>(meta.tokens.size());
  return meta;
}

RecordMeta record_meta(const DumpOptions& o, const Model& model, const InputRecord& r) {
  RecordPrompt p = tokenize_record(r, *model.tokenizer, o.input.prompt.chat);
  if (model.config.context_length > 0 && static_cast<int64_t>(p.tokens.size()) > model.config.context_length)
    fail<InputError>("{}:{}: {} tokens, longer than the model's context of {}", o.input.jsonl, r.line,
                     p.tokens.size(), model.config.context_length);
  return {.id = r.id, .index = r.index, .line = r.line, .context = r.context, .question = r.question,
          .answer = r.answer, .tokens = std::move(p.tokens), .token_text = {}, .context_end = p.context_end,
          .token_spans = std::move(p.token_spans), .attn_rows = {}};
}

// The records of this shard: the JSONL batch's (passing over malformed lines with
// --skip-bad), or the one prompt's.
void dump_records(const DumpOptions& o, const Model& model, const Shard& shard, Run& run) {
  if (o.input.jsonl.empty()) {
    if (shard.contains(0)) run.record(prompt_meta(o, model));
    return;
  }
  if (!model.tokenizer) fail<InputError>("{}: --input needs a model with a tokenizer", model.source.path.string());
  RecordReader reader(o.input.jsonl, o.skip_bad);
  while (std::optional<InputRecord> r = reader.next())
    if (shard.contains(r->index)) run.record(record_meta(o, model, *r));
  for (const std::string& msg : reader.skipped()) fmt::print(stderr, "ckv: warning: skipped {}\n", msg);
}

void run_dump(const DumpOptions& o, const GlobalOptions& g, bool window_given) {
  const auto started = std::chrono::steady_clock::now();
  if (o.window < 1) fail<UsageError>("--window {}: must be at least 1", o.window);
  if (o.max_bytes < 0) fail<UsageError>("--max-bytes {}: must not be negative", o.max_bytes);
  // A list's syntax before any work; its upper end, the record's length, per record.
  if (o.attn_rows != "window" && o.attn_rows != "all" && !o.attn_rows.starts_with("last:"))
    parse_index_list(o.attn_rows, std::numeric_limits<int64_t>::max(), "--attn-rows");
  DumpSettings settings;
  settings.what = DumpContents::parse(o.what);
  settings.dtype = o.dtype == "f32" ? h5::DType::F32 : h5::DType::F16;
  settings.gzip_level = o.compress;
  settings.attn_rows = o.attn_rows;
  settings.window = o.window;
  RecordJob rj(g, o.job, o.input, {o.out});
  rj.load();
  const Model& model = rj.model();
  settings.layers = parse_index_list(o.layers, model.config.n_layer, "--layers");
  settings.heads = parse_index_list(o.heads, model.config.n_head, "--heads");
  Provenance& prov = rj.provenance();
  prov.set("model_format", model.source.format);
  prov.set("dtype", h5::dtype_name(settings.dtype));
  prov.set("chat", o.input.prompt.chat);
  const int64_t total = o.input.jsonl.empty() ? 1 : count_input_records(o.input.jsonl);
  rj.describe_input(rj.input_file(), rj.input_sha256(), total);
  rj.open(kDumpSchema, kDumpSchemaVersion, "", settings.to_json());
  DumpFile dump = rj.guarded([&] {
    return rj.continuing() ? DumpFile::resume(rj.partial(), settings, prov.command_line)
                           : DumpFile::create(rj.partial(), prov, model, rj.model_sha256(), settings);
  });
  ThreadPool pool(g.resolved_threads());
  DumpRecorder recorder(dump, settings, model, rj.forward(), pool);
  Progress progress("dump", rj.shard().size_of(total), "records", g.progress_mode());
  Run run{.o = o, .g = g, .model = model, .settings = settings, .recorder = recorder, .progress = progress,
          .job = rj, .complete = dump.complete_records(), .window_given = window_given};
  rj.guarded([&] { dump_records(o, model, rj.shard(), run); }, [&] { dump.abandon(); });
  progress.finish();
  DumpTiming& timing = recorder.timing();
  auto start = std::chrono::steady_clock::now();
  dump.close();
  timing.close = seconds_since(start);
  start = std::chrono::steady_clock::now();
  rj.commit();
  timing.commit = seconds_since(start);
  if (!o.timing_json.empty())
    write_dump_timing(o.timing_json, timing, {.records = run.written, .tokens = run.tokens,
                                              .records_seconds = run.seconds,
                                              .wall_seconds = seconds_since(started)},
                      o.out);
  if (!g.quiet)
    fmt::print("{}: {} records written, {} already complete{}\n", o.out, run.written, run.skipped,
               run.seconds > 0 ? fmt::format(", {:.0f} tokens/s", static_cast<double>(run.tokens) / run.seconds) : "");
}

}  // namespace

void register_dump(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<DumpOptions>();
  CLI::App* cmd = add_forward_subcommand(
      app, g, "dump", "Record per-layer, per-head Q/K/V, attention and nu to HDF5");
  add_prompt_options(*cmd, o->input.prompt);
  add_jsonl_option(*cmd, o->input, "Path of a JSONL batch: {id, context, question, answer, spans} per line");
  cmd->add_option("-o,--out", o->out, "Output HDF5 file")->capture_default_str();
  cmd->add_option("--layers", o->layers, "Layers: all, or indices and ranges (0-3,10)")->capture_default_str();
  cmd->add_option("--heads", o->heads, "Query heads: all, or indices and ranges")->capture_default_str();
  cmd->add_option("--what", o->what, "What to record: q,k,v,attn,nu (nu_l1,nu_l2),attn_out,resid,logits,wo")
      ->capture_default_str();
  cmd->add_option("--attn-rows", o->attn_rows,
                  "Attention rows: window (last --window context positions + the question), "
                  "last:N, all (full n x n), or a list (3,7-9)")->capture_default_str();
  auto* window = cmd->add_option("--window", o->window, "Observation window (tokens)")->capture_default_str();
  cmd->add_option("--max-bytes", o->max_bytes,
                  "Refuse a full n x n attention above this size: bytes, or a number with a unit, 512MB or 4GB "
                  "(1 KB = 1024 bytes; default 4GB)")
      ->transform(CLI::AsSizeValue(false).description(""))->type_name("SIZE");
  cmd->add_option("--dtype", o->dtype, "Storage type of tensors")->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--compress", o->compress, "gzip level in [0, 9] (0: off)")->check(in_range(0, 9))->capture_default_str();
  add_job_flags(*cmd, o->job);
  cmd->add_flag("--skip-bad", o->skip_bad, "Skip malformed JSONL lines (with a warning) instead of stopping");
  cmd->add_flag("-v,--verbose", o->verbose, "Print the line of each finished record on stdout, also on a terminal (off a terminal it goes to "
                "stderr without -v)");
  cmd->add_option("--timing-json", o->timing_json,
                  "Write where the time went (forward pass, writer, HDF5 writes, fsync) to this JSON file");
  cmd->callback([o, &g, window] { run_dump(*o, g, window->count() > 0); });
}

}  // namespace ckv::app

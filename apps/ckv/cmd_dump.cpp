// ckv dump: run the model over one prompt or a JSONL batch and record, per layer and head,
// post-RoPE Q/K/V, attention rows, value-projected norms nu and optionally head outputs,
// the residual stream, last-position logits and W_O, into one HDF5 file (docs/DUMP.md).
// Records stream to disk layer by layer as the forward pass produces them: the forward pass
// runs on a second thread and this one writes (layer_queue.h), so writing overlaps the
// computation and memory is about two layers' buffers whatever the batch size.
#include <chrono>
#include <exception>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "analysis/value_norms.h"
#include "common.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "output/provenance.h"
#include "core/sha256.h"
#include "core/shard.h"
#include "core/thread_pool.h"
#include "dump_timing.h"
#include "output/batch_output.h"
#include "output/describe.h"
#include "output/dump_schema.h"
#include "data/records.h"
#include "layer_queue.h"
#include "model/forward.h"
#include "model/model.h"
#include "prompt_input.h"

namespace ckv::app {
namespace {

constexpr const char* kBuiltinPrompt =
    "The Eiffel Tower is in Paris. The Colosseum is in Rome. Big Ben is in London. "
    "Question: In which city is the Colosseum? Answer:";

struct DumpOptions {
  PromptOptions input;
  std::string input_jsonl;  // --input F.jsonl
  std::string out = "dump.h5";
  std::string layers = "all", heads = "all";
  std::string what = "q,k,v,attn,nu,logits";
  std::string attn_rows = "window";
  int64_t window = 32;
  int64_t max_bytes = int64_t{4} << 30;
  std::string dtype = "f16";
  std::string shard;  // --shard i/N; empty: Slurm array variables, else 0/1
  std::string timing_json;  // --timing-json FILE
  int compress = 0;
  bool force = false, resume = false, skip_bad = false, verbose = false;
};

// Runs on the forward pass's thread: copies what it records (its buffers are reused by the
// next layer) into the queue the main thread writes from.
class QueueRecorder : public Recorder {
 public:
  explicit QueueRecorder(LayerQueue& queue) : queue_(queue) {}
  void on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) override {
    queue_.push({.kind = LayerItem::Kind::qkv, .layer = layer, .a = q, .b = k, .c = v});
  }
  void on_attention(int64_t layer, std::span<const int64_t>, const Tensor& probs) override {
    queue_.push({.kind = LayerItem::Kind::attention, .layer = layer, .a = probs, .b = {}, .c = {}});
  }
  void on_head_outputs(int64_t layer, std::span<const int64_t>, const Tensor& out) override {
    queue_.push({.kind = LayerItem::Kind::head_out, .layer = layer, .a = out, .b = {}, .c = {}});
  }
  void on_residual(int64_t layer, const Tensor& resid) override {
    queue_.push({.kind = LayerItem::Kind::resid, .layer = layer, .a = resid, .b = {}, .c = {}});
  }

 private:
  LayerQueue& queue_;
};

// Runs on the main thread, the only one that calls HDF5: writes one item into the record's
// group, computing nu from v and W_O on the way.
class ItemWriter {
 public:
  ItemWriter(RecordWriter& rec, const DumpSettings& s, const Model& model, ThreadPool& pool,
             Progress& progress, std::string rate, DumpTiming& timing)
      : rec_(rec), s_(s), model_(model), pool_(pool), progress_(progress), rate_(std::move(rate)),
        timing_(timing) {}
  void write(const LayerItem& item) {
    const auto start = std::chrono::steady_clock::now();
    write_item(item);
    timing_.writer_busy += seconds_since(start);
  }

 private:
  void write_item(const LayerItem& item) {
    switch (item.kind) {
      case LayerItem::Kind::qkv: write_qkv(item.layer, item.a, item.b, item.c); break;
      case LayerItem::Kind::attention:
        if (s_.what.attn) rec_.write_attention(item.layer, item.a);
        break;
      case LayerItem::Kind::head_out: rec_.write_head_out(item.layer, item.a); break;
      case LayerItem::Kind::resid: rec_.write_resid(item.layer, item.a); break;
    }
  }

  void write_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) {
    rec_.write_qkv(layer, q, k, v);
    if (s_.what.nu_l1 || s_.what.nu_l2) {
      const Tensor wo = model_.weights.layers.at(static_cast<size_t>(layer)).wo.to_f32();
      const auto start = std::chrono::steady_clock::now();
      ValueNorms nu = value_norms(v, wo, model_.config.n_head, s_.heads,
                                  {.l1 = s_.what.nu_l1, .l2 = s_.what.nu_l2}, &pool_);
      timing_.nu += seconds_since(start);
      rec_.write_nu(layer, nu.l1, nu.l2);
    }
    progress_.set_note(fmt::format("layer {}/{}{}", layer + 1, model_.config.n_layer, rate_));
  }

  RecordWriter& rec_;
  const DumpSettings& s_;
  const Model& model_;
  ThreadPool& pool_;
  Progress& progress_;
  std::string rate_;  // ", N tokens/s" of the records so far
  DumpTiming& timing_;
};

// Runs the forward pass on a second thread while this one writes what it records, so the
// dump's wall time is about the forward pass's. Returns after every item is written; a
// failure on either side is rethrown here with its own type (the writer's first, since a
// failed writer is what stops the forward pass).
ForwardResult forward_and_write(Forward& forward, const std::vector<int32_t>& tokens,
                                ForwardRequest request, ItemWriter& writer, DumpTiming& timing) {
  // Capacity one layer's callbacks: with the item being written, about two layers in flight.
  const size_t per_layer = (request.record.qkv ? 1 : 0) + (request.record.attn_rows.empty() ? 0 : 1) +
                           (request.record.head_out_rows.empty() ? 0 : 1) + (request.record.residual ? 1 : 0);
  LayerQueue queue(per_layer);
  QueueRecorder recorder(queue);
  request.recorder = &recorder;
  ForwardResult result;
  std::exception_ptr forward_error;
  double forward_seconds = 0;
  std::thread worker([&] {
    const auto start = std::chrono::steady_clock::now();
    try {
      result = forward.run(tokens, request);
    } catch (...) {
      forward_error = std::current_exception();
    }
    forward_seconds = seconds_since(start);
    queue.close();
  });
  try {
    while (std::optional<LayerItem> item = queue.pop()) writer.write(*item);
  } catch (...) {
    queue.cancel();
    worker.join();
    throw;
  }
  worker.join();
  timing.forward += forward_seconds;
  timing.forward_stalled += queue.push_wait_seconds();
  timing.writer_idle += queue.pop_wait_seconds();
  if (forward_error) std::rethrow_exception(forward_error);
  return result;
}

struct Run {
  const DumpOptions& o;
  const GlobalOptions& g;
  const Model& model;
  DumpSettings settings;
  DumpFile& dump;
  Forward& forward;
  ThreadPool& pool;
  Progress& progress;
  std::set<std::string> complete, seen;
  int64_t written = 0, skipped = 0, tokens = 0;
  double seconds = 0;
  DumpTiming timing{};

  void record(RecordMeta meta) {
    if (!seen.insert(meta.id).second)
      fail<InputError>("{}: record id \"{}\" appears twice{}", o.input_jsonl, meta.id,
                       meta.line > 0 ? fmt::format(" (again on line {})", meta.line) : "");
    if (complete.count(meta.id)) {
      ++skipped;
      progress.advance();
      return;
    }
    const auto n = static_cast<int64_t>(meta.tokens.size());
    const std::string name = fmt::format("record \"{}\"", meta.id);
    meta.token_text = token_texts(model.tokenizer.get(), meta.tokens);
    const bool rows_needed = settings.what.attn || settings.what.attn_out;
    if (rows_needed) {
      meta.attn_rows = attention_rows(o.attn_rows, o.window, window_given, meta.context_end, n, name);
      if (o.attn_rows == "all") check_full_attention(n, name);
    }
    const auto start = std::chrono::steady_clock::now();
    RecordWriter rec = dump.begin_record(meta);
    ItemWriter writer(rec, settings, model, pool, progress,
                      seconds > 0 ? fmt::format(", {:.0f} tokens/s", static_cast<double>(tokens) / seconds) : "",
                      timing);
    ForwardRequest request;
    request.record.layers = settings.layers;
    request.record.qkv = settings.what.q || settings.what.k || settings.what.v ||
                         settings.what.nu_l1 || settings.what.nu_l2;
    if (settings.what.attn) request.record.attn_rows = meta.attn_rows;
    if (settings.what.attn_out) request.record.head_out_rows = meta.attn_rows;
    request.record.residual = settings.what.resid;
    // Every dataset is written when this returns; logits and `complete` follow.
    ForwardResult result = forward_and_write(forward, meta.tokens, std::move(request), writer, timing);
    if (settings.what.logits) rec.write_logits_last(result.logits.span().last(static_cast<size_t>(model.config.vocab)));
    dump.finish_record(rec);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++written;
    tokens += n;
    seconds += took;
    progress.advance();
    if (o.verbose) {
      fmt::print("record {} \"{}\": {} tokens, c={}, {:.2f} s\n", meta.index, meta.id, n,
                 meta.context_end, took);
      std::fflush(stdout);
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
  bool window_given = false;
};

RecordMeta prompt_meta(const DumpOptions& o, const Model& model) {
  RecordMeta meta;
  meta.id = "0";
  meta.tokens = prompt_tokens(o.input, model, kBuiltinPrompt);
  if (o.input.tokens_file.empty() && o.input.prompt_file.empty())
    meta.context = o.input.prompt.empty() ? kBuiltinPrompt : o.input.prompt;
  meta.context_end = static_cast<int64_t>(meta.tokens.size());
  return meta;
}

RecordMeta record_meta(const DumpOptions& o, const Model& model, const InputRecord& r) {
  RecordPrompt p = tokenize_record(r, *model.tokenizer, o.input.chat);
  if (model.config.context_length > 0 && static_cast<int64_t>(p.tokens.size()) > model.config.context_length)
    fail<InputError>("{}:{}: {} tokens, longer than the model's context of {}", o.input_jsonl, r.line,
                     p.tokens.size(), model.config.context_length);
  return {.id = r.id, .index = r.index, .line = r.line, .context = r.context, .question = r.question,
          .answer = r.answer, .tokens = std::move(p.tokens), .token_text = {}, .context_end = p.context_end,
          .token_spans = std::move(p.token_spans), .attn_rows = {}};
}

// The file this run writes: the interrupted one for --resume, else a new one. A new file
// that cannot be written (a full disk) is removed, so the output's directory is as before.
DumpFile open_dump(const AtomicOutput& out, const Provenance& prov, const Model& model,
                   const std::string& sha, const DumpSettings& settings) {
  if (out.continuing()) return DumpFile::resume(out.partial_path(), settings, prov.command_line);
  try {
    return DumpFile::create(out.partial_path(), prov, model, sha, settings);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(out.partial_path(), ignored);
    throw;
  }
}

void run_dump(const DumpOptions& o, const GlobalOptions& g, bool window_given) {
  const auto started = std::chrono::steady_clock::now();
  if (o.window < 1) fail<UsageError>("--window {}: must be at least 1", o.window);
  if (o.max_bytes < 0) fail<UsageError>("--max-bytes {}: must not be negative", o.max_bytes);
  DumpSettings settings;
  settings.what = DumpContents::parse(o.what);
  settings.dtype = o.dtype == "f32" ? h5::DType::F32 : h5::DType::F16;
  settings.gzip_level = o.compress;
  settings.attn_rows = o.attn_rows;
  settings.window = o.window;
  // Refuse a bad or busy output before the model load and hashing; the real check follows.
  AtomicOutput::check(o.out, {.force = o.force, .resume = o.resume});

  Model model = load_model(g.model_path());
  settings.layers = parse_index_list(o.layers, model.config.n_layer, "--layers");
  settings.heads = parse_index_list(o.heads, model.config.n_head, "--heads");
  const std::string sha = model_sha256(model.source.path);
  // Built before the provenance: its context is the device that runs the pass.
  Forward forward(model, g.forward_options());
  Provenance prov = g.provenance(forward.context().device_string());
  prov.set("model_path", model.source.path.string());
  prov.set("model_sha256", sha);
  prov.set("model_format", model.source.format);
  if (const std::string note = set_sliding_layers(prov, model.config); !note.empty() && !g.quiet)
    fmt::print(stderr, "ckv: note: {}\n", note);
  prov.set("dtype", h5::dtype_name(settings.dtype));
  const std::string input_file = !o.input_jsonl.empty()        ? o.input_jsonl
                                 : !o.input.prompt_file.empty() ? o.input.prompt_file
                                                                : o.input.tokens_file;
  const std::string input_sha = !input_file.empty()      ? sha256_file(input_file)
                                : o.input.prompt.empty() ? ""
                                                         : sha256_hex(o.input.prompt);
  prov.set("input_file", input_file);
  prov.set("input_sha256", input_sha);
  prov.set("chat", o.input.chat);
  const Shard shard = Shard::resolve(o.shard);
  const int64_t total = o.input_jsonl.empty() ? 1 : count_input_records(o.input_jsonl);
  set_shard_provenance(prov, shard, total);
  if (o.resume)
    check_output_to_resume(o.out, {.schema = kDumpSchema, .schema_version = kDumpSchemaVersion,
                                   .kind = "", .model_sha256 = sha, .input_sha256 = input_sha,
                                   .settings = settings.to_json(),
                                   .command_line = prov.command_line, .shard = shard});
  AtomicOutput out(o.out, {.force = o.force, .resume = o.resume});
  restart_headerless(out);

  DumpFile dump = open_dump(out, prov, model, sha, settings);
  ThreadPool pool(g.resolved_threads());
  Progress progress("dump", shard.size_of(total), "records", g.progress_mode());
  Run run{o, g, model, settings, dump, forward, pool, progress, dump.complete_records(), {}};
  run.window_given = window_given;

  try {
    if (o.input_jsonl.empty()) {
      if (shard.contains(0)) run.record(prompt_meta(o, model));
    } else {
      if (!model.tokenizer) fail<InputError>("{}: --input needs a model with a tokenizer", model.source.path.string());
      RecordReader reader(o.input_jsonl, o.skip_bad);
      while (std::optional<InputRecord> r = reader.next())
        if (shard.contains(r->index)) run.record(record_meta(o, model, *r));
      for (const std::string& msg : reader.skipped()) fmt::print(stderr, "ckv: warning: skipped {}\n", msg);
    }
  } catch (...) {
    // The error may be a failed write (a full disk), after which HDF5 cannot flush: release
    // the file without reporting more. Complete records were flushed when they finished,
    // so the partial file keeps them for --resume; a run that created the file and
    // finished no record leaves nothing to resume.
    dump.abandon();
    if (!out.continuing() && run.written == 0) {
      std::error_code ignored;
      std::filesystem::remove(out.partial_path(), ignored);
    }
    throw;
  }
  progress.finish();
  auto start = std::chrono::steady_clock::now();
  dump.close();
  run.timing.close = seconds_since(start);
  start = std::chrono::steady_clock::now();
  out.commit();
  run.timing.commit = seconds_since(start);
  if (!o.timing_json.empty())
    write_dump_timing(o.timing_json, run.timing, {.records = run.written, .tokens = run.tokens,
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
  CLI::App* cmd = app.add_subcommand("dump", "Record per-layer, per-head Q/K/V, attention and nu to HDF5");
  add_model_options(*cmd, g);
  add_compute_option(*cmd, g);
  add_prompt_options(*cmd, o->input);
  auto* input = cmd->add_option("-i,--input", o->input_jsonl,
                                "JSONL batch: {id, context, question, answer, spans} per line");
  for (const char* other : {"--prompt", "--prompt-file", "--tokens"}) input->excludes(cmd->get_option(other));
  cmd->add_option("-o,--out", o->out, "Output HDF5 file")->capture_default_str();
  cmd->add_option("--layers", o->layers, "Layers: all, or indices and ranges (0-3,10)")->capture_default_str();
  cmd->add_option("--heads", o->heads, "Query heads: all, or indices and ranges")->capture_default_str();
  cmd->add_option("--what", o->what, "What to record: q,k,v,attn,nu (nu_l1,nu_l2),attn_out,resid,logits,wo")
      ->capture_default_str();
  cmd->add_option("--attn-rows", o->attn_rows,
                  "Attention rows: window (last --window context positions + the question), "
                  "last:N, all (full n x n), or a list (3,7-9)")->capture_default_str();
  auto* window = cmd->add_option("--window", o->window, "Observation window (tokens)")->capture_default_str();
  cmd->add_option("--max-bytes", o->max_bytes, "Refuse a full n x n attention above this size (4GB, 512MB)")
      ->transform(CLI::AsSizeValue(false))->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "Storage type of tensors")->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--compress", o->compress, "gzip level (0: off)")->check(CLI::Range(0, 9))->capture_default_str();
  cmd->add_option("--shard", o->shard,
                  "Only records with index % N == i (i/N); default: SLURM_ARRAY_TASK_ID/COUNT when set");
  cmd->add_flag("--force", o->force, "Replace an existing output");
  cmd->add_flag("--resume", o->resume, "Continue an interrupted output, skipping complete records");
  cmd->add_flag("--skip-bad", o->skip_bad, "Skip malformed JSONL lines (with a warning) instead of stopping");
  cmd->add_flag("-v,--verbose", o->verbose, "Print one line per finished record (batch logs)");
  cmd->add_option("--timing-json", o->timing_json,
                  "Write where the time went (forward pass, writer, HDF5 writes, fsync) to this JSON file");
  cmd->callback([o, &g, window] { run_dump(*o, g, window->count() > 0); });
}

}  // namespace ckv::app

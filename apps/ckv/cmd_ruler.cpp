// ckv ruler: RULER's 13 synthetic tasks as JSONL for `ckv dump` / `ckv eval`, fitted to the
// model's own tokenizer (lib/data/ruler.h, docs/RULER.md).
#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "common.h"
#include "flag_rules.h"
#include "jsonl_output.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "data/prompt_tokenizer.h"
#include "data/ruler.h"

namespace ckv::app {
namespace {

struct RulerCliOptions {
  std::string task;
  int64_t length = 4096;
  int64_t count = 1;
  uint64_t seed = 0;
  std::string out = "-";
  bool force = false;
};

void run_ruler(const RulerCliOptions& o, const GlobalOptions& g) {
  JsonlOutput::check(o.out, o.force);
  std::vector<std::string_view> tasks;
  if (o.task == "all") {
    for (const RulerTask& t : ruler_tasks()) tasks.push_back(t.name);
  } else {
    if (!find_ruler_task(o.task)) {
      std::string names;
      for (const RulerTask& t : ruler_tasks())
        names += (names.empty() ? "" : ", ") + std::string(t.name);
      fail<UsageError>("--task: unknown task \"{}\" (RULER's tasks: {}, or all)", o.task, names);
    }
    tasks.push_back(o.task);
  }
  const PromptTokenizer model = load_prompt_tokenizer(g.model_path());
  if (model.context_length > 0 && o.length > model.context_length)
    fail<UsageError>("--length {}: longer than the model's context of {} tokens ({})", o.length,
                     model.context_length, g.model_path());
  // Every task's haystack size first, so a length too short for one fails before any output.
  std::vector<std::unique_ptr<RulerGenerator>> generators;
  for (const std::string_view t : tasks)
    generators.push_back(std::make_unique<RulerGenerator>(t, o.length, o.seed, *model.tokenizer));

  JsonlOutput out(o.out, o.force);
  ThreadPool pool(g.resolved_threads());
  Progress progress("ruler", static_cast<int64_t>(tasks.size()) * o.count, "prompts",
                    g.progress_mode());
  const int64_t chunk = 4 * pool.size();  // records in memory at a time, written in order
  for (const auto& gen : generators) {
    for (int64_t first = 0; first < o.count; first += chunk) {
      const int64_t n = std::min(chunk, o.count - first);
      std::vector<std::string> lines(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t i) {
        lines[static_cast<size_t>(i)] = gen->record(first + i).to_jsonl() + "\n";
      });
      for (const std::string& line : lines) {
        out.write(line);
        progress.advance();
      }
    }
  }
  progress.finish();
  out.commit();
}

}  // namespace

void register_ruler(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<RulerCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "ruler", "Generate RULER's synthetic tasks for the model's tokenizer (JSONL)");
  add_model_options(*cmd, g, /*device=*/false);  // the tokenizer only
  cmd->add_option("--task", o->task,
                  "niah_single_1..3, niah_multikey_1..3, niah_multivalue, niah_multiquery, vt, "
                  "cwe, fwe, qa_1, qa_2, or all (the 13 in that order)")
      ->required();
  cmd->add_option("--length", o->length,
                  "Prompt + the task's generation budget, in tokens of the model's tokenizer (>= 1)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--count", o->count, "Records per task, >= 1")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed (same seed, same output on any machine)")
      ->capture_default_str();
  cmd->add_option("-o,--out", o->out, "Output JSONL (- for stdout)")->capture_default_str();
  cmd->add_flag("--force", o->force, "Replace an existing output");
  cmd->callback([o, &g] { run_ruler(*o, g); });
}

}  // namespace ckv::app

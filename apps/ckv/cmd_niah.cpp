// ckv niah: RULER-style needle-in-a-haystack prompts as JSONL for `ckv dump --input`
// (lib/data/niah.h, docs/NIAH.md).
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "core/input_file.h"
#include "common.h"
#include "flag_rules.h"
#include "jsonl_output.h"
#include "core/error.h"
#include "core/progress.h"
#include "data/niah.h"
#include "data/prompt_tokenizer.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace ckv::app {
namespace {

struct NiahCliOptions {
  NiahOptions niah;
  std::string haystack = "noise";
  std::string value_type = "numbers";
  std::string depths;
  std::string out = "-";
  bool force = false;
};

std::vector<double> parse_depths(const std::string& spec) {
  std::vector<double> out;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    double d = -1;
    try {
      d = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(d >= 0 && d <= 1))
      fail<UsageError>("--depths: \"{}\" is not a number in [0, 1]", item);
    out.push_back(d);
  }
  return out;
}

void run_niah(NiahCliOptions o, const GlobalOptions& g) {
  JsonlOutput::check(o.out, o.force);
  std::string haystack = kNiahNoise;
  if (o.haystack != "noise") {
    haystack = read_regular_file(o.haystack, "the haystack file");
    o.niah.haystack_name = std::filesystem::path(o.haystack).filename().string();
  }
  o.niah.value_kind = o.value_type == "uuids" ? NiahValueKind::Uuids : NiahValueKind::Numbers;
  if (!o.depths.empty()) o.niah.depths = parse_depths(o.depths);
  const PromptTokenizer model = load_prompt_tokenizer(g.model_path());
  const std::unique_ptr<Tokenizer>& tok = model.tokenizer;
  if (model.context_length > 0 && o.niah.length > model.context_length)
    fail<UsageError>("--length {}: longer than the model's context of {} tokens ({})", o.niah.length,
                     model.context_length, g.model_path());

  JsonlOutput out(o.out, o.force);
  Progress progress("niah", o.niah.count, "prompts", g.progress_mode());
  for (int64_t i = 0; i < o.niah.count; ++i) {
    out.write(make_niah_record(o.niah, *tok, haystack, i).to_jsonl(o.niah) + "\n");
    progress.advance();
  }
  progress.finish();
  out.commit();
}

}  // namespace

void register_niah(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<NiahCliOptions>();
  CLI::App* cmd = app.add_subcommand("niah", "Generate RULER-style needle-in-a-haystack prompts (JSONL)");
  add_model_options(*cmd, g, /*device=*/false);  // the tokenizer only
  NiahOptions& n = o->niah;
  cmd->add_option("--length", n.length, "Target prompt length in tokens of the model's tokenizer, a count >= 1")
      ->check(at_least(1))->capture_default_str();
  cmd->add_option("--count", n.count, "Number of prompts, >= 1")->check(at_least(1))->capture_default_str();
  cmd->add_option("--seed", n.seed, "Random seed (same seed, same output on any machine)")->capture_default_str();
  cmd->add_option("--haystack", o->haystack, "noise (built in) or the path of a text file (an essay haystack)")->capture_default_str();
  cmd->add_option("--value-type", o->value_type, "Needle values")->check(CLI::IsMember({"numbers", "uuids"}))
      ->capture_default_str();
  cmd->add_option("--keys", n.keys,
                  "Distinct keys in the haystack, in [1, 1024] (others than the asked ones are distractor needles)")
      ->check(in_range(1, 1024))->capture_default_str();
  cmd->add_option("--values", n.values, "Values per key (multi-value), in [1, 1024]")->check(in_range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--queries", n.queries, "Keys asked about (multi-query), in [1, 1024]")->check(in_range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--depths", o->depths, "Depth grid of the first needle, e.g. 0,0.25,0.5,0.75,1 (record r uses "
                  "entry r mod size); default: random depths");
  cmd->add_option("--distractors", n.distractors, "Length-matched haystack spans per needle, in [0, 100]")
      ->check(in_range(0, 100))->capture_default_str();
  cmd->add_option("--tolerance", n.tolerance, "Allowed relative length error, in [0, 1]")->check(in_range(0, 1))
      ->capture_default_str();
  cmd->add_option("--id-prefix", n.id_prefix, "Record ids are <prefix>_<index>")->capture_default_str();
  cmd->add_option("-o,--out", o->out, "Output JSONL (- for stdout)")->capture_default_str();
  cmd->add_flag("--force", o->force, "Replace an existing output");
  cmd->callback([o, &g] { run_niah(*o, g); });
}

}  // namespace ckv::app

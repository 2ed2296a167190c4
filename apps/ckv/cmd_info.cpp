// ckv info: describe a model (config, tensors, tokenizer; lib/model/model_info.h) or a ckv
// output file (lib/output/output_info.h), as text or JSON.
#include <filesystem>

#include <fmt/format.h>

#include "common.h"
#include "core/error.h"
#include "model/model.h"
#include "model/model_info.h"
#include "output/output_info.h"

namespace ckv::app {
namespace {

struct InfoOptions {
  std::string path;  // model file/directory; empty: --model or the default model
  bool json = false;
};

void run_info(const InfoOptions& o, const GlobalOptions& g) {
  std::string path = o.path.empty() ? g.model_path() : o.path;
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".h5") return fmt::print("{}", describe_output_file(path, o.json));
  if (ext == ".json" || ext == ".jsonl" || ext == ".csv" || ext == ".txt" || ext == ".tsv")
    fail<UsageError>("{}: not a model nor a ckv output file: `ckv info` describes a .gguf file, an HF safetensors "
                     "directory or a ckv .h5 file", path);
  const Model m = load_model(path);
  fmt::print("{}", o.json ? model_info_json(m).dump(2) + "\n" : model_info_text(m));
}

}  // namespace

void register_info(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Describe a model (config, tensors, tokenizer) or a ckv output file (.h5)");
  cmd->add_option("path", o->path, "Model (.gguf or HF directory) or output file (.h5); default: --model or the default model");
  add_model_options(*cmd, g, /*device=*/false);  // reads the model, computes nothing
  cmd->add_flag("--json", o->json, "Print JSON for scripts");
  cmd->callback([o, &g] { run_info(*o, g); });
}

}  // namespace ckv::app

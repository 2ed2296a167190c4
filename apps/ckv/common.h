#pragma once
// Options shared by every subcommand, and the registration functions of each one.
#include <optional>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>

#include "core/progress.h"
#include "model/forward.h"
#include "ops/linear.h"
#include "output/provenance.h"

namespace ckv::app {

struct GlobalOptions {
  std::string model;       // --model PATH; empty means the embedded default model
  std::string device = "cpu";  // --device as given (checked by its validator: cpu only, for now)
  int threads = 0;         // 0: all hardware threads; more than those are capped to them
  ComputeDType compute = ComputeDType::F32;  // --compute-dtype: the linear layers' arithmetic
  bool quiet = false;
  bool progress = false;   // force the progress bar even when stderr is not a terminal
  int argc = 0;            // the process's command line, for provenance
  const char* const* argv = nullptr;

  mutable bool threads_capped_noted = false;  // the cap is reported once per process

  ProgressMode progress_mode() const { return Progress::mode_from_flags(quiet, progress); }
  int resolved_threads() const;
  std::string model_path() const;  // --model, else the default model path
  // The forward pass as the flags ask: --device, --threads and --compute-dtype.
  ForwardOptions forward_options() const;
  // Provenance of this run: the fixed fields, and the compute dtype and GEMM engine that ran.
  // `device_that_ran` is the device of the execution context that did the work
  // (forward.context().device_string()), never the flag's text.
  Provenance provenance(const std::string& device_that_ran) const;
};

// --model, --device (unless `device` is false: a subcommand that runs no model computation), --threads
void add_model_options(CLI::App& cmd, GlobalOptions& g, bool device = true);
// --device cpu|cuda|cuda:N: every subcommand refuses a CUDA device (one line, exit 2) at
// parsing, before any work; see main.cpp.
void add_device_option(CLI::App& cmd, GlobalOptions& g);
// A --device value: {device, index}, or nullopt for an unknown name.
std::optional<std::pair<Device, int>> parse_device(const std::string& value);
// --compute-dtype f32|bf16, on every subcommand that runs the forward pass.
void add_compute_option(CLI::App& cmd, GlobalOptions& g);
// A subcommand that runs the forward pass (bound, check, dump, eval, forward, mask, profile):
// registered on `app` with its model, device, threads and compute-dtype flags.
CLI::App* add_forward_subcommand(CLI::App& app, GlobalOptions& g, const std::string& name,
                                 const std::string& help);

// The command line: global flags and every subcommand registered on `app`, with `g` bound
// to the global options (it must outlive `app`). app.parse() then runs the subcommand.
void build_app(CLI::App& app, GlobalOptions& g);

void register_info(CLI::App& app, GlobalOptions& g);
void register_forward(CLI::App& app, GlobalOptions& g);
void register_dump(CLI::App& app, GlobalOptions& g);
void register_mask(CLI::App& app, GlobalOptions& g);
void register_niah(CLI::App& app, GlobalOptions& g);
void register_ruler(CLI::App& app, GlobalOptions& g);
void register_merge(CLI::App& app, GlobalOptions& g);
void register_bound(CLI::App& app, GlobalOptions& g);
void register_check(CLI::App& app, GlobalOptions& g);
void register_eval(CLI::App& app, GlobalOptions& g);
void register_profile(CLI::App& app, GlobalOptions& g);

// `ckv info FILE.h5`: summary of a dump (cmd_info_h5.cpp).
void info_dump(const std::string& path, bool json);

}  // namespace ckv::app

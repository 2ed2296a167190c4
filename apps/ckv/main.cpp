// ckv: KV-cache eviction as output perturbation. This file builds the command line; each
// subcommand lives in its own cmd_<name>.cpp with an options struct, a register function
// and a run function. Library errors are printed here as one line with a non-zero exit.
// build_app() is the whole command line without main(): the fuzz targets (fuzz/) compile
// this file with CKV_APP_NO_MAIN and parse argv through the same app.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <string>
#include <exception>
#include <thread>

#include <fmt/core.h>

#include "common.h"
#include "flag_rules.h"
#include "core/error.h"
#include "model/model.h"
#include "ckv/version.h"

namespace ckv::app {

int GlobalOptions::resolved_threads() const {
  const unsigned hw_count = std::thread::hardware_concurrency();
  const int hw = hw_count == 0 ? 1 : static_cast<int>(hw_count);
  if (threads <= 0) return hw;
  // More threads than hardware threads only adds scheduling and wake-up cost (4096 threads
  // made a 2-token forward pass take a minute): cap, and say so once.
  if (threads <= hw) return threads;
  if (!quiet && !threads_capped_noted) {
    fmt::print(stderr, "ckv: note: --threads {} capped to the {} hardware threads\n", threads, hw);
    threads_capped_noted = true;
  }
  return hw;
}

std::string GlobalOptions::model_path() const {
  return model.empty() ? default_model_path().string() : model;
}

ForwardOptions GlobalOptions::forward_options() const {
  // The validator let only cpu through; were that to change, the Forward refuses what it
  // cannot run rather than running elsewhere.
  const auto [kind, index] = parse_device(device).value_or(std::pair{Device::CPU, 0});
  return {.device = kind, .device_index = index, .threads = resolved_threads(), .compute = compute};
}

Provenance GlobalOptions::provenance(const std::string& device_that_ran) const {
  Provenance p = Provenance::capture(argc, argv, resolved_threads(), device_that_ran);
  p.set("compute_dtype", std::string(compute_dtype_name(compute)));
  p.set("gemm_engine", std::string(gemm_engine_name()));
  if (compute == ComputeDType::BF16) p.set("bf16_kernel", std::string(bf16_kernel_name()));
  return p;
}

void add_compute_option(CLI::App& cmd, GlobalOptions& g) {
  // A build without oneDNN refuses bf16 here, at parsing: nothing falls back to float32
  // while the flag says bf16.
  cmd.add_option("--compute-dtype", g.compute,
                 "Arithmetic of the linear layers: f32 (default), or bf16 (x and weights rounded "
                 "to bfloat16, float32 sums, in products of more than 8 rows; needs a build with "
                 "oneDNN; docs/PERF.md gives its error)")
      ->transform(CLI::Validator(
          [](std::string& value) -> std::string {
            for (const ComputeDType d : {ComputeDType::F32, ComputeDType::BF16}) {
              if (value != compute_dtype_name(d)) continue;
              if (!compute_dtype_available(d))
                return value + ": this build has no " + value +
                       " GEMM (built without oneDNN; install libdnnl-dev and rebuild)";
              value = std::to_string(static_cast<int>(d));
              return {};
            }
            return "unknown compute dtype '" + value + "' (known: f32, bf16)";
          },
          "f32|bf16", "compute dtype"))
      ->default_str("f32");
}

std::optional<std::pair<Device, int>> parse_device(const std::string& value) {
  if (value == "cpu") return std::pair{Device::CPU, 0};
  if (value == "cuda") return std::pair{Device::CUDA, 0};
  if (value.starts_with("cuda:") && value.size() > 5 && value.size() <= 8 &&
      std::all_of(value.begin() + 5, value.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::pair{Device::CUDA, std::stoi(value.substr(5))};
  return std::nullopt;
}

void add_device_option(CLI::App& cmd, GlobalOptions& g) {
  // Every subcommand runs on the CPU: the forward pass has no verified CUDA path (the kernels
  // in kernels/ are built, and tested only where a GPU is), and info, niah and merge do no
  // device work. So --device cuda is refused here, by the option's validator: one line,
  // exit 2, before the subcommand's required arguments are checked and before any work, and
  // nothing runs on the CPU while claiming cuda. Provenance records the device of the
  // context that ran (GlobalOptions::provenance), not this flag.
  const std::string name = cmd.get_name();
  cmd.add_option("--device", g.device,
                 "Compute device: cpu (every subcommand runs on the CPU; cuda and cuda:N are refused: the CUDA "
                 "kernels are built but no subcommand runs them yet)")
      ->check(CLI::Validator(
          [name](std::string& value) -> std::string {
            const auto parsed = parse_device(value);
            if (!parsed) return "unknown device '" + value + "' (known: cpu, cuda, cuda:N)";
            if (parsed->first == Device::CPU) return {};
            return value + ": ckv " + name +
                   " runs on the CPU only (the CUDA kernels are built but not verified on a GPU, and no "
                   "subcommand runs them yet); use --device cpu";
          },
          "", "device"))
      ->type_name("DEVICE")
      ->capture_default_str();
}

void add_model_options(CLI::App& cmd, GlobalOptions& g, bool device) {
  cmd.add_option("-m,--model", g.model,
                 "Model: path of a .gguf file or of an HF safetensors directory (default: $CKV_MODEL, "
                 "else the embedded SmolLM2-135M-Instruct)");
  if (device) add_device_option(cmd, g);
  cmd.add_option("-t,--threads", g.threads,
                 "CPU threads, a count in [0, 1048576] (default, 0: all hardware threads; more are capped to them)")
      ->check(in_range(0, 1 << 20));
}

CLI::App* add_forward_subcommand(CLI::App& app, GlobalOptions& g, const std::string& name,
                                 const std::string& help) {
  CLI::App* cmd = app.add_subcommand(name, help);
  add_model_options(*cmd, g);
  add_compute_option(*cmd, g);
  return cmd;
}

// Prints the error as one line (messages from libraries such as HDF5 may carry newlines)
// and returns the exit code. By now the exception has unwound every open file: a failed
// run leaves at most its .partial file, for --resume.
int fail_with(int code, const char* kind, std::string message) {
  std::replace(message.begin(), message.end(), '\n', ' ');
  while (!message.empty() && message.back() == ' ') message.pop_back();
  std::fflush(stdout);
  // Messages thrown through ckv::fail are escaped already; library messages may quote raw bytes.
  fmt::print(stderr, "ckv: {}: {}\n", kind, ckv::escape_control(message));
  return code;
}

void build_app(CLI::App& app, GlobalOptions& g) {
  app.description("ckv: KV-cache eviction seen as output perturbation (CriticalKV analysis)");
  app.name("ckv");
  app.set_version_flag("--version", fmt::format("ckv {} ({})", ckv::kVersion, ckv::kGitCommit));
  app.require_subcommand(1);
  app.fallthrough();  // global flags (-q, --progress) are accepted after the subcommand too
  app.add_flag("-q,--quiet", g.quiet, "Quiet: no progress and no console summaries (outputs are written as usual; errors and notes on "
               "the data still print)");
  app.add_flag("--progress", g.progress, "Draw the progress bar even when stderr is not a terminal (off a terminal the default is one "
               "line a record)");
  register_info(app, g);
  register_forward(app, g);
  register_dump(app, g);
  register_mask(app, g);
  register_niah(app, g);
  register_ruler(app, g);
  register_merge(app, g);
  register_bound(app, g);
  register_check(app, g);
  register_eval(app, g);
  register_profile(app, g);
  apply_flag_rules(app);
}

}  // namespace ckv::app

#ifndef CKV_APP_NO_MAIN
int main(int argc, char** argv) {
  using namespace ckv::app;
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which is reported and
  // cleaned up like a full disk, instead of SIGXFSZ killing the process without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app;
  GlobalOptions g;
  g.argc = argc;
  g.argv = argv;
  build_app(app, g);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // An unknown subcommand or flag: named, with the closest known one, before any other
    // error of the line (CLI11 checks values, a missing file of `merge` say, before extras).
    const std::string explained = explain_unknown_name(app, argc, argv);
    return fail_with(2, "error", explained.empty() ? e.what() : explained);
  } catch (const ckv::UsageError& e) {
    return fail_with(2, "error", e.what());  // a flag's value: the command line must change
  } catch (const ckv::Error& e) {
    return fail_with(1, "error", e.what());
  } catch (const std::bad_alloc&) {
    return fail_with(1, "error", "out of memory");
  } catch (const std::exception& e) {
    return fail_with(3, "internal error", e.what());
  }
  return 0;
}
#endif

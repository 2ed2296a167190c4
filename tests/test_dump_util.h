#pragma once
// Helpers of the dump tests: run the ckv binary (CKV_BINARY) and compare dump files.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/h5.h"
#include "model/model.h"

namespace ckv::test {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `ckv args...` through the shell with stderr folded into stdout; `env` ("A=1 B=2")
// sets environment variables for that run only.
inline RunResult run_ckv(const std::string& args, const std::string& env = "") {
  const std::string cmd =
      (env.empty() ? "" : "env " + env + " ") + std::string(CKV_BINARY) + " " + args + " 2>&1";
  RunResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A fresh scratch directory named after the running test.
inline fs::path scratch_dir(const std::string& prefix) {
  const fs::path dir = fs::temp_directory_path() /
                       (prefix + "_" + std::to_string(::getpid()) + "_" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// The default model, or "" when it is not installed (tests then skip).
inline std::string default_model_or_empty() {
  const fs::path p = default_model_path();
  return fs::exists(p) ? p.string() : std::string();
}

// Every attribute (as text) and dataset (as doubles) under a group, recursively, keyed by
// path: what "the same dump" means, ignoring HDF5's physical layout.
inline void collect(const h5::Group& g, const std::string& prefix,
                    std::map<std::string, std::string>& attrs,
                    std::map<std::string, std::vector<double>>& data) {
  for (const std::string& name : g.attr_names()) {
    std::string value = "?";
    try {
      value = g.attr_string(name);
    } catch (const std::exception&) {
      try {
        value = nlohmann::json(g.attr_ints(name)).dump();
      } catch (const std::exception&) {
        try {
          value = nlohmann::json(g.attr_doubles(name)).dump();
        } catch (const std::exception&) {
          try { value = nlohmann::json(g.attr_strings(name)).dump(); } catch (const std::exception&) {}
        }
      }
    }
    attrs[prefix + "@" + name] = value;
  }
  for (const std::string& child : g.children()) {
    if (g.is_group(child)) collect(g.open_group(child), prefix + "/" + child, attrs, data);
    else data[prefix + "/" + child] = g.open_dataset(child).read<double>();
  }
}

}  // namespace ckv::test

#pragma once
// What the fuzz targets that run ckv's own command line share: a private directory on a
// tmpfs for the files a command reads and writes, and a runner that builds the same
// CLI::App as `ckv` (main.cpp's build_app) and parses argv, which runs the subcommand.
//
// A run may end in exactly the ways main() turns into one `ckv: error:` line: a
// CLI::ParseError (flags) or a ckv::Error (input, format, I/O). Anything else (another
// exception, a signal, a sanitizer report) propagates and is a finding.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <hdf5.h>

#include "common.h"
#include "core/error.h"

namespace ckv::fuzz {

namespace fs = std::filesystem;

// The repository (test data, tiny models, fuzz/corpus/templates).
inline fs::path source_dir() { return CKV_FUZZ_SOURCE_DIR; }

// The tiny llama of tests/data (60 KB GGUF, no tokenizer): commands that need a model load
// it in well under a millisecond.
inline fs::path tiny_model() { return source_dir() / "tests/data/loaders/tiny_llama.gguf"; }

// One directory per process under /dev/shm (else $TMPDIR), removed at exit: no disk I/O,
// and parallel fuzzing jobs (-jobs=N) do not share files.
inline const fs::path& work_dir() {
  static const fs::path dir = [] {
    std::string base = fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path().string();
    std::string pattern = base + "/ckv-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("ckv fuzz: mkdtemp");
      std::abort();
    }
    std::atexit([] { std::error_code ec; fs::remove_all(work_dir(), ec); });
    return fs::path(pattern);
  }();
  return dir;
}

inline fs::path write_file(const std::string& name, const uint8_t* data, size_t size) {
  const fs::path p = work_dir() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "ckv fuzz: cannot write %s\n", p.c_str());
    std::abort();
  }
  return p;
}

inline fs::path write_file(const std::string& name, std::string_view text) {
  return write_file(name, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// Removes what a previous run left in the work directory except `keep` (so --resume and
// "output exists" paths do not depend on the order of inputs).
inline void clean_work_dir(const std::vector<std::string>& keep = {}) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(work_dir(), ec)) {
    bool kept = false;
    for (const std::string& k : keep) kept = kept || e.path().filename() == k;
    if (!kept) fs::remove_all(e.path(), ec);
  }
}

// Commands print their results on stdout; the fuzzer's own reports go to stderr.
inline void silence_stdout() {
  if (std::freopen("/dev/null", "w", stdout) == nullptr) std::abort();
}

// Every HDF5 object a command opened must be closed when it returns, failed or not: a
// leaked file handle would keep the file open into the next input. A finding (abort): the
// HDF5 targets suppress leaks inside libhdf5 (scripts/fuzz.sh), so this is how a handle
// ckv forgets shows.
inline void check_no_open_h5_objects(const char* after) {
  const ssize_t open = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open > 0) {
    std::fprintf(stderr, "ckv fuzz: %zd HDF5 objects still open after %s\n", open, after);
    std::abort();
  }
}

// Parses `args` (without argv[0]) with ckv's command line, which runs the subcommand.
// Returns the exit status main() would give: 0, 1 (ckv::Error) or 2 (flags).
inline int run_cli(const std::vector<std::string>& args) {
  std::vector<std::string> words{"ckv"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  CLI::App app;
  app::GlobalOptions g;
  g.argc = static_cast<int>(words.size());
  g.argv = argv.data();
  app::build_app(app, g);
  int status = 0;
  try {
    app.parse(g.argc, argv.data());
  } catch (const CLI::ParseError&) {
    status = 2;
  } catch (const ckv::Error&) {
    status = 1;
  }
  std::fflush(stdout);
  return status;
}

}  // namespace ckv::fuzz

#pragma once
// What the hostile-input tests (test_hostile_inputs.cpp, test_hostile_hdf5.cpp) share: the
// tiny model, a token-id file, and the check that a failure is one "ckv: error:" line.
#include <filesystem>
#include <string>

#include "test_dump_util.h"
#include "test_util.h"

namespace ckv::test {

// 2 layers, 4 heads, 2 KV heads, context 256
inline const std::string kTiny = (kTestData / "models" / "tiny_llama_gqa").string();

inline void expect_one_error_line(const RunResult& r, int exit_code, const std::string& needle) {
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  EXPECT_EQ(r.output.rfind("ckv: error: ", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not exactly one line: " << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.output;
}

// n token ids below 200 in DIR/ids.txt; returns its path.
inline std::string tokens_file(const fs::path& dir, int n) {
  std::string t;
  for (int i = 0; i < n; ++i) t += std::to_string((i * 7 + 3) % 200) + " ";
  write_text(dir / "ids.txt", t);
  return (dir / "ids.txt").string();
}

}  // namespace ckv::test

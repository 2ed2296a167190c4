// Provenance: the command line survives a real shell, the time is ISO-8601 UTC, and every
// field reaches the HDF5 attributes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "ckv/version.h"
#include "core/error.h"
#include "output/provenance.h"
#include "io/h5.h"
#include "model/config.h"

namespace fs = std::filesystem;

namespace {
const std::vector<const char*> kArgs = {"ckv", "dump",         "--prompt", "it's a \"test\" $HOME",
                                        "",    "--layers=0-3", "a b",      "tab\there"};
}

TEST(Provenance, CommandLineQuoting) {
  EXPECT_EQ(ckv::shell_quote("--layers=0-3"), "--layers=0-3");
  EXPECT_EQ(ckv::shell_quote(""), "''");
  EXPECT_EQ(ckv::shell_quote("a b"), "'a b'");
  EXPECT_EQ(ckv::shell_quote("it's"), "'it'\"'\"'s'");
  // The joined line, run through /bin/sh, gives back exactly the original arguments.
  const std::string line = ckv::join_command_line(static_cast<int>(kArgs.size()), kArgs.data());
  std::string out;
  if (FILE* pipe = ::popen(("printf '[%s]' " + line).c_str(), "r")) {
    char buffer[512];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
    ::pclose(pipe);
  }
  std::string expected;
  for (const char* a : kArgs) expected += std::string("[") + a + "]";
  EXPECT_EQ(out, expected);
}

TEST(Provenance, CaptureAndJson) {
  ckv::Provenance p =
      ckv::Provenance::capture(static_cast<int>(kArgs.size()), kArgs.data(), 4, "cpu");
  EXPECT_EQ(p.ckv_version, ckv::kVersion);
  EXPECT_EQ(p.git_commit, ckv::kGitCommit);
  EXPECT_TRUE(std::regex_match(p.created, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << p.created;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(p.hostname, host);
  EXPECT_FALSE(p.user.empty());
  p.set("model_sha256", "b179c952");
  p.set("n_layers", 30);
  p.set("model_sha256", "replaced");
  EXPECT_THROW(p.set("threads", 1), ckv::Error);
  const auto j = p.to_json();
  EXPECT_EQ(j["threads"], 4);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["model_sha256"], "replaced");
  EXPECT_EQ(j.size(), 10u);
  EXPECT_EQ(std::prev(j.end()).key(), "n_layers");  // insertion order kept
}

// Outputs of a model with sliding-window layers name them (issue 27); other models' carry no
// such keys and print no note.
TEST(Provenance, SlidingLayersAreNamed) {
  ckv::ModelConfig c;
  c.n_layer = 4;
  ckv::Provenance plain;
  EXPECT_EQ(ckv::set_sliding_layers(plain, c), "");
  EXPECT_EQ(plain.find("sliding_layers"), nullptr);
  c.sliding_window = 512;
  c.sliding_layers = {1, 1, 0, 1};
  ckv::Provenance p;
  const std::string note = ckv::set_sliding_layers(p, c);
  EXPECT_NE(note.find("3 of 4 layers attend within a sliding window of 512 keys"), std::string::npos) << note;
  ASSERT_NE(p.find("sliding_layers"), nullptr);
  EXPECT_EQ(*p.find("sliding_layers"), nlohmann::json({0, 1, 3}));
  EXPECT_EQ(*p.find("sliding_window"), 512);
}

TEST(Provenance, WriteAttrs) {
  const fs::path path =
      fs::temp_directory_path() / ("ckv_test_provenance_" + std::to_string(::getpid()) + ".h5");
  ckv::Provenance p =
      ckv::Provenance::capture(static_cast<int>(kArgs.size()), kArgs.data(), 2, "cuda:0");
  p.set("model_path", "models/x.gguf");
  p.set("rope_theta", 10000.0);
  p.set("tied", true);
  p.set("shard", {{"index", 1}, {"count", 4}});
  {
    ckv::h5::File file = ckv::h5::File::create(path);
    p.write_attrs(file);
    file.close();
  }
  const ckv::h5::File file = ckv::h5::File::open_read(path);
  EXPECT_EQ(file.attr_string("command_line"), p.command_line);
  EXPECT_EQ(file.attr_string("created"), p.created);
  EXPECT_EQ(file.attr_int("threads"), 2);
  EXPECT_EQ(file.attr_string("device"), "cuda:0");
  EXPECT_EQ(file.attr_string("ckv_version"), ckv::kVersion);
  EXPECT_EQ(file.attr_string("model_path"), "models/x.gguf");
  EXPECT_EQ(file.attr_double("rope_theta"), 10000.0);
  EXPECT_TRUE(file.attr_bool("tied"));
  EXPECT_EQ(file.attr_json("shard")["count"], 4);
  fs::remove(path);
}

// SHA-256 against the NIST test vectors and against coreutils' sha256sum.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/sha256.h"

namespace fs = std::filesystem;

TEST(Sha256, NistVectors) {
  EXPECT_EQ(ckv::sha256_hex(std::string_view("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(ckv::sha256_hex(std::string_view("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(
      ckv::sha256_hex(std::string_view("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  ckv::Sha256 hash;
  hash.update(std::string_view("ab"));
  hash.update(std::string_view(""));
  hash.update(std::string_view("c"));
  EXPECT_EQ(ckv::to_hex(hash.finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, FileMatchesSha256sum) {
  const fs::path path =
      fs::temp_directory_path() / ("ckv_test_sha256_" + std::to_string(::getpid()) + ".bin");
  {
    // 9 MiB + 7 bytes: several read blocks and a ragged end.
    std::ofstream out(path, std::ios::binary);
    for (size_t i = 0; i < (size_t{9} << 20) + 7; ++i) out.put(static_cast<char>((i * 131) >> 3));
  }
  std::string expected;
  if (FILE* pipe = ::popen(("sha256sum " + path.string()).c_str(), "r")) {
    char buffer[65] = {};
    if (std::fread(buffer, 1, 64, pipe) == 64) expected = buffer;
    ::pclose(pipe);
  }
  if (expected.empty()) {
    fs::remove(path);
    GTEST_SKIP() << "sha256sum not available";
  }
  EXPECT_EQ(ckv::sha256_file(path), expected);
  fs::remove(path);
  EXPECT_THROW(ckv::sha256_file(path), ckv::IoError);
}

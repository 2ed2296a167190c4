// Output safety: the final name appears only at commit, existing outputs are refused
// without --force / --resume, and an interrupted run leaves a partial file to resume.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/atomic_file.h"
#include "core/error.h"

namespace fs = std::filesystem;
using ckv::AtomicOutput;

namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ckv_test_atomic_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}
std::string read(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_F(AtomicFileTest, FinalNameOnlyAtCommit) {
  const fs::path final_path = dir_ / "run.h5";
  AtomicOutput out(final_path);
  EXPECT_EQ(out.partial_path(), dir_ / ".run.h5.partial");
  EXPECT_FALSE(out.continuing());
  write(out.partial_path(), "data");
  EXPECT_FALSE(fs::exists(final_path));
  out.commit();
  EXPECT_TRUE(out.committed());
  EXPECT_EQ(read(final_path), "data");
  EXPECT_FALSE(fs::exists(out.partial_path()));
}

TEST_F(AtomicFileTest, DestructionWithoutCommitKeepsPartialOnly) {
  const fs::path final_path = dir_ / "run.h5";
  {
    AtomicOutput out(final_path);
    write(out.partial_path(), "half");
  }
  EXPECT_FALSE(fs::exists(final_path));
  EXPECT_TRUE(fs::exists(AtomicOutput::partial_path_for(final_path)));
  // A new run without flags refuses to throw the interrupted one away.
  try {
    AtomicOutput again(final_path);
    FAIL() << "no error";
  } catch (const ckv::InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--resume"), std::string::npos) << message;
    EXPECT_NE(message.find(".run.h5.partial"), std::string::npos) << message;
  }
  AtomicOutput resumed(final_path, {.resume = true});
  EXPECT_TRUE(resumed.continuing());
  EXPECT_EQ(read(resumed.partial_path()), "half");
  write(resumed.partial_path(), "whole");
  resumed.commit();
  EXPECT_EQ(read(final_path), "whole");
}

TEST_F(AtomicFileTest, ExistingOutputNeedsForceOrResume) {
  const fs::path final_path = dir_ / "run.h5";
  write(final_path, "old");
  try {
    AtomicOutput out(final_path);
    FAIL() << "no error";
  } catch (const ckv::InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(final_path.string() + ": output exists", 0), 0u) << message;
    EXPECT_NE(message.find("--force"), std::string::npos) << message;
  }
  {
    // --force: the old output stays until the new one replaces it.
    write(AtomicOutput::partial_path_for(final_path), "stale");
    AtomicOutput out(final_path, {.force = true});
    EXPECT_FALSE(out.continuing());
    EXPECT_FALSE(fs::exists(out.partial_path()));
    EXPECT_EQ(read(final_path), "old");
    write(out.partial_path(), "new");
    out.commit();
    EXPECT_EQ(read(final_path), "new");
  }
  // --resume of a complete output continues it under the partial name.
  AtomicOutput out(final_path, {.resume = true});
  EXPECT_TRUE(out.continuing());
  EXPECT_FALSE(fs::exists(final_path));
  EXPECT_EQ(read(out.partial_path()), "new");
}

TEST_F(AtomicFileTest, BadDirectories) {
  EXPECT_THROW((void)AtomicOutput(dir_ / "missing" / "run.h5"), ckv::IoError);
  EXPECT_THROW((void)AtomicOutput(dir_), ckv::InputError);  // a directory, not a file
  if (::geteuid() != 0) {                                   // root writes anywhere
    fs::permissions(dir_, fs::perms::owner_write, fs::perm_options::remove);
    EXPECT_THROW((void)AtomicOutput(dir_ / "run.h5"), ckv::IoError);
  }
  AtomicOutput out(dir_ / "never.h5");
  EXPECT_THROW(out.commit(), ckv::IoError);  // nothing was written
}

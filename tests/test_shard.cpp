// Shard assignment (lib/core/shard.h): every record in exactly one shard, balanced, and
// the --shard / Slurm job-array parsing.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/shard.h"
#include "output/batch_output.h"
#include "data/records.h"

namespace ckv {
namespace {

TEST(Shard, EveryRecordInExactlyOneShard) {
  for (int64_t n : {1, 2, 3, 7, 16}) {
    for (int64_t total : {0, 1, 5, 16, 101}) {
      std::map<int64_t, int> owners;
      int64_t sizes = 0;
      for (int64_t i = 0; i < n; ++i) {
        const Shard s{i, n};
        int64_t mine = 0;
        for (int64_t r = 0; r < total; ++r)
          if (s.contains(r)) {
            ++owners[r];
            ++mine;
          }
        EXPECT_EQ(mine, s.size_of(total)) << i << "/" << n << " of " << total;
        // Balanced to within one record.
        EXPECT_LE(mine, (total + n - 1) / n);
        EXPECT_GE(mine, total / n);
        sizes += mine;
      }
      EXPECT_EQ(sizes, total);
      EXPECT_EQ(static_cast<int64_t>(owners.size()), total);
      for (const auto& [r, c] : owners) EXPECT_EQ(c, 1) << "record " << r << " with N=" << n;
    }
  }
  // The documented rule: index mod N.
  EXPECT_TRUE((Shard{2, 4}.contains(6)));
  EXPECT_FALSE((Shard{2, 4}.contains(7)));
}

TEST(Shard, ParsesFlag) {
  EXPECT_EQ(Shard::parse("0/1"), (Shard{0, 1}));
  EXPECT_EQ(Shard::parse("3/8"), (Shard{3, 8}));
  EXPECT_EQ(Shard::parse("3/8").to_string(), "3/8");
  for (const char* bad : {"", "3", "8/8", "-1/4", "1/0", "a/4", "1/4x", "1//4", " 1/4"})
    EXPECT_THROW(Shard::parse(bad), InputError) << bad;
  try {
    Shard::parse("5/4");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--shard"), std::string::npos) << e.what();
  }
}

std::optional<Shard> env(std::map<std::string, std::string> vars) {
  return Shard::from_env([vars](const char* name) -> const char* {
    static thread_local std::string value;
    auto it = vars.find(name);
    if (it == vars.end()) return nullptr;
    value = it->second;
    return value.c_str();
  });
}

TEST(Shard, FromSlurmEnvironment) {
  EXPECT_FALSE(env({}).has_value());
  EXPECT_EQ(env({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "8"}}), (Shard{3, 8}));
  // --array=1-10: ids start at 1.
  EXPECT_EQ(env({{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "10"}, {"SLURM_ARRAY_TASK_MIN", "1"}}),
            (Shard{0, 10}));
  EXPECT_EQ(env({{"SLURM_ARRAY_TASK_ID", "10"}, {"SLURM_ARRAY_TASK_COUNT", "10"}, {"SLURM_ARRAY_TASK_MIN", "1"}}),
            (Shard{9, 10}));
  // --array=0-8:2 -> ids 0,2,4,6,8: 5 tasks.
  EXPECT_EQ(env({{"SLURM_ARRAY_TASK_ID", "6"}, {"SLURM_ARRAY_TASK_COUNT", "5"}, {"SLURM_ARRAY_TASK_STEP", "2"}}),
            (Shard{3, 5}));
  EXPECT_THROW(env({{"SLURM_ARRAY_TASK_ID", "3"}}), InputError);  // no count
  EXPECT_THROW(env({{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_COUNT", "8"}}), InputError);
  EXPECT_THROW(env({{"SLURM_ARRAY_TASK_ID", "8"}, {"SLURM_ARRAY_TASK_COUNT", "8"}}), InputError);
  EXPECT_THROW(env({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "8"}, {"SLURM_ARRAY_TASK_MIN", "1"}}),
               InputError);
  EXPECT_THROW(env({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "0"}}), InputError);
}

TEST(Shard, FlagWinsOverEnvironment) {
  ::setenv("SLURM_ARRAY_TASK_ID", "1", 1);
  ::setenv("SLURM_ARRAY_TASK_COUNT", "4", 1);
  EXPECT_EQ(Shard::resolve(""), (Shard{1, 4}));
  EXPECT_EQ(Shard::resolve("2/3"), (Shard{2, 3}));
  ::unsetenv("SLURM_ARRAY_TASK_ID");
  ::unsetenv("SLURM_ARRAY_TASK_COUNT");
  EXPECT_EQ(Shard::resolve(""), (Shard{0, 1}));
}

// input_records, what merge checks completeness against, is the number of records
// RecordReader numbers (blank lines are not records).
TEST(Shard, InputRecordsCountsWhatTheReaderNumbers) {
  const auto path = std::filesystem::temp_directory_path() / "ckv_shard_count.jsonl";
  std::ofstream(path) << "{\"context\": \"a\"}\n\n  \t\n{\"context\": \"b\"}\r\n{\"context\": \"c\"}";
  RecordReader reader(path);
  int64_t last = -1;
  while (std::optional<InputRecord> r = reader.next()) last = r->index;
  EXPECT_EQ(last, 2);
  EXPECT_EQ(count_input_records(path), last + 1);
  std::filesystem::remove(path);
  EXPECT_THROW(count_input_records(path), InputError);
}

}  // namespace
}  // namespace ckv

#pragma once
// Which records of a batch one shard of a job array handles.
//
// Assignment rule: the record with 0-based batch index i (its position among the records
// of the input, as RecordReader numbers them) belongs to shard i mod N. Round robin on the
// index rather than a hash of the id: it needs no hash function (nothing to keep stable
// across machines and standard libraries), balances the shards to within one record, and
// interleaves inputs sorted by length so every shard gets a similar token count. The input
// file's sha256 and record count are stored with each shard, so `ckv merge` can tell when
// shards were cut from different inputs (which would make the indices mean other records).
//
// The shard comes from `--shard i/N` (0 <= i < N) or, when that flag is absent, from Slurm's
// job-array variables: index = (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN) / step, with
// SLURM_ARRAY_TASK_MIN = 0 and SLURM_ARRAY_TASK_STEP = 1 when unset, and
// N = SLURM_ARRAY_TASK_COUNT. So `--array=0-9` and `--array=1-10` both give shards 0..9 of 10.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ckv {

struct Shard {
  int64_t index = 0;  // i
  int64_t count = 1;  // N

  bool contains(int64_t record_index) const { return record_index % count == index; }
  // How many of the records 0..total-1 this shard holds.
  int64_t size_of(int64_t total) const;
  bool is_whole() const { return count == 1; }
  std::string to_string() const;  // "i/N"
  bool operator==(const Shard&) const = default;

  // "i/N". Throws InputError "<flag>: ..." for anything else or i outside [0, N).
  static Shard parse(std::string_view spec, std::string_view flag = "--shard");
  // From SLURM_ARRAY_TASK_{ID,COUNT,MIN,STEP} read through `getenv` (for tests); nullopt
  // when SLURM_ARRAY_TASK_ID is unset. Throws InputError naming the variable when one is
  // malformed or the id lies outside the array.
  static std::optional<Shard> from_env(const std::function<const char*(const char*)>& getenv);
  // --shard if given (non-empty), else the Slurm variables of this process, else 0/1.
  static Shard resolve(std::string_view flag_value);
};

}  // namespace ckv

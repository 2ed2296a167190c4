#pragma once
// Where a `ckv dump` run's time went (--timing-json), for bench/bench_dump.sh: the forward
// pass on its thread, the writer on the main thread, and the HDF5 calls inside the writer
// (h5::write_stats()). The HDF5 write path, to compare with `dd conv=fdatasync`, is
// h5_write + h5_flush (which includes closing the file) + commit (the fsync).
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/h5.h"

namespace ckv {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seconds. forward and writer_busy overlap: they run on two threads.
struct DumpTiming {
  double forward = 0;          // forward.run, on the forward thread
  double forward_stalled = 0;  // the forward pass waiting for room in the queue
  double writer_busy = 0;      // writing items: nu, float16 conversion, HDF5
  double writer_idle = 0;      // the writer waiting for the forward pass
  double nu = 0;               // value_norms, inside writer_busy
  double close = 0;            // closing the HDF5 file (metadata flush)
  double commit = 0;           // fsync and rename (AtomicOutput::commit)
};

struct DumpTotals {
  int64_t records = 0, tokens = 0;
  double records_seconds = 0;  // the records' own wall time
  double wall_seconds = 0;     // the whole command, model load included
};

inline void write_dump_timing(const std::string& path, const DumpTiming& t, const DumpTotals& totals,
                              const std::filesystem::path& out) {
  const h5::WriteStats& h5 = h5::write_stats();
  const nlohmann::json j = {
      {"records", totals.records},            {"tokens", totals.tokens},
      {"wall_seconds", totals.wall_seconds},  {"records_seconds", totals.records_seconds},
      {"forward_seconds", t.forward},         {"forward_stalled_seconds", t.forward_stalled},
      {"writer_busy_seconds", t.writer_busy}, {"writer_idle_seconds", t.writer_idle},
      {"nu_seconds", t.nu},                   {"h5_convert_seconds", h5.convert_seconds},
      {"h5_write_seconds", h5.write_seconds}, {"h5_flush_seconds", h5.flush_seconds},
      {"h5_bytes", h5.bytes},                 {"close_seconds", t.close},
      {"commit_seconds", t.commit},           {"file_bytes", std::filesystem::file_size(out)}};
  std::ofstream f(path);
  f << j.dump(2) << '\n';
  if (!f) fail<IoError>("--timing-json {}: cannot write", path);
}

}  // namespace ckv

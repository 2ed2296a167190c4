#pragma once
// What the record-by-record batch outputs (`ckv dump`, `ckv bound`, `ckv check`, `ckv mask`)
// share for sharding, --resume and `ckv merge`:
//
//   /                 attrs: schema, schema_version, provenance incl. model_sha256,
//                     input_sha256, shard ("i/N"), shard_index, shard_count, input_records,
//                     settings (JSON), resumed (JSON list, after a --resume)
//   /records/<id>     attrs: index (0-based position in the input), ..., complete (written
//                     last, after a flush of every dataset of the record)
//
// A record group without `complete` is unfinished (the run was killed inside it): --resume
// rewrites it whole and `ckv merge` passes over it.
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/shard.h"
#include "io/h5.h"

namespace ckv {

struct Provenance;
class AtomicOutput;

// Non-blank lines of a JSONL batch: the records RecordReader numbers 0..n-1.
int64_t count_input_records(const std::filesystem::path& jsonl);

// Stores the shard identity and the size of the whole input (what `ckv merge` checks).
void set_shard_provenance(Provenance& provenance, const Shard& shard, int64_t input_records);

// FormatError naming the file unless its root says schema=`schema`, schema_version=`version`
// ("<file>: not a <what> (no schema=...)", "<file>: <schema> schema version 2, this ckv reads
// version 1"). `what` describes the file: "ckv dump", "ckv mask output".
void check_schema(const h5::File& file, std::string_view schema, int64_t version,
                  std::string_view what);

// What a --resume run must find unchanged in the file it continues.
struct ResumeExpectation {
  std::string schema;        // "ckv.bound"
  int64_t schema_version = 0;
  std::string kind;          // root attribute `kind` ("bound", "check"); empty: not checked
  std::string model_sha256;
  std::string input_sha256;
  nlohmann::json settings;   // the root attribute `settings`
  std::string command_line;  // compared without the per-shard flags (shard_invariant_command)
  Shard shard;
};
// Throws FormatError for another schema or version (check_schema), InputError (one line
// naming the file and the first difference) for another kind, model, input, settings,
// command or shard.
void check_resumable_output(const h5::File& file, const ResumeExpectation& expected);
// The same for the file a --resume of `out` would continue, when there is one: call it before
// AtomicOutput moves a finished output back to the partial name, so that a refused --resume
// leaves the file where it was, unmodified.
//   * a partial file: its root (schema, model, input, settings, command, shard); its records
//     are sorted out under the lock by prepare_partial_for_resume. One without a header or
//     with nothing readable is not checked: the run starts it over;
//   * else the finished `out`: checked whole with every dataset read through
//     (validate_output with read_data, output/validate.h), so damaged data is refused here.
void check_output_to_resume(const std::filesystem::path& out, const ResumeExpectation& expected);
// True for a file that holds nothing a --resume could continue: empty, not (yet) an HDF5
// file, or an HDF5 file with no root attribute and no object (a run killed before the first
// flush of its header, e.g. inside the first record of `ckv bound`).
bool has_no_header(const std::filesystem::path& path);
// After AtomicOutput (under its lock), when it continues a partial file: makes that file
// one the run can continue in place, whatever an interrupted or failed run left in it.
//   * no header (has_no_header), or nothing of it readable (a full disk can leave even the
//     root unreadable): started over (AtomicOutput::restart), with a note on stderr;
//   * every record group readable, every complete record valid with its data read through
//     (salvage_records, output/validate.h): continued in place;
//   * else (a full disk left record groups unreadable or data damaged): rebuilt, with a
//     note, as a fresh file holding the root, /model and the intact complete records, which
//     replaces the partial file; IoError (the partial file unchanged) when that cannot be
//     written, e.g. on a disk still full.
// A finished output moved back by AtomicOutput was checked whole by check_output_to_resume.
void prepare_partial_for_resume(AtomicOutput& out);
// The same (the name the subcommands call).
void restart_headerless(AtomicOutput& out);
// Appends {command_line, at} to the root's "resumed" list.
void note_resumed(h5::File& file, const std::string& command_line);

// Ids of the record groups whose `complete` attribute is true. A group that cannot be read
// (a full disk flushed its link but not its object header) is not complete.
std::set<std::string> complete_record_ids(const h5::File& file);
// Complete record ids ordered by their `index` attribute (ties and files without it: by
// id): the input order, whatever order the records were written or merged in.
std::vector<std::string> complete_records_in_input_order(const h5::File& file);

// /records/<id>, first removing an unfinished group of that id; sets `index`.
h5::Group begin_record_group(h5::File& file, const std::string& id, int64_t index);
// Flushes the record's datasets, then writes `complete` and flushes again.
void finish_record_group(h5::File& file, h5::Group& record);

// The root attributes as JSON (strings, numbers, bools and their arrays as such), except
// those named in `skip`: the provenance block of a summary regenerated from the file.
nlohmann::ordered_json attrs_as_json(const h5::Object& object, const std::set<std::string>& skip = {});

}  // namespace ckv

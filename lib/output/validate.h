#pragma once
// Whole-file checks of ckv's HDF5 outputs against their schemas: ckv.dump (docs/DUMP.md),
// ckv.bound (bound and check, docs/BOUND.md) and ckv.mask (docs/MASK.md), whether written
// by one run, by a shard (--shard i/N) or by `ckv merge`.
//
// What a reader of the file relies on is checked: the root attributes (schema, version,
// provenance and settings as the merge and --resume compare them, the dump's /model
// dimensions and selections), /records being a group of groups, and in every complete
// record each attribute, each dataset's element type and shape against the attributes
// that describe it, and the contents of the small index datasets and attributes (token
// ids, attention rows, evaluation rows, JSON spans). The large float tensors are opened,
// and read through only with ValidateOptions::read_data. Unfinished record groups (no `complete`) are only required to be groups:
// --resume rewrites them and `ckv merge` passes over them.
//
// Callers: `ckv merge` (every shard, before anything is written), --resume (the file it is
// about to continue, before it is moved or modified), `ckv info`, and the fuzz targets.
#include <cstdint>
#include <string>
#include <vector>

#include "io/h5.h"

namespace ckv {

struct OutputSummary {
  std::string schema;     // "ckv.dump", "ckv.bound", "ckv.mask"
  std::string kind;       // ckv.bound: "bound" or "check"; else empty
  int64_t records = 0;    // record groups
  int64_t complete = 0;   // of which complete
};

struct ValidateOptions {
  // Also read every dataset of /model and of every complete record in full (one index of
  // its first dimension at a time): a damaged chunk (a flipped byte in compressed data:
  // "inflate() failed", a chunk index pointing past the end) is found here, not by the
  // reader that needs it. What --resume continues and `ckv info` checks.
  bool read_data = false;
};

// Throws FormatError "<file>:<object>: <what is wrong>" for the first problem found (an
// UnsupportedError of the HDF5 layer, e.g. an element type ckv does not read, is reported
// as a FormatError too). A file of another schema, or another version, is a FormatError.
OutputSummary validate_output(const h5::File& file, ValidateOptions options = {});

// What --resume can keep of a partial file a failed run left (a full disk can leave record
// groups unreadable, or complete ones whose data no longer reads): the root checked as
// validate_output checks it (FormatError when it fails), then every record group sorted
// into intact (complete, every check passed, every dataset read through), unfinished (no
// `complete`: rewritten anyway) and damaged (the message of the first problem).
struct RecordSalvage {
  OutputSummary summary;               // records: groups listed; complete: the intact ones
  std::vector<std::string> intact;     // record ids
  std::vector<std::string> unfinished; // record ids
  std::vector<std::string> damaged;    // one message each
};
RecordSalvage salvage_records(const h5::File& file);

}  // namespace ckv

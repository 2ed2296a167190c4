#pragma once
// What `ckv info FILE.h5` prints for every ckv output, checked whole first (validate_output):
// a dump's provenance, model, what was recorded, its records and their shapes and the stored
// size per tensor kind; for the outputs of bound, check, mask and eval, single runs, shards
// or merges, their provenance, settings, records, the shapes of one record and the size per
// dataset kind.
#include <string>

namespace ckv {

// The description of the output file `path`, as text or (`json`) as a JSON document, each
// ending in a newline. Throws FormatError for a file that is not a valid ckv output.
std::string describe_output_file(const std::string& path, bool json);

}  // namespace ckv

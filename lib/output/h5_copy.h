#pragma once
// Copies of HDF5 objects between ckv's files through the checked reads and writes of the h5
// layer (not H5Ocopy: HDF5 1.10 crashes inside it when a write fails, e.g. on a full disk).
// Used by `ckv merge` (records of the shards into the merged file) and by --resume (the
// intact records of a damaged partial file into a fresh one, batch_output.h).
#include <string>

#include "io/h5.h"

namespace ckv {

// Every attribute of `src` onto `dst` whatever its type (replacing one of the same name).
// FormatError for an attribute that cannot be read or claims an implausible size.
void copy_attrs(const h5::Object& src, h5::Object& dst);

// A group with its attributes, datasets and subgroups, recursively, into `dst`.
void copy_group(const h5::Group& src, h5::Group dst);

// The group at `path` ("/model", "/records/x") of `src` to the same path of `dst`.
void copy_object(const h5::File& src, const std::string& path, h5::File& dst);

}  // namespace ckv

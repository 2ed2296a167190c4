#pragma once
// Inputs are regular files only. Every file the CLI reads (models, JSONL, token files,
// selection files, HeadKV profiles, DuoAttention patterns, HDF5 shards and outputs) goes
// through these before it is read, so that a FIFO, a device (/dev/zero), a socket or a
// directory given as an input is refused with one line instead of hanging, reading
// forever or failing inside a stream library. Symbolic links are followed (an input
// link is what it points to).
//
//   require_regular_file(path, "the HeadKV profile");            // then open it by name
//   const std::string text = read_regular_file(path, "the DuoAttention pattern");
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace ckv {

// IoError "<path>: cannot read <what>: No such file or directory" (or the errno of the
// stat); InputError "<path>: <what> is a FIFO, not a regular file" for anything but a
// regular file.
void require_regular_file(const std::filesystem::path& path, std::string_view what);

// The whole file, after the checks above made on the open descriptor (opened without
// blocking, so a FIFO is refused rather than waited on). InputError when it is larger than
// `max_bytes`; IoError for a read error.
std::string read_regular_file(const std::filesystem::path& path, std::string_view what,
                              size_t max_bytes = size_t{1} << 30);

// InputError "<where>: a raw NUL byte at offset N, not valid JSON" when `json_text` holds
// one: JSON never does, and nlohmann's parser takes a NUL for the end of its input, so text
// after it (another object, garbage) would pass unseen.
void refuse_nul_in_json(std::string_view json_text, std::string_view where);

}  // namespace ckv

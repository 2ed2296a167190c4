#pragma once
// A small RAII layer over the HDF5 C API (1.10) for every file ckv writes and reads back:
// dumps, bounds, masks, merged shards. The files must open in h5py with no ckv code, so
// only plain HDF5 features are used: groups, chunked datasets with the built-in gzip and
// shuffle filters, and scalar or 1-D attributes (strings are variable-length UTF-8, as h5py
// writes them; bools are h5py's int8 enum FALSE/TRUE; float16 is IEEE binary16, which
// h5py reads as numpy float16).
//
//   auto file = h5::File::create(out.partial_path());
//   auto layer = file.create_group("records/r0/layers/3");
//   auto q = layer.create_dataset("q", h5::DType::F16, {n_head, seq, d_head},
//                                 {.chunk = h5::chunk_by_first_dim(shape, 2)});
//   q.set_dims({"head", "pos", "d_head"});
//   for (int64_t h = 0; h < n_head; ++h) q.write_index(h, head_rows);  // [seq, d_head]
//   layer.set_attr_bool("complete", true);
//   file.close();
//
// Errors: every HDF5 call is checked. A failure throws one line naming the file and the
// object path (`out.h5:/records/r0/layers/3/q: ...`) with HDF5's own reason appended:
// IoError for files that cannot be created, opened or written, FormatError for files that
// are not HDF5, are damaged, or lack an expected object or attribute, UnsupportedError for
// element types ckv does not read. HDF5's automatic error-stack printing is switched off.
//
// Interruption: files opened for writing keep metadata writes to flush() (see h5.cpp) and
// open_rw() claims whatever a killed run wrote, so a run killed between flushes resumes
// with its complete records intact. HDF5 updates metadata in place, so a kill inside a
// flush can still leave a file that fails to open or continue (always as a typed ckv
// error): --resume should then start the file over. tests/test_h5.cpp kills writers.
//
// Failures while writing: data goes to the file in the checked call that writes it
// (Dataset writes bypass HDF5's chunk cache and sieve buffer, which would otherwise hold it
// until the dataset is closed, in a destructor that cannot report errors), and metadata at
// flush() and close(). After a failed write or flush (a full disk) call abandon(), not
// close(): see there.
//
// Threads: HDF5 (Debian's build) is not thread-safe. Use these objects from one thread.
// Handles are reference counted by HDF5, so copies of a Group or Dataset are cheap and
// share the object; a File is closed when its last handle (including any open group or
// dataset in it) goes away, but File::close() flushes everything to disk at once.
#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ckv::h5 {

// Storage element types.
enum class DType { F32, F16, F64, I32, I64, U8 };
const char* dtype_name(DType t);  // "float32", "float16", ... (numpy names)
size_t dtype_size(DType t);       // bytes per element

// One HDF5 identifier. Copies share it (H5Iinc_ref); the last one closes it.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(const Handle& other);
  Handle& operator=(const Handle& other);
  Handle(Handle&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& other) noexcept;

  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  // Gives up ownership without closing.
  hid_t release() {
    const hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// A group or dataset (or the root group of a file): what attributes hang on.
class Object {
 public:
  hid_t id() const { return handle_.id(); }
  const std::string& file_name() const { return file_; }
  const std::string& path() const { return path_; }  // "/records/r0/layers/3/q"
  std::string where() const;                         // "out.h5:/records/r0/layers/3/q"

  // Attributes. Setting one that exists replaces it (type and size may change).
  bool has_attr(std::string_view name) const;
  std::vector<std::string> attr_names() const;
  void remove_attr(std::string_view name);
  void set_attr_string(std::string_view name, std::string_view value);
  void set_attr_int(std::string_view name, int64_t value);
  void set_attr_double(std::string_view name, double value);
  void set_attr_bool(std::string_view name, bool value);
  void set_attr_ints(std::string_view name, const std::vector<int64_t>& values);
  void set_attr_doubles(std::string_view name, const std::vector<double>& values);
  void set_attr_strings(std::string_view name, const std::vector<std::string>& values);
  // Stored as a string holding the JSON text (h5py: json.loads(obj.attrs[name])).
  void set_attr_json(std::string_view name, const nlohmann::json& value);

  // Getters throw FormatError naming the object when the attribute is missing or has an
  // incompatible type. Integers convert between widths; attr_double accepts integers.
  std::string attr_string(std::string_view name) const;
  int64_t attr_int(std::string_view name) const;
  double attr_double(std::string_view name) const;
  bool attr_bool(std::string_view name) const;  // h5py bool enum or any integer
  std::vector<int64_t> attr_ints(std::string_view name) const;
  std::vector<double> attr_doubles(std::string_view name) const;
  std::vector<std::string> attr_strings(std::string_view name) const;
  nlohmann::json attr_json(std::string_view name) const;

 protected:
  Object() = default;
  Object(Handle handle, std::string file, std::string path)
      : handle_(std::move(handle)), file_(std::move(file)), path_(std::move(path)) {}
  std::string child_path(std::string_view name) const;

  Handle handle_;
  std::string file_;
  std::string path_;
};

struct DatasetOptions {
  // Chunk shape (same rank as the dataset). Empty: contiguous storage, no filters allowed.
  // Chunk dimensions larger than the dataset's are clipped to it.
  std::vector<int64_t> chunk;
  int gzip_level = 0;    // 0: off; 1..9: deflate level
  bool shuffle = false;  // byte shuffle before gzip; helps float data compress
};

// The chunk shape that makes one index of the first dimension (one head) one chunk:
// [1, rest...]. When that chunk would exceed max_chunk_bytes the second dimension is cut
// (HDF5 caps chunks at 4 GiB, and gzip compresses a chunk in one buffer).
std::vector<int64_t> chunk_by_first_dim(const std::vector<int64_t>& shape, size_t element_bytes,
                                        size_t max_chunk_bytes = size_t{64} << 20);

class Dataset : public Object {
 public:
  Dataset() = default;
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  std::vector<int64_t> chunk_shape() const;  // empty when not chunked
  // How the dataset is stored (chunk shape, gzip level, shuffle), to create a copy of it.
  // UnsupportedError for filters ckv does not write.
  DatasetOptions options() const;

  // TransformerLens-style dimension names, stored as the string attribute "dims"
  // ("head pos d_head"). The count must equal the rank; names must not contain spaces.
  void set_dims(const std::vector<std::string>& names);
  std::vector<std::string> dims() const;

  // Writes the whole dataset from row-major data of numel() elements. T is float, double,
  // int32_t, int64_t or uint8_t; HDF5 converts to the storage type, except float16, which
  // ckv rounds itself (round to nearest even).
  template <typename T>
  void write(const std::vector<T>& data) {
    write_raw(data.data(), data.size(), {}, {});
  }
  // Writes the box [offset, offset + count) from row-major data of prod(count) elements.
  // Writes go to the file at once (no chunk cache): a box that covers part of a chunk
  // makes HDF5 read, and for compressed data decompress, that chunk again.
  template <typename T>
  void write_slab(const std::vector<int64_t>& offset, const std::vector<int64_t>& count,
                  const std::vector<T>& data) {
    write_raw(data.data(), data.size(), offset, count);
  }
  // Writes index i of the first dimension (one head): data holds prod(shape[1:]) elements.
  template <typename T>
  void write_index(int64_t i, const T* data, size_t n) {
    write_raw(data, n, index_offset(i), index_count());
  }
  template <typename T>
  void write_index(int64_t i, const std::vector<T>& data) {
    write_index(i, data.data(), data.size());
  }

  // Reads back into T (float, double, int32_t, int64_t, uint8_t), row-major.
  template <typename T>
  std::vector<T> read() const;
  template <typename T>
  std::vector<T> read_slab(const std::vector<int64_t>& offset,
                           const std::vector<int64_t>& count) const;
  template <typename T>
  std::vector<T> read_index(int64_t i) const {
    return read_slab<T>(index_offset(i), index_count());
  }

 private:
  friend class Group;
  Dataset(Handle handle, std::string file, std::string path);
  std::vector<int64_t> index_offset(int64_t i) const;
  std::vector<int64_t> index_count() const;
  template <typename T>
  void write_raw(const T* data, size_t n, const std::vector<int64_t>& offset,
                 const std::vector<int64_t>& count);

  std::vector<int64_t> shape_;
  DType dtype_ = DType::F32;
};

class Group : public Object {
 public:
  Group() = default;

  // Names may be paths ("records/r0/layers"); missing intermediate groups are created.
  Group create_group(std::string_view name);
  Group open_group(std::string_view name) const;  // FormatError when missing
  Group require_group(std::string_view name);     // open, or create when missing
  bool exists(std::string_view name) const;       // any link; checks each path component
  bool is_group(std::string_view name) const;
  bool is_dataset(std::string_view name) const;
  // Names of the direct children, in increasing name order (byte-wise).
  std::vector<std::string> children() const;
  // Unlinks a child (a half-written record before it is rewritten on --resume). The space
  // is not reclaimed in the file.
  void remove(std::string_view name);

  Dataset create_dataset(std::string_view name, DType dtype, const std::vector<int64_t>& shape,
                         const DatasetOptions& options = {});
  Dataset open_dataset(std::string_view name) const;  // FormatError when missing

 protected:
  friend class File;
  Group(Handle handle, std::string file, std::string path)
      : Object(std::move(handle), std::move(file), std::move(path)) {}
};

// A file; as a Group it is the root group "/".
class File : public Group {
 public:
  File() = default;
  // Creates (truncating any existing file). IoError when it cannot be created.
  static File create(const std::filesystem::path& path);
  // IoError when missing or unreadable; FormatError when not HDF5 or damaged.
  static File open_read(const std::filesystem::path& path);
  static File open_rw(const std::filesystem::path& path);

  // Writes every buffered change to the file (not necessarily to the disk: see
  // AtomicOutput::commit). Call after each finished record so an interruption loses
  // at most the record in progress.
  void flush();
  // Flushes and releases the file. Objects still open in it keep it open until they go.
  // When the flush fails the file is abandoned (below) and the error thrown.
  void close();
  // Releases the file without writing to it again or reporting errors: the error path
  // after a failed write (a full disk, a file-size limit). The file stays as its last
  // successful flush() left it (complete records readable, for --resume), or delete it.
  // HDF5 still tries to flush while closing and fails; HDF5 1.10 then frees the file but
  // keeps its identifier, and its clean-up at exit would close it a second time and
  // crash, so ckv switches that clean-up off (every file is closed before exit anyway).
  void abandon() noexcept;
  bool is_open() const { return file_handle_.valid(); }

 private:
  File(Handle file, Handle root, std::string name)
      : Group(std::move(root), std::move(name), std::string(1, '/')),
        file_handle_(std::move(file)) {}
  static File open(const std::filesystem::path& path, bool writable);
  Handle file_handle_;
};

// Time this process spent writing HDF5 files (all of them), for `ckv dump --timing-json`.
// Plain counters: HDF5 is used from one thread.
struct WriteStats {
  double convert_seconds = 0;  // float32 -> float16 before a dataset write
  double write_seconds = 0;    // inside H5Dwrite
  double flush_seconds = 0;    // inside H5Fflush and H5Fclose
  int64_t bytes = 0;           // bytes handed to H5Dwrite, in the storage type
};
WriteStats& write_stats();

// True for names that can be a single link (a record id as a group name): not empty, no
// '/', no NUL (HDF5 names are C strings), not "." or "..".
bool is_valid_link_name(std::string_view name);

}  // namespace ckv::h5

// Files, groups, handles and error reporting of the HDF5 layer (datasets in
// h5_dataset.cpp, attributes in h5_attr.cpp).
#include "io/h5.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include "core/input_file.h"
#include "io/h5_detail.h"
#include "io/h5_header.h"

namespace ckv::h5 {
namespace detail {

void init_hdf5() {
  static const bool done = [] {
    // Must come before the library initialises itself, which registers the clean-up.
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

namespace {
// Walked from the API call inwards: the first entry says which call failed, the next ones
// say why. The innermost description is usually the most specific ("file signature not
// found", "truncated file: eof = ..."), so keep the last non-empty one.
herr_t keep_description(unsigned /*n*/, const H5E_error2_t* entry, void* out) {
  if (entry->desc != nullptr && entry->desc[0] != '\0')
    *static_cast<std::string*>(out) = entry->desc;
  return 0;
}
}  // namespace

std::string take_hdf5_reason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_description, &reason);
  H5Eclear2(H5E_DEFAULT);
  // A failed system call is described over several lines ("file write failed: time = ...,
  // filename = ..., errno = 27, error message = 'File too large', buf = ..."); its
  // strerror text is the reason.
  const std::string_view key = "error message = '";
  if (const size_t at = reason.find(key); at != std::string::npos) {
    const size_t start = at + key.size();
    if (const size_t end = reason.find('\'', start); end != std::string::npos)
      return reason.substr(start, end - start);
  }
  // HDF5's own text: its line breaks are layout (ckv::fail would quote them as \x0a).
  for (char& ch : reason)
    if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
  return reason;
}

bool RawFile::read_at(uint64_t offset, uint8_t* out, uint64_t n) const {
  if (offset > size || n > size - offset) return false;
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, n, static_cast<off_t>(offset));
    if (got <= 0) return false;
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
  return true;
}

uint64_t decode_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

std::optional<std::string> find_damage_on_disk(
    hid_t object, const std::string& where,
    const std::function<std::optional<std::string>(const RawFile&)>& find_damage) {
  const Handle file(check_id<FormatError>(H5Iget_file_id(object), where, "cannot find the file"));
  const Handle fapl(
      check_id<FormatError>(H5Fget_access_plist(file.id()), where, "file properties"));
  if (H5Pget_driver(fapl.id()) != H5FD_SEC2) return std::nullopt;
  const Handle fcpl(
      check_id<FormatError>(H5Fget_create_plist(file.id()), where, "file properties"));
  RawFile f;
  hsize_t userblock = 0;
  check<FormatError>(H5Pget_sizes(fcpl.id(), &f.sizeof_addr, &f.sizeof_size), where,
                     "file properties");
  check<FormatError>(H5Pget_userblock(fcpl.id(), &userblock), where, "file properties");
  f.base = userblock;
  if (f.sizeof_addr == 0 || f.sizeof_addr > 8 || f.sizeof_size == 0 || f.sizeof_size > 8)
    fail<FormatError>("{}: damaged file: {}-byte addresses, {}-byte sizes", where, f.sizeof_addr,
                      f.sizeof_size);
  void* vfd = nullptr;
  check<FormatError>(H5Fget_vfd_handle(file.id(), fapl.id(), &vfd), where, "file descriptor");
  f.fd = *static_cast<int*>(vfd);
  unsigned intent = 0;
  check<FormatError>(H5Fget_intent(file.id(), &intent), where, "file intent");
  for (int attempt = 0;; ++attempt) {
    struct stat st {};
    if (::fstat(f.fd, &st) != 0)
      fail<IoError>("{}: cannot read the file: {}", where, std::strerror(errno));
    f.size = static_cast<uint64_t>(st.st_size);
    std::optional<std::string> damage = find_damage(f);
    if (!damage || attempt > 0 || (intent & H5F_ACC_RDWR) == 0) return damage;
    // The disk may be behind HDF5's cache: flush and look again.
    check(H5Fflush(file.id(), H5F_SCOPE_LOCAL), where, "cannot write to the file");
  }
}

}  // namespace detail

using detail::check;
using detail::check_id;
using detail::seconds_since;

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "float32";
    case DType::F16:
      return "float16";
    case DType::F64:
      return "float64";
    case DType::I32:
      return "int32";
    case DType::I64:
      return "int64";
    case DType::U8:
      return "uint8";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F16:
      return 2;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
  }
  return 0;
}

bool is_valid_link_name(std::string_view name) {
  // HDF5 link names are C strings: a NUL would silently cut the name ("a\0b" and "a\0c"
  // would both name "a").
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// --- Handle ---------------------------------------------------------------------------

Handle::Handle(const Handle& other) : id_(other.id_) {
  if (valid()) H5Iinc_ref(id_);
}

Handle& Handle::operator=(const Handle& other) {
  if (this != &other) {
    if (other.valid()) H5Iinc_ref(other.id_);
    reset();
    id_ = other.id_;
  }
  return *this;
}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Handle::reset() {
  // Errors on release cannot be reported from a destructor; File::close() is the checked
  // path for what matters (data reaching the file).
  if (valid()) {
    H5Idec_ref(id_);
    H5Eclear2(H5E_DEFAULT);
  }
  id_ = H5I_INVALID_HID;
}

// --- Object paths ---------------------------------------------------------------------

std::string Object::where() const {
  return file_ + ":" + path_;
}

std::string Object::child_path(std::string_view name) const {
  std::string path = path_ == "/" ? std::string() : path_;
  path.push_back('/');
  path.append(name);
  return path;
}

// --- Group ----------------------------------------------------------------------------

namespace {

std::vector<std::string_view> split_path(std::string_view name) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t slash = name.find('/', start);
    const size_t end = slash == std::string_view::npos ? name.size() : slash;
    if (end > start) parts.push_back(name.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return parts;
}

// Link creation properties: create missing intermediate groups.
Handle intermediate_lcpl(const std::string& where) {
  Handle lcpl(check_id(H5Pcreate(H5P_LINK_CREATE), where, "creating link properties"));
  check(H5Pset_create_intermediate_group(lcpl.id(), 1), where, "setting link properties");
  return lcpl;
}

// Object kind of a child, or H5I_BADID when it does not exist.
H5I_type_t child_kind(const Group& group, std::string_view name) {
  if (!group.exists(name)) return H5I_BADID;
  const std::string n(name);
  const hid_t id = H5Oopen(group.id(), n.c_str(), H5P_DEFAULT);
  if (id < 0) {
    H5Eclear2(H5E_DEFAULT);
    return H5I_BADID;
  }
  const H5I_type_t kind = H5Iget_type(id);
  H5Oclose(id);
  return kind;
}

herr_t collect_name(hid_t /*group*/, const char* name, const H5L_info_t* /*info*/, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

}  // namespace

namespace detail {

void keep_attributes_compact(hid_t ocpl, const std::string& where) {
  constexpr unsigned kMaxCompact = 65535;  // HDF5's limit (H5O_MAX_CRT_ORDER_IDX)
  check(H5Pset_attr_phase_change(ocpl, kMaxCompact, 0), where, "setting attribute storage");
}

std::vector<std::string> missing_groups(const Group& group, std::string_view name) {
  std::vector<std::string> missing;
  std::string prefix;
  for (const std::string_view part : split_path(name)) {
    if (!prefix.empty()) prefix += '/';
    prefix += part;
    if (!missing.empty() || !group.exists(prefix)) missing.push_back(prefix);
  }
  return missing;
}

void trust_made_groups(const Group& group, const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    const Handle made(H5Oopen(group.id(), path.c_str(), H5P_DEFAULT));
    if (made.valid()) trust_new_object(made.id());
    H5Eclear2(H5E_DEFAULT);
  }
}

}  // namespace detail

Group Group::create_group(std::string_view name) {
  const std::string path = child_path(name);
  const std::string where = file_ + ":" + path;
  if (exists(name)) fail<Error>("{}: cannot create group, the name exists", where);
  const Handle lcpl = intermediate_lcpl(where);
  Handle gcpl(check_id(H5Pcreate(H5P_GROUP_CREATE), where, "creating group properties"));
  // No timestamps: two runs with the same inputs give the same file contents.
  check(H5Pset_obj_track_times(gcpl.id(), 0), where, "setting group properties");
  detail::keep_attributes_compact(gcpl.id(), where);
  const std::string n(name);
  const std::vector<std::string> made = detail::missing_groups(*this, name);
  Handle group(check_id(H5Gcreate2(id(), n.c_str(), lcpl.id(), gcpl.id(), H5P_DEFAULT), where,
                        "cannot create group"));
  detail::trust_made_groups(*this, made);
  return Group(std::move(group), file_, path);
}

Group Group::open_group(std::string_view name) const {
  const std::string path = child_path(name);
  const std::string where = file_ + ":" + path;
  if (!exists(name)) fail<FormatError>("{}: no such group", where);
  const std::string n(name);
  Handle group(check_id<FormatError>(H5Gopen2(id(), n.c_str(), H5P_DEFAULT), where,
                                     "cannot open as a group"));
  return Group(std::move(group), file_, path);
}

Group Group::require_group(std::string_view name) {
  return exists(name) ? open_group(name) : create_group(name);
}

bool Group::exists(std::string_view name) const {
  // H5Lexists fails (rather than answering no) when an intermediate link is missing, so
  // check the path one component at a time.
  // Each group searched is checked first (its symbol table, h5_header.h).
  check_object_header(id(), where());
  std::string prefix;
  for (const std::string_view part : split_path(name)) {
    if (!prefix.empty()) {
      const Handle searched(H5Oopen(id(), prefix.c_str(), H5P_DEFAULT));
      if (!searched.valid()) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
      check_object_header(searched.id(), file_ + ":" + child_path(prefix));
      prefix += '/';
    }
    prefix += part;
    const htri_t found = H5Lexists(id(), prefix.c_str(), H5P_DEFAULT);
    if (found < 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (found == 0) return false;
  }
  return !prefix.empty();
}

bool Group::is_group(std::string_view name) const {
  return child_kind(*this, name) == H5I_GROUP;
}

bool Group::is_dataset(std::string_view name) const {
  return child_kind(*this, name) == H5I_DATASET;
}

std::vector<std::string> Group::children() const {
  std::vector<std::string> names;
  hsize_t index = 0;
  check_object_header(id(), where());
  check<FormatError>(H5Literate(id(), H5_INDEX_NAME, H5_ITER_INC, &index, collect_name, &names),
                     where(), "cannot list group members");
  return names;
}

namespace {
// Checks the headers of `name` below `parent` and of everything below it.
void check_subtree(const Group& parent, const std::string& name) {
  const std::string where = parent.file_name() + ":" +
                            (parent.path() == "/" ? "" : parent.path()) + "/" + name;
  const Handle object(
      check_id<FormatError>(H5Oopen(parent.id(), name.c_str(), H5P_DEFAULT), where, "cannot open"));
  check_object_header(object.id(), where);
  if (H5Iget_type(object.id()) != H5I_GROUP) return;
  const Group group = parent.open_group(name);
  for (const std::string& child : group.children()) check_subtree(group, child);
}
}  // namespace

void Group::remove(std::string_view name) {
  const std::string n(name);
  const std::string where = file_ + ":" + child_path(name);
  // Unlinking the last link deletes the object and everything below it, and HDF5 decodes
  // the attribute messages of what it deletes: check their headers first (h5_header.h).
  check_subtree(*this, n);
  check(H5Ldelete(id(), n.c_str(), H5P_DEFAULT), where, "cannot unlink");
}

// --- File -----------------------------------------------------------------------------

namespace {

// Crash safety for --resume. HDF5 updates metadata in place, so a process killed while
// HDF5 writes metadata can leave a file whose last flushed state is damaged. Two settings
// keep writes of metadata to File::flush() (where the run is between records):
//  * a fixed 64 MiB metadata cache that never writes dirty entries early (no minimum clean
//    fraction, no resizing): clean entries are evicted, dirty ones wait for the flush; a
//    record dirties well under 1 MiB of metadata;
//  * no reuse of freed file space (aggregators only), so new data never overwrites space
//    that the last flushed metadata still points to.
// A kill during a flush itself can still damage the file; the window is milliseconds.
constexpr size_t kMetadataCacheBytes = size_t{64} << 20;

Handle writer_access_plist(const std::string& where) {
  Handle fapl(check_id(H5Pcreate(H5P_FILE_ACCESS), where, "creating file access properties"));
  H5AC_cache_config_t config;
  config.version = H5AC__CURR_CACHE_CONFIG_VERSION;
  check(H5Pget_mdc_config(fapl.id(), &config), where, "reading the metadata cache settings");
  config.set_initial_size = 1;
  config.initial_size = kMetadataCacheBytes;
  config.max_size = kMetadataCacheBytes;
  config.min_size = kMetadataCacheBytes;
  config.min_clean_fraction = 0.0;
  config.incr_mode = H5C_incr__off;
  config.flash_incr_mode = H5C_flash_incr__off;
  config.decr_mode = H5C_decr__off;
  config.evictions_enabled = 1;
  check(H5Pset_mdc_config(fapl.id(), &config), where, "setting the metadata cache");
  // No sieve buffer: writes to contiguous datasets reach the file inside H5Dwrite, where
  // a failure is reported, not when the dataset is closed (see h5.h).
  check(H5Pset_sieve_buf_size(fapl.id(), 0), where, "setting the sieve buffer");
  return fapl;
}

Handle writer_create_plist(const std::string& where) {
  Handle fcpl(check_id(H5Pcreate(H5P_FILE_CREATE), where, "creating file creation properties"));
  check(H5Pset_file_space_strategy(fcpl.id(), H5F_FSPACE_STRATEGY_AGGR, 0, 1), where,
        "setting the file space strategy");
  return fcpl;
}

}  // namespace

File File::create(const std::filesystem::path& path) {
  detail::init_hdf5();
  const std::string name = path.string();
  const Handle fcpl = writer_create_plist(name);
  const Handle fapl = writer_access_plist(name);
  errno = 0;
  Handle file(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, fcpl.id(), fapl.id()));
  if (!file.valid()) {
    const std::string reason = detail::take_hdf5_reason();
    // HDF5's reason for a failed create is generic ("unable to open file"); errno is not.
    if (errno != 0) fail<IoError>("{}: cannot create HDF5 file: {}", name, std::strerror(errno));
    fail<IoError>("{}: cannot create HDF5 file ({})", name, reason);
  }
  Handle root(check_id(H5Gopen2(file.id(), "/", H5P_DEFAULT), name, "cannot open root group"));
  trust_new_object(root.id());
  File out(std::move(file), std::move(root), name);
  try {
    out.flush();  // an empty but valid file on disk before any record is written
  } catch (const Error&) {
    out.abandon();
    throw;
  }
  return out;
}

File File::open(const std::filesystem::path& path, bool writable) {
  detail::init_hdf5();
  const std::string name = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail<IoError>("{}: no such file", name);
  // A FIFO or device would block or read forever inside HDF5's open.
  require_regular_file(path, "the HDF5 file");
  if (::access(path.c_str(), writable ? (R_OK | W_OK) : R_OK) != 0)
    fail<IoError>("{}: cannot open{}: {}", name, writable ? " for writing" : "",
                  std::strerror(errno));
  const htri_t is_hdf5 = H5Fis_hdf5(name.c_str());
  if (is_hdf5 == 0) {
    H5Eclear2(H5E_DEFAULT);
    fail<FormatError>("{}: not an HDF5 file", name);
  }
  if (is_hdf5 < 0) detail::fail_hdf5<FormatError>(name, "cannot read as an HDF5 file");
  const Handle fapl = writable ? writer_access_plist(name)
                               : Handle(check_id(H5Pcreate(H5P_FILE_ACCESS), name, "properties"));
  Handle file(H5Fopen(name.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl.id()));
  if (!file.valid())
    detail::fail_hdf5<FormatError>(name, "damaged or truncated HDF5 file, cannot open it");
  // A run killed inside a flush may have written metadata that points past the end of the
  // file recorded in the superblock. Claim everything that reached the disk (as
  // `h5clear --increment` does) so that a resumed run can read it and allocates after it.
  if (writable)
    check(H5Fincrement_filesize(file.id(), 0), name, "cannot extend the file's end address");
  Handle root(
      check_id<FormatError>(H5Gopen2(file.id(), "/", H5P_DEFAULT), name, "cannot open root group"));
  return File(std::move(file), std::move(root), name);
}

File File::open_read(const std::filesystem::path& path) {
  return open(path, false);
}
File File::open_rw(const std::filesystem::path& path) {
  return open(path, true);
}

WriteStats& write_stats() {
  static WriteStats stats;
  return stats;
}

void File::flush() {
  if (!is_open()) fail<Error>("{}: flush of a closed file", file_);
  const auto start = std::chrono::steady_clock::now();
  const herr_t status = H5Fflush(file_handle_.id(), H5F_SCOPE_GLOBAL);
  write_stats().flush_seconds += seconds_since(start);
  check(status, file_, "cannot write to the file");
}

void File::close() {
  if (!is_open()) return;
  try {
    flush();
  } catch (const Error&) {
    abandon();
    throw;
  }
  handle_.reset();
  // The file's own reference goes through H5Fclose so that a failure is reported.
  const auto start = std::chrono::steady_clock::now();
  const herr_t status = H5Fclose(file_handle_.release());
  write_stats().flush_seconds += seconds_since(start);
  if (status < 0) detail::fail_hdf5<IoError>(file_, "closing the file failed");
}

void File::abandon() noexcept {
  if (file_handle_.valid()) {
    // Freeze the file at its last successful flush: HDF5 flushes while closing, and after
    // a failed write that flush gets only part of the metadata out (links to records whose
    // headers never reach the disk). Putting a read-only descriptor in place of HDF5's
    // (the sec2 driver's file descriptor) makes those writes fail without touching the
    // file, which then reads and resumes like one killed between flushes.
    void* vfd = nullptr;
    if (H5Fget_vfd_handle(file_handle_.id(), H5P_DEFAULT, &vfd) >= 0 && vfd != nullptr) {
      const int read_only = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (read_only >= 0) {
        ::dup2(read_only, *static_cast<int*>(vfd));
        ::close(read_only);
      }
    }
    H5Eclear2(H5E_DEFAULT);
  }
  handle_.reset();
  file_handle_.reset();
}

}  // namespace ckv::h5

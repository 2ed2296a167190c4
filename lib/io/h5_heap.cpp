// The guard in front of HDF5's reads of variable-length attribute values (strings, as ckv
// writes them, and sequences, which merge copies). Such a value is stored as a reference
// into a global heap collection (GCOL) elsewhere in the file: the value's length (4 bytes),
// the collection's address (sizeof_addr bytes) and the object's index in it (4 bytes).
//
// Why: libhdf5 1.10.8 trusts those references and the collection. H5HG_read indexes the
// collection's object table with the stored index unchecked (only an assert) and copies
// the object, with the size the collection gives it, into a buffer sized by the stored
// length; the collection's own parser (H5HG__cache_heap_deserialize) walks objects with
// sizes it does not bound, and loops forever on a zero-sized free-space object. A damaged
// file therefore crashes (or hangs) ckv inside H5Aread, where no return code can help.
// Found by fuzz/fuzz_h5_info, fuzz_h5_merge and fuzz_h5_bound_dump.
//
// What check_vlen_attr does before any read that would follow the references:
//  1. Reads the references as stored. A soft conversion registered once (vlen -> an opaque
//     type tagged kRawTag, of exactly the stored reference size) leaves the bytes as they
//     are, so H5Aread hands back the attribute's raw data without touching the heap.
//  2. For every reference with a non-zero address (zero is HDF5's null value): reads the
//     collection from the file descriptor HDF5 itself reads (sec2 driver) and parses it as
//     H5HG__cache_heap_deserialize does, with every bound checked: the signature "GCOL",
//     version 1, a size of at least 4096 bytes (HDF5's minimum) inside the file, object
//     headers and padded objects that tile the collection exactly, a non-empty free-space
//     object. The referenced index must name an object other than the free space (index 0),
//     and the object's size must equal the stored length times the element size: that is
//     what HDF5 writes (H5T_vlen_disk_write inserts exactly length x size bytes), and what
//     H5HG_read copies into a buffer of that size.
//  3. Any failure is a FormatError naming the file, object and attribute. A file open for
//     writing may have collections that only HDF5's metadata cache holds yet: there a
//     failed check is repeated once after a flush (detail::find_damage_on_disk).
// Valid files read as before: the check only reads, and then the usual H5Aread converts.
// Files on other drivers than sec2 (ckv opens none) are read without the check.
//
// Not guarded: HDF5 also follows the references when it deletes an object whose
// attributes hold them; ckv deletes only objects of its own partial outputs.
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "io/h5.h"
#include "io/h5_detail.h"
#include "io/h5_heap.h"

namespace ckv::h5 {

namespace {

constexpr const char* kRawTag = "ckv: variable-length reference as stored";
constexpr uint64_t kMinCollection = 4096;              // H5HG_MINSIZE
constexpr uint64_t kMaxRawBytes = uint64_t{64} << 20;  // references of one attribute

// The soft conversion of step 1: only from variable-length data to kRawTag opaque types
// of the same size; the bytes stay as stored.
herr_t keep_stored_bytes(hid_t src, hid_t dst, H5T_cdata_t* cdata, size_t /*nelmts*/,
                         size_t /*buf_stride*/, size_t /*bkg_stride*/, void* /*buf*/, void* /*bkg*/,
                         hid_t /*dxpl*/) {
  switch (cdata->command) {
    case H5T_CONV_INIT: {
      cdata->need_bkg = H5T_BKG_NO;
      if (H5Tget_class(dst) != H5T_OPAQUE) return -1;
      if (H5Tis_variable_str(src) <= 0 && H5Tget_class(src) != H5T_VLEN) return -1;
      char* tag = H5Tget_tag(dst);
      const bool ours = tag != nullptr && std::strcmp(tag, kRawTag) == 0;
      H5free_memory(tag);
      return ours && H5Tget_size(src) == H5Tget_size(dst) ? 0 : -1;
    }
    case H5T_CONV_CONV:
    case H5T_CONV_FREE:
      return 0;
  }
  return -1;
}

void register_conversion() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string where = "registering ckv's HDF5 conversion";
    Handle vlen(detail::check_id<Error>(H5Tcopy(H5T_C_S1), where, "copying the string type"));
    detail::check<Error>(H5Tset_size(vlen.id(), H5T_VARIABLE), where, "variable length");
    Handle raw(detail::check_id<Error>(H5Tcreate(H5T_OPAQUE, 16), where, "opaque type"));
    detail::check<Error>(H5Tset_tag(raw.id(), kRawTag), where, "tag");
    detail::check<Error>(
        H5Tregister(H5T_PERS_SOFT, "ckv_vlen_stored", vlen.id(), raw.id(), keep_stored_bytes),
        where, "cannot register");
  });
}

using detail::align8;
using detail::decode_le;
using FileLayout = detail::RawFile;

// The objects of one collection: index -> size, or a reason why it is damaged.
struct Collection {
  std::map<uint64_t, uint64_t> objects;
  std::string damage;
};

// Step 2: the collection at `addr`, parsed as H5HG__cache_heap_deserialize parses it.
Collection parse_collection(const FileLayout& f, uint64_t addr) {
  Collection c;
  const uint64_t header = 4 + 1 + 3 + f.sizeof_size;
  const uint64_t object_header = 2 + 2 + 4 + f.sizeof_size;
  if (addr > f.size || f.base > f.size - addr || f.size - f.base - addr < header) {
    c.damage = fmt::format(
        "its heap collection at address {} lies past the end of the file ({} bytes)", addr, f.size);
    return c;
  }
  const uint64_t offset = f.base + addr;
  std::vector<uint8_t> bytes(header);
  if (!f.read_at(offset, bytes.data(), header)) {
    c.damage = fmt::format("cannot read its heap collection at address {}", addr);
    return c;
  }
  if (std::memcmp(bytes.data(), "GCOL", 4) != 0 || bytes[4] != 1) {
    c.damage = fmt::format("no heap collection at address {}", addr);
    return c;
  }
  const uint64_t size = decode_le(bytes.data() + 8, f.sizeof_size);
  if (size < kMinCollection || size > f.size - offset) {
    c.damage =
        fmt::format("the heap collection at address {} claims {} bytes ({} in the file after it)",
                    addr, size, f.size - offset);
    return c;
  }
  bytes.resize(size);
  if (!f.read_at(offset + header, bytes.data() + header, size - header)) {
    c.damage = fmt::format("cannot read its heap collection at address {}", addr);
    return c;
  }
  uint64_t at = header;
  while (at < size) {
    if (size - at < object_header) break;  // too small for an object header: free space
    const uint8_t* p = bytes.data() + at;
    const uint64_t index = decode_le(p, 2);
    const uint64_t object = decode_le(p + 8, f.sizeof_size);
    // Index 0 is the free space; its size includes its header and is not padded.
    const bool free_space = index == 0;
    const uint64_t room = size - at;
    const bool fits =
        free_space ? object >= object_header && object <= room
                   : object <= room - object_header && align8(object) <= room - object_header;
    if (!fits) {
      c.damage =
          fmt::format("heap object {} at address {} claims {} bytes, {} are left in its collection",
                      index, addr, object, room);
      return c;
    }
    c.objects[index] = object;
    at += free_space ? object : object_header + align8(object);
  }
  return c;
}

// Steps 1 and 2 for one attribute; the reason when it is damaged.
std::optional<std::string> find_damage(hid_t attr, size_t element, const FileLayout& f) {
  const Handle space(H5Aget_space(attr));
  const hssize_t count = space.valid() ? H5Sget_simple_extent_npoints(space.id()) : -1;
  if (count < 0) return "cannot read its dataspace";
  if (count == 0) return std::nullopt;
  const size_t ref_size = 4 + f.sizeof_addr + 4;
  if (static_cast<uint64_t>(count) > kMaxRawBytes / ref_size)
    return fmt::format("claims {} variable-length values", count);
  Handle raw(H5Tcreate(H5T_OPAQUE, ref_size));
  if (!raw.valid() || H5Tset_tag(raw.id(), kRawTag) < 0) return "cannot make the reference type";
  std::vector<uint8_t> refs(static_cast<size_t>(count) * ref_size);
  if (H5Aread(attr, raw.id(), refs.data()) < 0) {
    const std::string reason = detail::take_hdf5_reason();
    return "cannot read its stored references" + (reason.empty() ? "" : " (" + reason + ")");
  }
  std::map<uint64_t, Collection> collections;
  for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
    const uint8_t* r = refs.data() + i * ref_size;
    const uint64_t length = decode_le(r, 4);
    const uint64_t addr = decode_le(r + 4, f.sizeof_addr);
    const uint64_t index = decode_le(r + 4 + f.sizeof_addr, 4);
    if (addr == 0) continue;  // HDF5's null value: nothing is read
    auto it = collections.find(addr);
    if (it == collections.end()) it = collections.emplace(addr, parse_collection(f, addr)).first;
    const Collection& c = it->second;
    if (!c.damage.empty()) return fmt::format("value {}: {}", i, c.damage);
    const auto object = c.objects.find(index);
    if (index == 0 || object == c.objects.end())
      return fmt::format("value {} refers to heap object {} at address {}, which does not exist", i,
                         index, addr);
    if (object->second != length * element)
      return fmt::format("value {} claims {} bytes, its heap object {} at address {} holds {}", i,
                         length * element, index, addr, object->second);
  }
  return std::nullopt;
}

}  // namespace

void check_vlen_attr(hid_t attr, const std::string& where) {
  const Handle type(
      detail::check_id<FormatError>(H5Aget_type(attr), where, "cannot read the type"));
  size_t element = 1;  // strings: bytes
  if (H5Tis_variable_str(type.id()) <= 0) {
    if (H5Tget_class(type.id()) != H5T_VLEN) return;  // nothing on the heap at the top level
    const Handle super(
        detail::check_id<FormatError>(H5Tget_super(type.id()), where, "cannot read the type"));
    element = H5Tget_size(super.id());
    if (element == 0) fail<FormatError>("{}: damaged variable-length type", where);
  }
  register_conversion();
  const std::optional<std::string> damage = detail::find_damage_on_disk(
      attr, where, [&](const FileLayout& f) { return find_damage(attr, element, f); });
  if (damage) fail<FormatError>("{}: damaged variable-length value: {}", where, *damage);
}

}  // namespace ckv::h5

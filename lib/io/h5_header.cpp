// The guard in front of libhdf5's decoding of attribute messages.
//
// Why: libhdf5 1.10.8 decodes an attribute message (H5O__attr_decode; every H5Aexists,
// H5Aopen, H5Aiterate, H5Adelete and H5Acreate walks all attribute messages of the object)
// trusting every length in it: it copies the name with strdup wherever its NUL is, decodes
// the datatype and dataspace wherever they end, and copies as many data bytes as the
// datatype's size times the dataspace's elements claim, from the header chunk's buffer or
// past it. A damaged header therefore reads out of bounds inside HDF5 (ASan: heap-buffer-
// overflow in H5MM_xstrdup, heap-use-after-free in memcpy), where no return code helps.
// Found by fuzz/fuzz_h5_info and fuzz_h5_bound_dump.
//
// What check_object_header does, before ckv's first attribute call on an object (or walk of
// a group's links): asks HDF5
// for the object's address (H5Oget_info2 with H5O_INFO_BASIC, which reads the header's
// message types, not their contents), reads the header from the file itself (the sec2
// driver's descriptor, detail::find_damage_on_disk) and checks it as the HDF5 File Format
// Specification Version 3.0 (libhdf5 1.10's) lays it out, every offset and length against
// the bytes it lies in:
//  * IV.A.1.a / IV.A.1.b: the version 1 prefix (16 bytes, chunk 0 after it) or the
//    version 2 prefix ("OHDR", flags, optional times and phase-change values, a 1-8 byte
//    chunk size) with its Jenkins lookup3 checksum (libhdf5's H5_checksum_metadata); the
//    messages of every chunk (v1: 8-byte message headers tiling the chunk; v2: 4 or 6 bytes,
//    a gap shorter than one at the end), each inside its chunk.
//  * IV.A.2.q: continuation messages, followed to chunks inside the file ("OCHK" and a
//    checksum for v2), each chunk once, at most kMaxChunks and kMaxHeaderBytes in all.
//  * IV.A.2.m: every attribute message (versions 1-3): the name, datatype and dataspace
//    sizes (padded to 8 bytes in version 1) inside the message, the name's only NUL at its
//    stored length, no shared datatype or dataspace, and the data size that the datatype
//    times the dataspace implies inside what is left of the message.
//  * IV.A.2.d: the attribute's datatype, read within its stored size as
//    H5O_dtype_decode_helper reads it: version 1-3, a non-zero size, the properties of
//    integer, float, time, string, bitfield, opaque, enumeration (member names ending inside
//    the type, values of the integer base type) and variable-length types (of the size HDF5
//    stores: a 4-byte length and a heap ID), bit fields inside the element. Compound, array
//    and reference types, which ckv never writes, are refused.
//  * IV.A.2.b: the attribute's dataspace (versions 1-2, rank <= 32, a known type, the
//    dimensions inside its stored size, a product that does not overflow).
//  * IV.A.2.r: a group's symbol table message: its B-tree and local heap (and the heap's
//    data) inside the file. Group::children and Group::exists check each group first.
//  * IV.A.2.v, III.G, III.A.2: attributes in dense storage (only in version 2 headers: the
//    attribute info message names a fractal heap): their messages are found through the
//    v2 B-tree of their names (header "BTHD" and a leaf "BTLF", checksummed, records of
//    heap ID, flags, creation order, hash) in the heap's direct blocks (header "FRHP",
//    checksummed; a root direct block or a root indirect block "FHIB" of direct blocks),
//    each object inside its block, and checked as above. A deeper B-tree, nested indirect
//    blocks, filtered heaps and huge or tiny objects are refused as unsupported: ckv's files
//    have none. ckv writes version 1 headers, and in version 2 ones (HDF5's choice for
//    objects added to a file reopened for --resume) keeps attributes in the header
//    (detail::keep_attributes_compact); earlier versions let HDF5 move the 10 attributes of
//    such a record into a fractal heap, and those files read.
// Any violation is a FormatError naming the file and object. An object passes once per
// open file (its header in HDF5's cache was decoded from the bytes checked); objects ckv
// creates are not checked (trust_new_object: HDF5 wrote them). In a file open for writing
// a failed check is repeated after a flush, as the heap check does.
//
// Not guarded: the other messages HDF5 decodes when ckv opens a dataset (its datatype,
// layout, filters), which libhdf5 1.10.8 reads with the same trust.
#include "io/h5_header.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "io/h5.h"
#include "io/h5_detail.h"

// Jenkins lookup3 over metadata (H5checksum.c), exported by libhdf5 since 1.8.7 but not in
// its public headers.
extern "C" uint32_t H5_checksum_metadata(const void* data, size_t len, uint32_t initval);

namespace ckv::h5 {

namespace {

using detail::align8;
using detail::decode_le;
using detail::RawFile;

constexpr uint64_t kMaxHeaderBytes = uint64_t{64} << 20;  // one object's header, all chunks
constexpr size_t kMaxChunks = 4096;
constexpr int kMaxTypeDepth = 16;  // nested enumeration / variable-length base types

// Message types (IV.A.2).
constexpr unsigned kSymbolTable = 0x11;
constexpr unsigned kContinuation = 0x10;
constexpr unsigned kAttribute = 0x0C;
constexpr unsigned kAttributeInfo = 0x15;

// Thrown inside this file only; check_object_header turns it into a FormatError.
struct Damage {
  std::string what;
  bool unsupported = false;  // valid HDF5 that the check does not read
};

[[noreturn]] void damaged(std::string what) {
  throw Damage{std::move(what)};
}

// What the check does not read (valid HDF5 that ckv does not write).
[[noreturn]] void unsupported(std::string_view what) {
  throw Damage{fmt::format("attributes in dense storage in {}, which ckv does not read", what),
               true};
}

// Bytes read front to back; every read checks what is left.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  size_t left() const { return n_ - at_; }
  const uint8_t* here() const { return p_ + at_; }
  const uint8_t* skip(uint64_t k, std::string_view what) {
    if (k > left()) damaged(fmt::format("{} needs {} bytes, {} are left", what, k, left()));
    const uint8_t* out = p_ + at_;
    at_ += static_cast<size_t>(k);
    return out;
  }
  uint64_t u(size_t k, std::string_view what) { return decode_le(skip(k, what), k); }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

struct TypeInfo {
  unsigned cls = 0;
  uint64_t size = 0;
};

// IV.A.2.d, within the datatype's stored size.
TypeInfo check_datatype(Reader& r, const RawFile& f, int depth) {
  if (depth > kMaxTypeDepth)
    damaged(fmt::format("datatype nested more than {} deep", kMaxTypeDepth));
  const uint64_t head = r.u(4, "the datatype");
  const unsigned cls = head & 0x0f;
  const unsigned version = (head >> 4) & 0x0f;
  const uint64_t bits = head >> 8;  // the class bit fields
  const uint64_t size = r.u(4, "the datatype's size");
  if (version < 1 || version > 3) damaged(fmt::format("datatype version {}", version));
  if (size == 0) damaged("a datatype of 0 bytes");
  const uint64_t element_bits = 8 * size;
  switch (cls) {
    case 0:    // fixed-point
    case 4: {  // bitfield
      const uint64_t offset = r.u(2, "the datatype's bit offset");
      const uint64_t precision = r.u(2, "the datatype's precision");
      if (precision == 0 || offset + precision > element_bits)
        damaged(fmt::format("{} bits at bit {} of a {}-byte integer", precision, offset, size));
      break;
    }
    case 1: {  // floating-point
      const uint64_t offset = r.u(2, "the datatype's bit offset");
      const uint64_t precision = r.u(2, "the datatype's precision");
      const uint64_t epos = r.u(1, "the exponent's position");
      const uint64_t esize = r.u(1, "the exponent's size");
      const uint64_t mpos = r.u(1, "the mantissa's position");
      const uint64_t msize = r.u(1, "the mantissa's size");
      r.skip(4, "the exponent bias");
      const uint64_t sign = (bits >> 8) & 0xff;
      if (precision == 0 || offset + precision > element_bits || esize == 0 || msize == 0 ||
          epos + esize > element_bits || mpos + msize > element_bits || sign >= element_bits ||
          ((bits >> 4) & 3) == 3)
        damaged(fmt::format("a {}-byte float with bit fields outside it", size));
      break;
    }
    case 2:  // time
      r.skip(2, "the time type's precision");
      break;
    case 3:  // fixed-length string: no properties
      break;
    case 5: {  // opaque: a NUL-padded tag
      const uint64_t tag = bits & 0xff;
      if (tag % 8 != 0)
        damaged(fmt::format("an opaque tag of {} bytes (not a multiple of 8)", tag));
      r.skip(tag, "the opaque tag");
      break;
    }
    case 8: {  // enumeration: base type, names, values
      const TypeInfo base = check_datatype(r, f, depth + 1);
      if (base.cls != 0 || base.size != size)
        damaged(fmt::format("an enumeration of {} bytes over a {}-byte type of class {}", size,
                            base.size, base.cls));
      const uint64_t members = bits & 0xffff;
      for (uint64_t i = 0; i < members; ++i) {
        const size_t length = strnlen(reinterpret_cast<const char*>(r.here()), r.left());
        if (length == r.left()) damaged(fmt::format("enumeration member {} has no NUL", i));
        r.skip(version >= 3 ? length + 1 : align8(length + 1), "an enumeration member name");
      }
      r.skip(members * base.size, "the enumeration's values");
      break;
    }
    case 9: {  // variable-length sequence (0) or string (1)
      if ((bits & 0x0f) > 1) damaged(fmt::format("variable-length type kind {}", bits & 0x0f));
      check_datatype(r, f, depth + 1);
      const uint64_t stored = 4 + f.sizeof_addr + 4;  // length, heap collection, index
      if (size != stored)
        damaged(fmt::format("a variable-length type of {} bytes (HDF5 stores {})", size, stored));
      break;
    }
    default:
      damaged(
          fmt::format("a datatype of class {} (compound, reference, array or unknown), which ckv "
                      "does not write",
                      cls));
  }
  return {cls, size};
}

// IV.A.2.b, within the dataspace's stored size; the number of elements.
uint64_t check_dataspace(Reader& r, const RawFile& f) {
  const uint64_t version = r.u(1, "the dataspace");
  const uint64_t rank = r.u(1, "the dataspace's rank");
  const uint64_t flags = r.u(1, "the dataspace's flags");
  if (version < 1 || version > 2) damaged(fmt::format("dataspace version {}", version));
  if (rank > 32) damaged(fmt::format("a dataspace of rank {}", rank));
  if ((flags & ~uint64_t{1}) != 0) damaged(fmt::format("dataspace flags {:#x}", flags));
  uint64_t type = rank > 0 ? 1 : 0;  // version 1: simple or scalar
  if (version == 1) {
    r.skip(5, "the dataspace's reserved bytes");
  } else {
    type = r.u(1, "the dataspace's type");
    if (type > 2 || (type == 1) != (rank > 0))
      damaged(fmt::format("a dataspace of type {} and rank {}", type, rank));
  }
  uint64_t elements = type == 2 ? 0 : 1;  // null: none
  for (uint64_t i = 0; i < rank; ++i) {
    const uint64_t dim = r.u(f.sizeof_size, "a dimension");
    if (__builtin_mul_overflow(elements, dim, &elements))
      damaged("dataspace dimensions whose product overflows");
  }
  if ((flags & 1) != 0) r.skip(rank * f.sizeof_size, "the maximum dimensions");
  return elements;
}

// IV.A.2.m. `index` counts the object's attribute messages, for the error text.
void check_attribute(const uint8_t* p, size_t n, unsigned message_flags, size_t index,
                     const RawFile& f) {
  const std::string which = fmt::format("attribute message {}", index);
  try {
    if ((message_flags & 0x02) != 0) damaged("shared (stored in the file's shared message heap)");
    Reader r(p, n);
    const uint64_t version = r.u(1, "the version");
    uint64_t flags = r.u(1, "the flags");
    if (version < 1 || version > 3) damaged(fmt::format("version {}", version));
    if (version == 1) flags = 0;  // reserved
    if (flags != 0) damaged(fmt::format("flags {:#x} (a shared datatype or dataspace)", flags));
    const uint64_t name_size = r.u(2, "the name's size");
    const uint64_t type_size = r.u(2, "the datatype's size");
    const uint64_t space_size = r.u(2, "the dataspace's size");
    if (version == 3) r.skip(1, "the name's encoding");
    auto padded = [&](uint64_t x) { return version == 1 ? align8(x) : x; };
    if (name_size == 0) damaged("a name of 0 bytes");
    if (name_size > r.left())
      damaged(fmt::format("a name of {} bytes, {} are left", name_size, r.left()));
    const char* name = reinterpret_cast<const char*>(r.here());
    if (strnlen(name, name_size) != name_size - 1)
      damaged(fmt::format("a name of {} bytes that does not end at its NUL", name_size));
    r.skip(padded(name_size), "the name");
    Reader type(r.skip(padded(type_size), "the datatype"), type_size);
    const TypeInfo info = check_datatype(type, f, 0);
    Reader space(r.skip(padded(space_size), "the dataspace"), space_size);
    const uint64_t elements = check_dataspace(space, f);
    uint64_t data = 0;
    if (__builtin_mul_overflow(elements, info.size, &data))
      damaged(fmt::format("{} elements of {} bytes", elements, info.size));
    if (data > r.left())
      damaged(fmt::format("{} elements of {} bytes, {} bytes are left in the message", elements,
                          info.size, r.left()));
  } catch (Damage& d) {
    d.what = which + ": " + d.what;
    throw;
  }
}

uint64_t undefined_address(const RawFile& f) {
  return f.sizeof_addr == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * f.sizeof_addr)) - 1;
}

// Bytes needed for values up to 2^bits - 1 (H5HF_SIZEOF_OFFSET_BITS).
uint64_t bytes_for_bits(uint64_t bits) {
  return (bits + 7) / 8;
}

uint64_t log2_floor(uint64_t x) {
  return x == 0 ? 0 : 63 - static_cast<uint64_t>(__builtin_clzll(x));
}

// IV.A.2.v: where dense storage is, when the object uses it.
struct DenseStorage {
  uint64_t heap = 0;   // fractal heap header
  uint64_t names = 0;  // v2 B-tree of attribute names
};

std::optional<DenseStorage> check_attribute_info(const uint8_t* p, size_t n, const RawFile& f) {
  Reader r(p, n);
  if (r.u(1, "the attribute info version") != 0)
    damaged("attribute info message of an unknown version");
  const uint64_t flags = r.u(1, "the attribute info flags");
  if ((flags & 1) != 0) r.skip(2, "the maximum creation index");
  DenseStorage d;
  d.heap = r.u(f.sizeof_addr, "the fractal heap address");
  d.names = r.u(f.sizeof_addr, "the name index address");
  if (d.heap == undefined_address(f)) return std::nullopt;
  return d;
}

// One object's header: its chunks, their messages.
class HeaderCheck {
 public:
  explicit HeaderCheck(const RawFile& f) : f_(f) {}

  void run(uint64_t addr) {
    const std::vector<uint8_t> start = read(addr, 16, "its prefix");
    if (start[0] == 1) {  // IV.A.1.a
      const uint64_t chunk0 = decode_le(start.data() + 8, 4);
      pending_.emplace_back(addr + 16, chunk0);
      version_ = 1;
    } else if (std::memcmp(start.data(), "OHDR", 4) == 0) {  // IV.A.1.b
      if (start[4] != 2) damaged(fmt::format("version {}", start[4]));
      const unsigned flags = start[5];
      if ((flags & 0xC0) != 0) damaged(fmt::format("flags {:#x}", flags));
      creation_order_ = (flags & 0x04) != 0;
      const uint64_t prefix = 6 + ((flags & 0x20) != 0 ? 16 : 0) + ((flags & 0x10) != 0 ? 4 : 0);
      const size_t width = size_t{1} << (flags & 3);
      const std::vector<uint8_t> sized = read(addr, prefix + width, "its prefix");
      const uint64_t chunk0 = decode_le(sized.data() + prefix, width);
      if (chunk0 > kMaxHeaderBytes) damaged(fmt::format("a first chunk of {} bytes", chunk0));
      const std::vector<uint8_t> whole = read(addr, prefix + width + chunk0 + 4, "its first chunk");
      verify_checksum(whole, "the first chunk");
      version_ = 2;
      messages(whole.data() + prefix + width, chunk0);
    } else {
      damaged("no object header there");
    }
    while (!pending_.empty()) {
      const auto [at, length] = pending_.back();
      pending_.pop_back();
      if (!seen_.insert(at).second)
        damaged(fmt::format("the chunk at address {} is continued into twice", at));
      if (seen_.size() > kMaxChunks) damaged(fmt::format("more than {} chunks", kMaxChunks));
      const std::vector<uint8_t> chunk = read(at, length, "a chunk");
      if (version_ == 1) {
        messages(chunk.data(), chunk.size());
      } else {  // IV.A.1.b: "OCHK", messages, checksum
        if (chunk.size() < 8 || std::memcmp(chunk.data(), "OCHK", 4) != 0)
          damaged(fmt::format("no continuation chunk at address {}", at));
        verify_checksum(chunk, "a continuation chunk");
        messages(chunk.data() + 4, chunk.size() - 8);
      }
    }
    if (dense_) check_dense(*dense_);
  }

 private:
  std::vector<uint8_t> read(uint64_t addr, uint64_t n, std::string_view what) {
    if (n > kMaxHeaderBytes - read_) damaged(fmt::format("more than {} bytes", kMaxHeaderBytes));
    read_ += n;
    const uint64_t space = f_.size > f_.base ? f_.size - f_.base : 0;  // addresses in the file
    if (addr > space || n > space - addr)
      damaged(
          fmt::format("{} ({} bytes at address {}) lies past the end of the file", what, n, addr));
    std::vector<uint8_t> out(static_cast<size_t>(n));
    if (!f_.read_at(f_.base + addr, out.data(), n))
      damaged(fmt::format("cannot read {} at address {}", what, addr));
    return out;
  }

  static void verify_checksum(const std::vector<uint8_t>& block, std::string_view what) {
    const size_t body = block.size() - 4;
    if (H5_checksum_metadata(block.data(), body, 0) != decode_le(block.data() + body, 4))
      damaged(fmt::format("{} fails its checksum", what));
  }

  // The messages of one chunk (IV.A.1.a / IV.A.1.b message headers).
  void messages(const uint8_t* p, size_t n) {
    Reader r(p, n);
    const size_t header = version_ == 1 ? 8 : (creation_order_ ? 6 : 4);
    while (r.left() > 0) {
      if (r.left() < header) {
        if (version_ == 2) return;  // a gap
        damaged(fmt::format("{} bytes after the last message of a chunk", r.left()));
      }
      const unsigned type = static_cast<unsigned>(r.u(version_ == 1 ? 2 : 1, "a message"));
      const uint64_t size = r.u(2, "a message");
      const unsigned flags = static_cast<unsigned>(r.u(1, "a message"));
      r.skip(header - (version_ == 1 ? 5 : 4), "a message");
      const uint8_t* body = r.skip(size, fmt::format("message of type {:#x}", type));
      if (type == kContinuation) {  // IV.A.2.q
        Reader c(body, size);
        const uint64_t at = c.u(f_.sizeof_addr, "a continuation message");
        const uint64_t length = c.u(f_.sizeof_size, "a continuation message");
        pending_.emplace_back(at, length);
      } else if (type == kAttribute) {
        check_attribute(body, size, flags, attributes_++, f_);
      } else if (type == kSymbolTable) {
        check_symbol_table(body, size);
      } else if (type == kAttributeInfo) {
        if (std::optional<DenseStorage> d = check_attribute_info(body, size, f_)) dense_ = d;
      }
    }
  }

  // III.G and III.A.2: the attribute messages of dense storage, objects of a fractal heap
  // found through the v2 B-tree of their names. Handled as HDF5 lays out heaps of up to a
  // few hundred attributes, refused beyond: a B-tree of depth 0 (one leaf), a heap whose
  // root is a direct block or an indirect block of direct blocks, no I/O filters, managed
  // (not huge or tiny) objects.
  void check_dense(const DenseStorage& d) {
    // The heap header.
    const size_t L = f_.sizeof_size;
    const size_t O = f_.sizeof_addr;
    const uint64_t fixed =
        4 + 1 + 2 + 2 + 1 + 4 + L + O + L + O + 8 * L + 2 + L + L + 2 + 2 + O + 2;
    const std::vector<uint8_t> heap = read(d.heap, fixed + 4, "its fractal heap header");
    Reader h(heap.data(), heap.size());
    if (std::memcmp(h.skip(4, "the heap"), "FRHP", 4) != 0 || h.u(1, "the heap version") != 0)
      damaged(fmt::format("no fractal heap at address {}", d.heap));
    const uint64_t id_length = h.u(2, "the heap ID length");
    const uint64_t filters = h.u(2, "the heap's filters");
    const uint64_t flags = h.u(1, "the heap's flags");
    const uint64_t max_managed = h.u(4, "the heap's maximum object size");
    h.skip(L + O + L + O + 8 * L, "the heap's statistics");
    const uint64_t width = h.u(2, "the heap's table width");
    const uint64_t start = h.u(L, "the heap's starting block size");
    const uint64_t max_direct = h.u(L, "the heap's maximum direct block size");
    const uint64_t max_heap_bits = h.u(2, "the heap's maximum size");
    h.skip(2, "the heap's starting rows");
    const uint64_t root = h.u(O, "the heap's root block");
    const uint64_t rows = h.u(2, "the heap's rows");
    if (filters != 0) unsupported("a fractal heap with I/O filters");
    verify_checksum(heap, "the fractal heap header");
    if (width == 0 || width > 65536 || start == 0 || (start & (start - 1)) != 0 ||
        max_direct < start || (max_direct & (max_direct - 1)) != 0 ||
        max_direct > (uint64_t{1} << 30) || max_heap_bits == 0 || max_heap_bits > 64 ||
        max_managed == 0)
      damaged("a fractal heap with an impossible block table");
    const uint64_t offset_bytes = bytes_for_bits(max_heap_bits);
    const uint64_t length_bytes =
        std::min(bytes_for_bits(log2_floor(max_direct)), log2_floor(max_managed) / 8 + 1);
    if (id_length < 1 + offset_bytes + length_bytes)
      damaged(fmt::format("heap IDs of {} bytes", id_length));
    const bool checksummed = (flags & 2) != 0;
    const uint64_t direct_header = 4 + 1 + O + offset_bytes + (checksummed ? 4 : 0);

    // The direct blocks: heap offset of the block -> (address, size).
    std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> blocks;
    if (rows == 0) {
      blocks.emplace_back(0, root, start);
    } else {
      const uint64_t direct_rows = log2_floor(max_direct) - log2_floor(start) + 2;
      if (rows > direct_rows) unsupported("a fractal heap with nested indirect blocks");
      const uint64_t entries = rows * width;
      const std::vector<uint8_t> block =
          read(root, 4 + 1 + O + offset_bytes + entries * O + 4, "its root indirect block");
      if (std::memcmp(block.data(), "FHIB", 4) != 0)
        damaged(fmt::format("no indirect block at address {}", root));
      verify_checksum(block, "the heap's root indirect block");
      Reader b(block.data() + 4 + 1 + O + offset_bytes, entries * O);
      uint64_t offset = 0;
      for (uint64_t row = 0; row < rows; ++row) {
        const uint64_t size = row == 0 ? start : start << (row - 1);
        for (uint64_t col = 0; col < width; ++col, offset += size) {
          const uint64_t addr = b.u(O, "a direct block address");
          if (addr != undefined_address(f_) && addr != 0) blocks.emplace_back(offset, addr, size);
        }
      }
    }

    // The names: a v2 B-tree whose root is a leaf of 17-byte records (heap ID, message
    // flags, creation order, name hash).
    const std::vector<uint8_t> tree =
        read(d.names, 4 + 1 + 1 + 4 + 2 + 2 + 1 + 1 + O + 2 + L + 4, "its name index");
    Reader t(tree.data(), tree.size());
    if (std::memcmp(t.skip(4, "the name index"), "BTHD", 4) != 0 ||
        t.u(1, "the B-tree version") != 0 || t.u(1, "the B-tree type") != 8)
      damaged(fmt::format("no attribute name index at address {}", d.names));
    t.skip(4, "the node size");
    const uint64_t record_size = t.u(2, "the record size");
    const uint64_t depth = t.u(2, "the depth");
    t.skip(2, "the split and merge percentages");
    const uint64_t leaf = t.u(O, "the root node address");
    const uint64_t records = t.u(2, "the root's record count");
    verify_checksum(tree, "the name index header");
    if (record_size != id_length + 1 + 4 + 4)
      damaged(fmt::format("name index records of {} bytes", record_size));
    if (depth != 0) unsupported("more attributes than one B-tree leaf holds");
    if (records == 0) return;
    const std::vector<uint8_t> node =
        read(leaf, 4 + 1 + 1 + records * record_size + 4, "its name index leaf");
    if (std::memcmp(node.data(), "BTLF", 4) != 0)
      damaged(fmt::format("no B-tree leaf at address {}", leaf));
    verify_checksum(node, "the name index leaf");

    Reader n(node.data() + 6, records * record_size);
    for (uint64_t i = 0; i < records; ++i) {
      Reader id(n.skip(record_size, "a record"), record_size);
      const uint64_t kind = id.u(1, "a heap ID");
      if ((kind & 0xC0) != 0) damaged(fmt::format("heap ID version {}", kind >> 6));
      if (((kind >> 4) & 3) != 0) unsupported("huge or tiny attribute messages in a fractal heap");
      const uint64_t offset = id.u(offset_bytes, "a heap offset");
      const uint64_t length = id.u(length_bytes, "a heap object length");
      id.skip(id_length - 1 - offset_bytes - length_bytes, "the rest of a heap ID");
      const auto message_flags = static_cast<unsigned>(id.u(1, "the message flags"));
      bool found = false;
      for (const auto& [at, addr, size] : blocks) {
        if (offset < at || offset - at >= size) continue;
        const uint64_t within = offset - at;
        if (within < direct_header || length > size - within)
          damaged(
              fmt::format("heap object at offset {} ({} bytes) outside its block", offset, length));
        const std::vector<uint8_t> block = read(addr, size, "a heap direct block");
        if (std::memcmp(block.data(), "FHDB", 4) != 0)
          damaged(fmt::format("no direct block at address {}", addr));
        check_attribute(block.data() + within, length, message_flags, attributes_++, f_);
        found = true;
        break;
      }
      if (!found) damaged(fmt::format("heap object at offset {} in no block of the heap", offset));
    }
  }

  // IV.A.2.r, III.A.1, III.D: a group's symbol table message names a v1 B-tree ("TREE")
  // and a local heap ("HEAP", version 0) whose data segment HDF5 reads whole when it lists
  // or looks up links; both must be inside the file (libhdf5 1.10.8 read a heap at the
  // undefined address into a null buffer: fuzz_h5_merge).
  void check_symbol_table(const uint8_t* p, size_t n) {
    Reader r(p, n);
    const uint64_t tree = r.u(f_.sizeof_addr, "the symbol table's B-tree address");
    const uint64_t heap = r.u(f_.sizeof_addr, "the symbol table's heap address");
    if (std::memcmp(read(tree, 4, "the symbol table's B-tree").data(), "TREE", 4) != 0)
      damaged(fmt::format("no symbol table B-tree at address {}", tree));
    const std::vector<uint8_t> h =
        read(heap, 8 + 2 * f_.sizeof_size + f_.sizeof_addr, "the group's local heap");
    if (std::memcmp(h.data(), "HEAP", 4) != 0 || h[4] != 0)
      damaged(fmt::format("no local heap at address {}", heap));
    const uint64_t data_size = decode_le(h.data() + 8, f_.sizeof_size);
    const uint64_t data = decode_le(h.data() + 8 + 2 * f_.sizeof_size, f_.sizeof_addr);
    const uint64_t space = f_.size > f_.base ? f_.size - f_.base : 0;
    if (data > space || data_size > space - data)
      damaged(fmt::format(
          "the local heap's data ({} bytes at address {}) lies past the end of the file", data_size,
          data));
  }

  const RawFile& f_;
  std::optional<DenseStorage> dense_;
  int version_ = 1;
  bool creation_order_ = false;
  uint64_t read_ = 0;
  size_t attributes_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> pending_;  // chunks: address, length
  std::set<uint64_t> seen_;
};

// Objects whose header passed, or that ckv made: (file number, address). HDF5 numbers
// each opened file anew, so a file opened again is checked again.
std::set<std::pair<unsigned long, haddr_t>>& known_objects() {
  static std::set<std::pair<unsigned long, haddr_t>> known;
  return known;
}

}  // namespace

void trust_new_object(hid_t object) {
  H5O_info_t info;
  if (H5Oget_info2(object, &info, H5O_INFO_BASIC) >= 0)
    known_objects().emplace(info.fileno, info.addr);
  H5Eclear2(H5E_DEFAULT);
}

void check_object_header(hid_t object, const std::string& where) {
  H5O_info_t info;
  detail::check<FormatError>(H5Oget_info2(object, &info, H5O_INFO_BASIC), where,
                             "cannot read the object header");
  const std::pair<unsigned long, haddr_t> key(info.fileno, info.addr);
  if (known_objects().count(key) != 0) return;
  const std::optional<std::string> damage = detail::find_damage_on_disk(
      object, where, [&](const RawFile& f) -> std::optional<std::string> {
        try {
          HeaderCheck(f).run(info.addr);
          return std::nullopt;
        } catch (const Damage& d) {
          return fmt::format("{}object header (address {}): {}", d.unsupported ? "" : "damaged ",
                             info.addr, d.what);
        }
      });
  if (damage) fail<FormatError>("{}: {}", where, *damage);
  known_objects().insert(key);
}

}  // namespace ckv::h5

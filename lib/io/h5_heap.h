#pragma once
// The check in front of HDF5's reads of variable-length attribute values (h5_heap.cpp).
#include <hdf5.h>

#include <string>

namespace ckv::h5 {

// Checks the stored references of a variable-length attribute (strings or sequences)
// before HDF5 follows them, and throws FormatError naming `where` when they or the heap
// they point into are damaged: libhdf5 1.10 would crash reading them (h5_heap.cpp says
// how). Other attributes pass. The attribute readers of h5_attr.cpp call it, and so must
// any other H5Aread of such data (merge's copy of attributes).
void check_vlen_attr(hid_t attr, const std::string& where);

}  // namespace ckv::h5

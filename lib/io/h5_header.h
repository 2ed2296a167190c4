#pragma once
// The check in front of HDF5's decoding of attribute messages (h5_header.cpp).
#include <hdf5.h>

#include <string>

namespace ckv::h5 {

// Reads the object header of `object` (an open group or dataset) from the file's bytes and
// checks every attribute message in it (and a group's symbol table) before HDF5 decodes
// one, and throws FormatError naming `where` when one is damaged: libhdf5 1.10 decodes them
// without bounds checks (h5_header.cpp says how). Each object is checked once per open
// file. The attribute functions of h5_attr.cpp and Group::children, exists and remove call
// it first, and so must any other H5A call or walk of a group's links.
void check_object_header(hid_t object, const std::string& where);

// Records that ckv made `object` in this process: HDF5 wrote its header, so it is not
// checked (it may not even be on disk yet). Group::create_group and create_dataset call it.
void trust_new_object(hid_t object);

}  // namespace ckv::h5

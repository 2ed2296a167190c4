#include "io/tensor_source.h"

namespace ckv {

std::string_view dtype_name(DType t) {
  const auto i = static_cast<int>(t);
  return i >= 0 && i < kDTypeCount ? kDTypeTraits[i].name : "unknown";
}

}  // namespace ckv

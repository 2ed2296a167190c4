#pragma once
// Named ranges of positions: the evidence spans of an input record (data/records.h) and the
// evicted spans of `ckv mask` (analysis/mask_plan.h). Half-open [start, end), as Python
// slices; the unit (characters or tokens) is the owner's.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ckv {

struct SpanRange {
  int64_t start = 0;  // inclusive
  int64_t end = 0;    // exclusive
  bool operator==(const SpanRange&) const = default;
};
using NamedSpans = std::map<std::string, std::vector<SpanRange>>;

}  // namespace ckv

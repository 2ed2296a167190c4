#pragma once
// The console summary `ckv mask` prints after each record (docs/MASK.md): per-layer
// residual, Delta_theta, retained-mass and sink columns of the target run, then each run's
// next-token and answer measures and generations.
#include <string>

#include "output/mask_schema.h"

namespace ckv {

// The summary's lines, each ending in a newline; `verify` adds the --verify-physical
// differences.
std::string mask_summary(const MaskRecord& record, bool verify);

}  // namespace ckv

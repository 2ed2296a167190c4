#pragma once
// The console summary `ckv mask` prints after each record (docs/MASK.md): per-layer
// residual, Delta_theta, retained-mass and sink columns of the target run, then each run's
// next-token and answer measures and generations.
#include "output/mask_schema.h"

namespace ckv::app {

// Prints to stdout and flushes; `verify` adds the --verify-physical differences.
void print_mask_summary(const MaskRecord& record, bool verify);

}  // namespace ckv::app

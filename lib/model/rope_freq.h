#pragma once
// The rotary frequencies of a model (docs/MODELS.md "RoPE (HF)"): what ops/rope.h rotates by.
#include <span>
#include <vector>

#include "model/config.h"

namespace ckv {

// inv_freq[i] = theta^(-2i/d_head), then llama3 scaling from the config, or, when
// freq_factors ([d_head/2], GGUF rope_freqs) is non-empty, inv_freq[i] / freq_factors[i]
// instead (the two are the same scaling stored two ways).
std::vector<float> rope_inv_freq(const ModelConfig& config, std::span<const float> freq_factors);

}  // namespace ckv

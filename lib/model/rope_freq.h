#pragma once
// The rotary frequencies of a model (docs/MODELS.md "RoPE (HF)"): what ops/rope.h rotates by.
#include <span>
#include <vector>

#include "model/config.h"

namespace ckv {

// inv_freq[i] = theta^(-2i/rope_dim) for i < rope_dim/2 (rope_dim = d_head unless partial
// rotary), then llama3 scaling from the config, or, when freq_factors ([d_head/2], GGUF
// rope_freqs) is non-empty, inv_freq[i] / freq_factors[i] instead (the two are the same
// scaling stored two ways), or longrope's short factors (its long ones with long_factors).
std::vector<float> rope_inv_freq(const ModelConfig& config, std::span<const float> freq_factors,
                                 bool long_factors = false);

// Whether a pass whose positions end at `end` (exclusive) rotates by longrope's long factors:
// HF's rule, per forward call, is that its largest position + 1 exceeds the original context.
bool rope_uses_long_factors(const ModelConfig& config, int64_t end);

// The config a sliding layer rotates by when the family gives local layers their own base
// (Gemma 3's rope_local_theta, unscaled); `config` itself otherwise.
ModelConfig local_rope_config(const ModelConfig& config);

// The frequencies `layer` rotates by in a pass whose positions end at `end`: its local base
// on a sliding layer of such a family, else rope_inv_freq with longrope's long factors when
// the pass is long. What the forward pass used for that layer; the analysis undoes RoPE
// (expectedattention) with it.
std::vector<float> layer_rope_inv_freq(const ModelConfig& config, std::span<const float> freq_factors,
                                       int64_t layer, int64_t end);

// The factor on cos and sin (longrope's attention factor; 1 otherwise).
float rope_attention_scale(const ModelConfig& config);

}  // namespace ckv

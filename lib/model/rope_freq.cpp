#include "model/rope_freq.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace ckv {

std::vector<float> rope_inv_freq(const ModelConfig& config, std::span<const float> freq_factors,
                                 bool long_factors) {
  const int64_t dim = config.rope_dim > 0 ? config.rope_dim : config.d_head;
  const int64_t half = dim / 2;
  if (!freq_factors.empty() && static_cast<int64_t>(freq_factors.size()) != half)
    fail<FormatError>("rope_freqs: {} factors for d_head {} (expected {})", freq_factors.size(),
                      config.d_head, half);
  const RopeScaling& sc = config.rope_scaling;
  const bool llama3 = sc.type == "llama3" && freq_factors.empty();
  const bool longrope = sc.type == "longrope";
  const std::vector<float>& ext = long_factors ? sc.long_factor : sc.short_factor;
  if (longrope && static_cast<int64_t>(ext.size()) != half)
    fail<FormatError>("longrope: {} factors for {} rotary dims (expected {})", ext.size(), dim, half);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // HF computes base ** (2i/d) in fp32; computing in double and rounding agrees to 1 ulp.
    const double power = std::pow(config.rope_theta, static_cast<double>(2 * i) / static_cast<double>(dim));
    double inv = static_cast<float>(1.0 / power);
    if (longrope) {
      // HF: 1 / (ext_factors * base ** (2i/d)), each step in fp32.
      const float scaled = ext[static_cast<size_t>(i)] * static_cast<float>(power);
      inv = 1.0f / scaled;
    } else if (!freq_factors.empty()) {
      inv /= freq_factors[static_cast<size_t>(i)];
    } else if (llama3) {
      // docs/MODELS.md: wavelength w = 2*pi/inv; long waves are slowed by `factor`, short ones
      // kept, and the band between is interpolated.
      const double old_len = static_cast<double>(sc.original_max_position);
      const double wavelen = 2.0 * std::numbers::pi / inv;
      if (wavelen > old_len / sc.low_freq_factor) {
        inv = inv / sc.factor;
      } else if (wavelen >= old_len / sc.high_freq_factor) {
        const double smooth =
            (old_len / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
        inv = (1.0 - smooth) * inv / sc.factor + smooth * inv;
      }
    } else if (sc.type == "linear") {  // HF: inv_freq / factor, in fp32
      inv = static_cast<float>(inv) / static_cast<float>(sc.factor);
    } else if (sc.type != "default" && !sc.type.empty()) {
      fail<UnsupportedError>("rope scaling type '{}' is not supported (default, linear, llama3, longrope)",
                             sc.type);
    }
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(inv);
  }
  return inv_freq;
}

bool rope_uses_long_factors(const ModelConfig& config, int64_t end) {
  return config.rope_scaling.type == "longrope" && end > config.rope_scaling.original_max_position;
}

ModelConfig local_rope_config(const ModelConfig& config) {
  if (config.rope_local_theta <= 0) return config;
  ModelConfig local = config;
  local.rope_theta = config.rope_local_theta;
  local.rope_scaling = {};
  return local;
}

std::vector<float> layer_rope_inv_freq(const ModelConfig& config, std::span<const float> freq_factors,
                                       int64_t layer, int64_t end) {
  if (config.rope_local_theta > 0 && config.window_of(layer) > 0) return rope_inv_freq(local_rope_config(config), {});
  return rope_inv_freq(config, freq_factors, rope_uses_long_factors(config, end));
}

float rope_attention_scale(const ModelConfig& config) {
  return config.rope_scaling.type == "longrope" ? static_cast<float>(config.rope_scaling.attention_factor) : 1.0f;
}

}  // namespace ckv

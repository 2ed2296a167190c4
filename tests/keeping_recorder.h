#pragma once
// A recorder for tests that keeps a copy of everything the forward pass delivers, by layer.
#include <cstdint>
#include <map>
#include <span>

#include "core/tensor.h"
#include "model/recorder.h"

namespace ckv::test {

struct KeepingRecorder : Recorder {
  struct Layer {
    Tensor q, k, v, attn, head_out, resid;
  };
  std::map<int64_t, Layer> layers;
  void on_qkv(int64_t l, const Tensor& q, const Tensor& k, const Tensor& v) override {
    layers[l].q = q;
    layers[l].k = k;
    layers[l].v = v;
  }
  void on_attention(int64_t l, std::span<const int64_t>, const Tensor& p) override {
    layers[l].attn = p;
  }
  void on_head_outputs(int64_t l, std::span<const int64_t>, const Tensor& h) override {
    layers[l].head_out = h;
  }
  void on_residual(int64_t l, const Tensor& r) override { layers[l].resid = r; }
};

}  // namespace ckv::test

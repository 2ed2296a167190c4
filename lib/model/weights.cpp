#include "model/weights.h"

namespace ckv {

namespace {
template <typename Fn>
void for_each_matrix(const ModelWeights& w, Fn&& fn) {
  fn(w.token_embd);
  fn(w.output);
  for (const LayerWeights& l : w.layers) {
    for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.ffn_gate_inp})
      fn(*m);
    for (const ExpertWeights& e : l.experts)
      for (const WeightMatrix* m : {&e.w_gate, &e.w_up, &e.w_down}) fn(*m);
  }
}
}  // namespace

uint64_t ModelWeights::matrix_bytes() const {
  uint64_t total = 0;
  for_each_matrix(*this, [&](const WeightMatrix& m) { total += m.stored_bytes(); });
  return total;
}

ModelWeights dequantized_copy(const ModelWeights& w) {
  ModelWeights out = w;
  auto convert = [](WeightMatrix& m) {
    if (!m.empty()) m = WeightMatrix::from_tensor(m.to_f32());
  };
  convert(out.token_embd);
  convert(out.output);
  for (LayerWeights& l : out.layers) {
    for (WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.ffn_gate_inp})
      convert(*m);
    for (ExpertWeights& e : l.experts)
      for (WeightMatrix* m : {&e.w_gate, &e.w_up, &e.w_down}) convert(*m);
  }
  return out;
}

}  // namespace ckv

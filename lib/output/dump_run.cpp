#include "output/dump_run.h"

#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "analysis/value_norms.h"
#include "output/layer_queue.h"

namespace ckv {
namespace {

// Runs on the forward pass's thread: copies what it records (its buffers are reused by the
// next layer) into the queue the main thread writes from.
class QueueRecorder : public Recorder {
 public:
  explicit QueueRecorder(LayerQueue& queue) : queue_(queue) {}
  void on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) override {
    queue_.push({.kind = LayerItem::Kind::qkv, .layer = layer, .a = q, .b = k, .c = v});
  }
  void on_attention(int64_t layer, std::span<const int64_t>, const Tensor& probs) override {
    queue_.push({.kind = LayerItem::Kind::attention, .layer = layer, .a = probs, .b = {}, .c = {}});
  }
  void on_head_outputs(int64_t layer, std::span<const int64_t>, const Tensor& out) override {
    queue_.push({.kind = LayerItem::Kind::head_out, .layer = layer, .a = out, .b = {}, .c = {}});
  }
  void on_residual(int64_t layer, const Tensor& resid) override {
    queue_.push({.kind = LayerItem::Kind::resid, .layer = layer, .a = resid, .b = {}, .c = {}});
  }

 private:
  LayerQueue& queue_;
};

// Runs on the main thread, the only one that calls HDF5: writes one item into the record's
// group, computing nu from v and W_O on the way.
class ItemWriter {
 public:
  ItemWriter(RecordWriter& rec, const DumpSettings& s, const Model& model, ThreadPool& pool,
             Progress& progress, std::string rate, DumpTiming& timing)
      : rec_(rec), s_(s), model_(model), pool_(pool), progress_(progress), rate_(std::move(rate)),
        timing_(timing) {}
  void write(const LayerItem& item) {
    const auto start = std::chrono::steady_clock::now();
    write_item(item);
    timing_.writer_busy += seconds_since(start);
  }

 private:
  void write_item(const LayerItem& item) {
    switch (item.kind) {
      case LayerItem::Kind::qkv: write_qkv(item.layer, item.a, item.b, item.c); break;
      case LayerItem::Kind::attention:
        if (s_.what.attn) rec_.write_attention(item.layer, item.a);
        break;
      case LayerItem::Kind::head_out: rec_.write_head_out(item.layer, item.a); break;
      case LayerItem::Kind::resid: rec_.write_resid(item.layer, item.a); break;
    }
  }

  void write_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) {
    rec_.write_qkv(layer, q, k, v);
    if (s_.what.nu_l1 || s_.what.nu_l2) {
      const Tensor wo = model_.weights.layers.at(static_cast<size_t>(layer)).wo.to_f32();
      const auto start = std::chrono::steady_clock::now();
      ValueNorms nu = value_norms(v, wo, model_.config.n_head, s_.heads,
                                  {.l1 = s_.what.nu_l1, .l2 = s_.what.nu_l2}, &pool_);
      timing_.nu += seconds_since(start);
      rec_.write_nu(layer, nu.l1, nu.l2);
    }
    progress_.set_note(fmt::format("layer {}/{}{}", layer + 1, model_.config.n_layer, rate_));
  }

  RecordWriter& rec_;
  const DumpSettings& s_;
  const Model& model_;
  ThreadPool& pool_;
  Progress& progress_;
  std::string rate_;  // ", N tokens/s" of the records so far
  DumpTiming& timing_;
};

// Runs the forward pass on a second thread while this one writes what it records, so the
// dump's wall time is about the forward pass's. Returns after every item is written.
ForwardResult forward_and_write(Forward& forward, const std::vector<int32_t>& tokens, ForwardRequest request,
                                ItemWriter& writer, DumpTiming& timing) {
  // Capacity one layer's callbacks: with the item being written, about two layers in flight.
  const size_t per_layer = (request.record.qkv ? 1 : 0) + (request.record.attn_rows.empty() ? 0 : 1) +
                           (request.record.head_out_rows.empty() ? 0 : 1) + (request.record.residual ? 1 : 0);
  LayerQueue queue(per_layer);
  QueueRecorder recorder(queue);
  request.recorder = &recorder;
  ForwardResult result;
  std::exception_ptr forward_error;
  double forward_seconds = 0;
  std::thread worker([&] {
    const auto start = std::chrono::steady_clock::now();
    try {
      result = forward.run(tokens, request);
    } catch (...) {
      forward_error = std::current_exception();
    }
    forward_seconds = seconds_since(start);
    queue.close();
  });
  try {
    while (std::optional<LayerItem> item = queue.pop()) writer.write(*item);
  } catch (...) {
    queue.cancel();
    worker.join();
    throw;
  }
  worker.join();
  timing.forward += forward_seconds;
  timing.forward_stalled += queue.push_wait_seconds();
  timing.writer_idle += queue.pop_wait_seconds();
  if (forward_error) std::rethrow_exception(forward_error);
  return result;
}

}  // namespace

void DumpRecorder::record(const RecordMeta& meta, Progress& progress, const std::string& rate) {
  RecordWriter rec = dump_.begin_record(meta);
  ItemWriter writer(rec, settings_, model_, pool_, progress, rate, timing_);
  const DumpContents& what = settings_.what;
  ForwardRequest request;
  request.record.layers = settings_.layers;
  request.record.qkv = what.q || what.k || what.v || what.nu_l1 || what.nu_l2;
  if (what.attn) request.record.attn_rows = meta.attn_rows;
  if (what.attn_out) request.record.head_out_rows = meta.attn_rows;
  request.record.residual = what.resid;
  // Every dataset is written when this returns; logits and `complete` follow.
  ForwardResult result = forward_and_write(forward_, meta.tokens, std::move(request), writer, timing_);
  if (what.logits) rec.write_logits_last(result.logits.span().last(static_cast<size_t>(model_.config.vocab)));
  dump_.finish_record(rec);
}

}  // namespace ckv

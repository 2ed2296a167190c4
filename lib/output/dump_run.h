#pragma once
// The recording of `ckv dump` (docs/DUMP.md): one record's forward pass streamed into its
// group of a dump file layer by layer, as the pass produces it. The forward pass runs on a
// second thread and the calling one writes (layer_queue.h), so writing overlaps the
// computation and memory is about two layers' buffers whatever the batch size.
#include <string>

#include "core/progress.h"
#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "output/dump_schema.h"
#include "output/dump_timing.h"

namespace ckv {

class DumpRecorder {
 public:
  DumpRecorder(DumpFile& dump, const DumpSettings& settings, const Model& model, Forward& forward, ThreadPool& pool)
      : dump_(dump), settings_(settings), model_(model), forward_(forward), pool_(pool) {}

  // Runs the model over meta.tokens and writes what the settings ask for (q, k, v, nu from v
  // and W_O, the attention and head-output rows meta.attn_rows, the residual stream, the
  // last logits) into a new record group, `complete` last. After each layer `progress`
  // shows "layer l/L" and `rate`. A failure on either thread is rethrown here with its own
  // type (the writer's first, since a failed writer is what stops the forward pass).
  void record(const RecordMeta& meta, Progress& progress, const std::string& rate);
  // Where the time went, over the records so far (--timing-json).
  const DumpTiming& timing() const { return timing_; }
  DumpTiming& timing() { return timing_; }

 private:
  DumpFile& dump_;
  const DumpSettings& settings_;
  const Model& model_;
  Forward& forward_;
  ThreadPool& pool_;
  DumpTiming timing_{};
};

}  // namespace ckv

// ckv._ckv.Model: a loaded model, its tokenizer and the recording forward pass
// (docs/PYTHON.md "Models"). What `run` records is what `ckv dump` writes (docs/DUMP.md),
// computed by the same library calls, handed to numpy without a copy.
#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

#include "analysis/value_norms.h"
#include "bindings.h"
#include "core/thread_pool.h"
#include "data/niah.h"
#include "data/records.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/rope_freq.h"
#include "output/dump_schema.h"

namespace ckv::py {

namespace {

int resolve_threads(int threads) {
  const unsigned hw = std::thread::hardware_concurrency();
  const int cores = hw == 0 ? 1 : static_cast<int>(hw);
  return threads <= 0 ? cores : std::min(threads, cores);
}

// Copies each recorded layer (the forward pass reuses its buffers) into one buffer per kind,
// [n_rec_layer, ...], which numpy then owns; computes nu as `ckv dump` does.
class Collector : public Recorder {
 public:
  Collector(const Model& model, std::vector<int64_t> layers, bool keep_qkv, bool nu, ThreadPool& pool)
      : model_(model), layers_(std::move(layers)), keep_qkv_(keep_qkv), nu_(nu), pool_(pool) {}

  void on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) override {
    const size_t slot = slot_of(layer);
    if (keep_qkv_) {
      store(q_, q, slot);
      store(k_, k, slot);
      store(v_, v, slot);
    }
    if (nu_) {
      const Tensor wo = model_.weights.layers.at(static_cast<size_t>(layer)).wo.to_f32();
      const ValueNorms norms = value_norms(v, wo, model_.config.n_head, {}, {.l1 = true, .l2 = true}, &pool_);
      store(nu_l1_, norms.l1, slot);
      store(nu_l2_, norms.l2, slot);
    }
  }
  void on_attention(int64_t layer, std::span<const int64_t>, const Tensor& probs) override {
    store(attn_, probs, slot_of(layer));
  }

  struct Buffer {
    std::vector<float> data;
    std::vector<int64_t> shape;  // [n_rec_layer, ...the layer's shape]
  };
  Buffer q_, k_, v_, attn_, nu_l1_, nu_l2_;

 private:
  size_t slot_of(int64_t layer) const {
    return static_cast<size_t>(std::lower_bound(layers_.begin(), layers_.end(), layer) - layers_.begin());
  }
  void store(Buffer& b, const Tensor& t, size_t slot) const {
    if (b.data.empty()) {
      b.shape = {static_cast<int64_t>(layers_.size())};
      b.shape.insert(b.shape.end(), t.shape().begin(), t.shape().end());
      b.data.resize(layers_.size() * static_cast<size_t>(t.numel()));
    }
    std::copy(t.data(), t.data() + t.numel(), b.data.begin() + static_cast<ptrdiff_t>(slot * t.numel()));
  }

  const Model& model_;
  std::vector<int64_t> layers_;
  bool keep_qkv_, nu_;
  ThreadPool& pool_;
};

// A model with the forward pass built for it; one run at a time (a mutex), the GIL released.
class PyModel {
 public:
  explicit PyModel(const std::string& path) : model_(load_model(path.empty() ? default_model_path() : std::filesystem::path(path))) {}

  const Model& model() const { return model_; }
  const Tokenizer& tokenizer() const {
    if (!model_.tokenizer) fail<InputError>("{}: the model has no tokenizer; give token ids", model_.source.path.string());
    return *model_.tokenizer;
  }

  nb::dict config() const {
    const ModelConfig& c = model_.config;
    nb::dict d;
    d["arch"] = c.arch_name;
    d["n_layer"] = c.n_layer;
    d["d_model"] = c.d_model;
    d["n_head"] = c.n_head;
    d["n_kv_head"] = c.n_kv_head;
    d["d_head"] = c.d_head;
    d["d_ff"] = c.d_ff;
    d["vocab"] = c.vocab;
    d["context_length"] = c.context_length;
    d["rms_eps"] = c.rms_eps;
    d["rope_theta"] = c.rope_theta;
    d["rope_scaling"] = c.rope_scaling.type;
    d["attention_bias"] = c.attention_bias;
    d["tied_embeddings"] = c.tied_embeddings;
    d["path"] = model_.source.path.string();
    d["format"] = model_.source.format;
    return d;
  }

  nb::dict run(const std::vector<int32_t>& tokens, std::optional<std::vector<int64_t>> layers, bool qkv, bool nu,
               const std::vector<int64_t>& attn_rows, const std::vector<int64_t>& logit_rows, int threads) {
    std::vector<int64_t> recorded = layers ? *layers : std::vector<int64_t>{};
    if (!layers)
      for (int64_t l = 0; l < model_.config.n_layer; ++l) recorded.push_back(l);
    for (int64_t l : recorded)
      if (l < 0 || l >= model_.config.n_layer)
        fail<InputError>("layers: {} is not a layer of the model (0-{})", l, model_.config.n_layer - 1);
    std::sort(recorded.begin(), recorded.end());
    recorded.erase(std::unique(recorded.begin(), recorded.end()), recorded.end());
    std::optional<Collector> collector;
    ForwardResult result;
    {
      nb::gil_scoped_release release;
      std::lock_guard lock(mutex_);
      Forward& forward = forward_for(threads);
      collector.emplace(model_, recorded, qkv, nu, *pool_);
      ForwardRequest request;
      request.record.layers = recorded;
      request.record.qkv = qkv || nu;
      request.record.attn_rows = attn_rows;
      request.logit_rows = logit_rows;
      if (!request.record.empty() && !recorded.empty()) request.recorder = &*collector;
      else request.record = {};
      result = forward.run(tokens, request);
    }
    nb::dict out;
    out["tokens"] = tokens;
    out["layers"] = recorded;
    auto put = [&](const char* name, Collector::Buffer& b) {
      if (!b.data.empty()) out[name] = to_numpy(std::move(b.data), b.shape);
    };
    put("q", collector->q_);
    put("k", collector->k_);
    put("v", collector->v_);
    put("attn", collector->attn_);
    put("nu_l1", collector->nu_l1_);
    put("nu_l2", collector->nu_l2_);
    out["attn_rows"] = attn_rows;
    out["logit_rows"] = result.logit_rows;
    out["logits"] = to_numpy(std::move(result.logits));
    return out;
  }

  // o_proj.weight of a layer, [d_model, n_head*d_head] float32 (the dump's "wo").
  NumpyArray<float> wo(int64_t layer) const {
    if (layer < 0 || layer >= model_.config.n_layer)
      fail<InputError>("layer {}: not a layer of the model (0-{})", layer, model_.config.n_layer - 1);
    Tensor w;
    {
      nb::gil_scoped_release release;
      w = model_.weights.layers[static_cast<size_t>(layer)].wo.to_f32();
    }
    return to_numpy(std::move(w));
  }

  NumpyArray<float> inv_freq() const {
    std::vector<float> f = rope_inv_freq(model_.config, model_.weights.rope_freq_factors);
    const auto n = static_cast<int64_t>(f.size());
    return to_numpy(std::move(f), {n});
  }

 private:
  Forward& forward_for(int threads) {
    const int n = resolve_threads(threads);
    if (!forward_ || forward_->threads() != n) {
      forward_.reset();
      forward_ = std::make_unique<Forward>(model_, ForwardOptions{.threads = n});
      pool_ = std::make_unique<ThreadPool>(n);
    }
    return *forward_;
  }

  Model model_;
  std::mutex mutex_;
  std::unique_ptr<Forward> forward_;
  std::unique_ptr<ThreadPool> pool_;
};

std::vector<ChatMessage> messages_from(const nb::list& messages) {
  std::vector<ChatMessage> out;
  for (nb::handle m : messages) {
    nb::dict d = nb::cast<nb::dict>(m);
    out.push_back({nb::cast<std::string>(d["role"]), nb::cast<std::string>(d["content"])});
  }
  return out;
}

}  // namespace

void register_model(nb::module_& m) {
  nb::class_<PyModel>(m, "Model")
      .def(nb::init<const std::string&>(), nb::arg("path") = "", nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("config", &PyModel::config)
      .def_prop_ro("has_tokenizer", [](const PyModel& p) { return p.model().tokenizer != nullptr; })
      .def(
          "encode",
          [](const PyModel& p, const std::string& text, bool add_bos, bool parse_special) {
            return p.tokenizer().encode(text, add_bos, parse_special);
          },
          nb::arg("text"), nb::arg("add_bos") = true, nb::arg("parse_special") = true)
      .def("decode", [](const PyModel& p, const std::vector<int32_t>& ids) { return p.tokenizer().decode(ids); })
      .def("token_text", [](const PyModel& p, int32_t id) { return p.tokenizer().token_text(id); })
      .def_prop_ro("bos_id", [](const PyModel& p) { return p.tokenizer().bos_id(); })
      .def_prop_ro("eos_id", [](const PyModel& p) { return p.tokenizer().eos_id(); })
      .def_prop_ro("chat_template", [](const PyModel& p) { return p.tokenizer().chat_template(); })
      .def(
          "apply_chat_template",
          [](const PyModel& p, const nb::list& messages, bool add_generation_prompt) {
            return p.tokenizer().apply_chat_template(messages_from(messages), add_generation_prompt);
          },
          nb::arg("messages"), nb::arg("add_generation_prompt") = true)
      .def(
          "tokenize_record",
          [](const PyModel& p, const std::string& context, std::optional<std::string> question, bool chat) {
            InputRecord r;
            r.id = "0";
            r.context = context;
            r.question = std::move(question);
            RecordPrompt prompt = tokenize_record(r, p.tokenizer(), chat);
            return std::make_pair(std::move(prompt.tokens), prompt.context_end);
          },
          nb::arg("context"), nb::arg("question") = nb::none(), nb::arg("chat") = false)
      .def(
          "niah",
          [](const PyModel& p, int64_t length, uint64_t seed, std::optional<double> depth, int64_t index) {
            NiahOptions o;
            o.length = length;
            o.seed = seed;
            if (depth) o.depths = {*depth};
            const NiahRecord r = make_niah_record(o, p.tokenizer(), kNiahNoise, index);
            nb::dict d;
            d["id"] = r.id;
            d["context"] = r.context;
            d["question"] = r.question;
            d["answers"] = r.answers;
            d["depths"] = r.depths;
            d["n_tokens"] = r.n_tokens;
            return d;
          },
          nb::arg("length") = 4096, nb::arg("seed") = 0, nb::arg("depth") = nb::none(), nb::arg("index") = 0)
      .def("run", &PyModel::run, nb::arg("tokens"), nb::arg("layers") = nb::none(), nb::arg("qkv") = true,
           nb::arg("nu") = true, nb::arg("attn_rows") = std::vector<int64_t>{},
           nb::arg("logit_rows") = std::vector<int64_t>{}, nb::arg("threads") = 0)
      .def("wo", &PyModel::wo, nb::arg("layer"))
      .def("rope_inv_freq", &PyModel::inv_freq);

  m.def("default_model_path", [] { return default_model_path().string(); });
  m.def(
      "attention_rows",
      [](const std::string& spec, int64_t window, bool window_given, int64_t c, int64_t n) {
        return attention_rows(spec, window, window_given, c, n, "prompt");
      },
      nb::arg("spec"), nb::arg("window"), nb::arg("window_given"), nb::arg("c"), nb::arg("n"));
}

}  // namespace ckv::py

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

#include "analysis/cache_eval.h"
#include "analysis/value_norms.h"
#include "bindings.h"
#include "core/thread_pool.h"
#include "data/answer_score.h"
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

// `ckv eval`'s settings (docs/EVAL.md) with the CLI's names and defaults.
struct EvalArgs : SelectionArgs {
  std::vector<std::string> methods;
  std::vector<double> budgets;  // fractions of the evictable entries, in (0, 1)
  std::string compress = "context";
  int64_t max_new_tokens = 32, track_steps = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false, chat = false, answer_space = true;
  int threads = 0;
};

CacheEvalSettings eval_settings(const EvalArgs& a) {
  CacheEvalSettings s;
  for (const std::string& m : a.methods) {
    s.methods.push_back(MethodSpec::parse(m));
    // A method that reads a file (file, headkv, duoattention) needs its path parameter.
    if (const SelectionParam* input = missing_method_input(s.methods.back(), a.params))
      fail<UsageError>("methods: {} needs {}= (the path of {})", m, input->key, input->flag);
  }
  s.budgets = a.budgets;
  if (a.compress != "context" && a.compress != "prompt")
    fail<UsageError>("compress '{}': context or prompt", a.compress);
  s.compress_prompt = a.compress == "prompt";
  s.max_new_tokens = a.max_new_tokens;
  s.track_steps = a.track_steps;
  s.stop_strings = a.stop;
  s.ignore_eos = a.ignore_eos;
  s.params = selection_params(a);
  s.selection_file = s.params.selection_file;
  check_cache_eval_settings(s);
  return s;
}

nb::dict scores_dict(const AnswerScores& sc) {
  nb::dict d;
  d["task"] = std::string(answer_task_name(sc.task));
  d["score"] = sc.score;
  d["string_match_all"] = sc.string_match_all;
  d["string_match_part"] = sc.string_match_part;
  d["f1"] = sc.f1;
  d["exact_match"] = sc.exact_match;
  d["contains"] = std::vector<bool>(sc.contains.begin(), sc.contains.end());
  return d;
}

// One run as `ckv eval` stores it (lib/output/eval_schema.h), arrays without a copy.
nb::dict run_dict(CacheEvalRun&& run, const Model& model, const InputRecord& record, int64_t steps) {
  const ModelConfig& cf = model.config;
  nb::dict d;
  d["method"] = run.method;
  d["fraction"] = run.fraction;
  d["budget"] = run.budget;
  d["kept_entries"] = run.kept_entries;
  d["tokens"] = run.decoded.tokens;
  d["text"] = run.decoded.text;
  d["stop"] = run.decoded.stop;
  d["logp_answer"] = run.logp_answer ? nb::cast(*run.logp_answer) : nb::none();
  d["first_row"] = run.first_row;
  d["kl"] = run.first.kl;
  d["top1_agree"] = run.first.top1_agree;
  d["mean_l1"] = run.mean_l1;
  d["mean_l2"] = run.mean_l2;
  if (record.task != AnswerTask::None) d["scores"] = scores_dict(score_answer(record.task, run.decoded.text, record.answers));
  d["kept"] = to_numpy(std::move(run.kept_per_head), {cf.n_layer, cf.n_kv_head});
  if (!run.l1.empty()) {
    d["l1"] = to_numpy(std::move(run.l1), {cf.n_layer, cf.n_head});
    d["l2"] = to_numpy(std::move(run.l2), {cf.n_layer, cf.n_head});
  }
  if (!run.step_next.empty()) {
    const std::vector<int64_t> shape{steps, cf.n_layer, cf.n_head};
    d["step_l1"] = to_numpy(std::move(run.step_l1), shape);
    d["step_l2"] = to_numpy(std::move(run.step_l2), shape);
    d["step_theta_hat"] = to_numpy(std::move(run.step_theta_hat), shape);
    d["step_theta_hat_l2"] = to_numpy(std::move(run.step_theta_hat_l2), shape);
    std::vector<double> kl;
    std::vector<int32_t> agree;
    for (const NextToken& t : run.step_next) kl.push_back(t.kl), agree.push_back(t.top1_agree ? 1 : 0);
    d["step_kl"] = to_numpy(std::move(kl), {steps});
    d["step_top1_agree"] = to_numpy(std::move(agree), {steps});
  }
  return d;
}

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

  // `ckv eval` of one record (a JSON object as a line of its input): the full cache and every
  // method x budget, decoded, scored and measured as the CLI does.
  nb::dict eval(const std::string& record_json, const EvalArgs& a) {
    const CacheEvalSettings settings = eval_settings(a);
    const InputRecord record = parse_record(record_json, "record", 1, 0);
    CacheEvalResult result;
    {
      nb::gil_scoped_release release;
      const Tokenizer& tok = tokenizer();
      std::lock_guard lock(mutex_);
      Forward& forward = forward_for(a.threads);
      const RecordPrompt prompt = tokenize_record(record, tok, a.chat);
      result = evaluate_with_cache(forward, model_,
                                   {.id = record.id, .prompt = prompt.tokens, .context_end = prompt.context_end,
                                    .answer_ids = answer_token_ids(record, tok, a.answer_space)},
                                   settings, *pool_);
    }
    const auto steps = static_cast<int64_t>(result.step_tokens.size());
    nb::dict out;
    out["id"] = record.id;
    out["n_tokens"] = result.n;
    out["context_end"] = result.c;
    out["question_start"] = result.question_start;
    out["first_token"] = result.first_token;
    out["step_tokens"] = result.step_tokens;
    nb::list runs;
    runs.append(run_dict(std::move(result.full), model_, record, steps));
    for (CacheEvalRun& run : result.runs) runs.append(run_dict(std::move(run), model_, record, steps));
    out["runs"] = runs;
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

  NumpyArray<float> inv_freq(int64_t layer, int64_t end) const {
    if (layer < 0 || layer >= model_.config.n_layer)
      fail<UsageError>("layer {} is outside [0, {})", layer, model_.config.n_layer);
    std::vector<float> f = layer_rope_inv_freq(model_.config, model_.weights.rope_freq_factors, layer, end);
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
  nb::class_<EvalArgs> eval_args(m, "EvalArgs");
  def_selection_args(eval_args)
      .def(nb::init<>())
      .def_rw("methods", &EvalArgs::methods)
      .def_rw("budgets", &EvalArgs::budgets)
      .def_rw("compress", &EvalArgs::compress)
      .def_rw("max_new_tokens", &EvalArgs::max_new_tokens)
      .def_rw("track_steps", &EvalArgs::track_steps)
      .def_rw("stop", &EvalArgs::stop)
      .def_rw("ignore_eos", &EvalArgs::ignore_eos)
      .def_rw("chat", &EvalArgs::chat)
      .def_rw("answer_space", &EvalArgs::answer_space)
      .def_rw("threads", &EvalArgs::threads);
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
            d["task"] = "niah";  // as `ckv niah` writes it: ckv eval scores it
            return d;
          },
          nb::arg("length") = 4096, nb::arg("seed") = 0, nb::arg("depth") = nb::none(), nb::arg("index") = 0)
      .def("run", &PyModel::run, nb::arg("tokens"), nb::arg("layers") = nb::none(), nb::arg("qkv") = true,
           nb::arg("nu") = true, nb::arg("attn_rows") = std::vector<int64_t>{},
           nb::arg("logit_rows") = std::vector<int64_t>{}, nb::arg("threads") = 0)
      .def("eval", &PyModel::eval, nb::arg("record_json"), nb::arg("args"))
      .def("wo", &PyModel::wo, nb::arg("layer"))
      .def("rope_inv_freq", &PyModel::inv_freq, nb::arg("layer") = 0, nb::arg("end") = 0);

  m.def("default_model_path", [] { return default_model_path().string(); });
  m.def(
      "attention_rows",
      [](const std::string& spec, int64_t window, bool window_given, int64_t c, int64_t n) {
        return attention_rows(spec, window, window_given, c, n, "prompt");
      },
      nb::arg("spec"), nb::arg("window"), nb::arg("window_given"), nb::arg("c"), nb::arg("n"));
}

}  // namespace ckv::py

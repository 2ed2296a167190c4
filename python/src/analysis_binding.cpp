// ckv._ckv.bound_layer: one layer of `ckv bound` on arrays (docs/PYTHON.md "Bounds"): the
// value norms nu (value_norms), every method's selections and the perturbation metrics
// (analyze_layer), the calls the CLI makes for each layer (docs/BOUND.md).
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "analysis/bound_layer.h"
#include "analysis/perturbation.h"
#include "analysis/selection.h"
#include "analysis/value_norms.h"
#include "bindings.h"
#include "core/thread_pool.h"

namespace ckv::py {

namespace {

struct BoundArgs : SelectionArgs {
  std::vector<std::string> methods;
  std::vector<int64_t> budgets;  // kept entries per KV head
  int64_t c = 0, layer = 0, n_layer = 1;
  std::optional<std::vector<int64_t>> eval_rows;
  std::string nu_min = "all";
  int64_t oracle_max_n = 1024;
  int64_t sliding_window = 0;  // the layer's attention window (0: full causal attention)
  int threads = 1;
};

void check_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& wo) {
  const int64_t n_head = q.dim(0), seq = q.dim(1), d_head = q.dim(2);
  if (k.shape() != v.shape())
    fail<InputError>("k {} and v {}: shapes differ", k.shape_string(), v.shape_string());
  if (k.dim(1) != seq || k.dim(2) != d_head)
    fail<InputError>("q {} and k {}: [n_head, seq, d_head] and [n_kv_head, seq, d_head] disagree", q.shape_string(),
                     k.shape_string());
  if (k.dim(0) < 1 || n_head % k.dim(0) != 0)
    fail<InputError>("q {} and k {}: n_head is not a multiple of n_kv_head", q.shape_string(), k.shape_string());
  if (wo.dim(1) != n_head * d_head)
    fail<InputError>("wo {}: expected [d_model, n_head*d_head = {}]", wo.shape_string(), n_head * d_head);
}

nb::dict bound_layer(const FloatIn& q_in, const FloatIn& k_in, const FloatIn& v_in, const FloatIn& wo_in,
                     const BoundArgs& a, std::optional<std::vector<float>> inv_freq) {
  const Tensor q = tensor_from(q_in, 3, "q"), k = tensor_from(k_in, 3, "k"), v = tensor_from(v_in, 3, "v");
  const Tensor wo = tensor_from(wo_in, 2, "wo");
  LayerResult result;
  std::vector<std::string> names;
  std::vector<int64_t> eval_rows;
  {
    nb::gil_scoped_release release;
    check_shapes(q, k, v, wo);
    const int64_t n = q.dim(1);
    if (a.c < 1 || a.c > n) fail<InputError>("c {}: outside [1, {}] (the sequence)", a.c, n);
    if (a.params.window >= a.c)
      fail<InputError>("window {} is not shorter than the context of {} tokens", a.params.window, a.c);
    if (a.methods.empty()) fail<UsageError>("methods: no method given");
    if (a.budgets.empty()) fail<UsageError>("budgets: no budget given");
    LayerRequest r;
    for (const std::string& m : a.methods) {
      r.methods.push_back(MethodSpec::parse(m));
      if (r.methods.back().layer_global())
        fail<UsageError>("{}: allocates over all layers; run `ckv bound` on a dump instead", m);
      names.push_back(r.methods.back().name());
    }
    for (int64_t b : a.budgets)
      if (b < 1 || b > a.c) fail<InputError>("budget {}: outside [1, {}] (the context)", b, a.c);
    r.budgets.assign(a.budgets.begin(), a.budgets.end());  // counts (Budget's is_count)
    r.params = selection_params(a);
    r.nu_min = parse_nu_min_reading(a.nu_min);
    r.c = a.c;
    r.layer = a.layer;
    r.n_layer = a.n_layer;
    r.eval_rows = a.eval_rows ? *a.eval_rows : evaluation_rows(a.c, n);
    for (int64_t p : r.eval_rows)
      if (p < 0 || p >= n) fail<InputError>("eval_rows: {} is outside the sequence [0, {})", p, n);
    eval_rows = r.eval_rows;
    r.oracle = true;
    r.oracle_max_n = a.oracle_max_n;
    if (a.sliding_window < 0) fail<UsageError>("sliding_window {}: 0 (none) or a number of keys", a.sliding_window);
    r.window = a.sliding_window;
    if (inv_freq) r.rope_inv_freq = std::make_shared<const std::vector<float>>(std::move(*inv_freq));
    ThreadPool pool(a.threads);
    const ValueNorms nu = value_norms(v, wo, q.dim(0), {}, {.l1 = true, .l2 = true}, &pool);
    const LayerTensors t{&q, &k, &v, &wo, &nu.l1, &nu.l2};
    result = analyze_layer(t, r, &pool);
  }
  std::vector<double> metrics;
  metrics.reserve(result.metrics.size() * kMetricCount);
  for (const MetricRow& row : result.metrics) metrics.insert(metrics.end(), row.begin(), row.end());
  nb::dict out;
  out["methods"] = names;
  out["budgets"] = a.budgets;
  out["eval_rows"] = eval_rows;
  out["metric_names"] = std::vector<std::string>(kMetricNames.begin(), kMetricNames.end());
  out["metrics"] = to_numpy(std::move(metrics), {result.n_method, result.n_budget, result.n_head, result.n_query,
                                                 static_cast<int64_t>(kMetricCount)});
  out["kept_mask"] = to_numpy(std::move(result.kept_mask), {result.n_method, result.n_budget, result.n_kv_head, result.c});
  out["kept_count"] = to_numpy(std::move(result.kept_count), {result.n_method, result.n_budget, result.n_kv_head});
  out["oracle_skipped"] = result.oracle_skipped;
  return out;
}

}  // namespace

void register_analysis(nb::module_& m) {
  nb::class_<BoundArgs> bound_args(m, "BoundArgs");
  def_selection_args(bound_args)
      .def(nb::init<>())
      .def_rw("methods", &BoundArgs::methods)
      .def_rw("budgets", &BoundArgs::budgets)
      .def_rw("c", &BoundArgs::c)
      .def_rw("layer", &BoundArgs::layer)
      .def_rw("n_layer", &BoundArgs::n_layer)
      .def_rw("eval_rows", &BoundArgs::eval_rows)
      .def_rw("nu_min", &BoundArgs::nu_min)
      .def_rw("oracle_max_n", &BoundArgs::oracle_max_n)
      .def_rw("sliding_window", &BoundArgs::sliding_window)
      .def_rw("threads", &BoundArgs::threads);
  m.def("bound_layer", &bound_layer, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("wo"), nb::arg("args"),
        nb::arg("inv_freq") = nb::none());
  m.def("budget_from_fraction", &budget_from_fraction, nb::arg("c"), nb::arg("fraction"));
  m.def("selection_param_keys", [] {
    std::vector<std::string> keys;
    for (const SelectionParam& s : selection_param_table()) keys.emplace_back(s.key);
    return keys;
  });
  m.def("method_name", [](const std::string& text) { return MethodSpec::parse(text).name(); });
  m.def("value_norms", [](const FloatIn& v_in, const FloatIn& wo_in, int64_t n_head) {
    const Tensor v = tensor_from(v_in, 3, "v"), wo = tensor_from(wo_in, 2, "wo");
    ValueNorms nu;
    {
      nb::gil_scoped_release release;
      nu = value_norms(v, wo, n_head, {}, {.l1 = true, .l2 = true});
    }
    return nb::make_tuple(to_numpy(std::move(nu.l1)), to_numpy(std::move(nu.l2)));
  });
}

}  // namespace ckv::py

#include "mask_report.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "analysis/mask_metrics.h"

namespace ckv::app {
namespace {

void print_generation(const std::string& name, const Generation& g) {
  fmt::print("{:>9}  generation: \"{}\"{}\n", name, g.text,
             g.has_answer ? (*g.has_answer ? " (contains the answer)" : " (no answer)") : "");
}

}  // namespace

void print_mask_summary(const MaskRecord& r, bool verify) {
  const MaskRun& t = r.runs.front();
  const MaskRun* cmp = nullptr;  // --compare
  std::vector<const MaskRun*> placebos;
  for (const MaskRun& run : r.runs) {
    if (run.name == "compare") cmp = &run;
    if (run.name.starts_with("placebo")) placebos.push_back(&run);
  }
  const size_t n_placebo = placebos.size();
  fmt::print("record \"{}\": {} tokens, c = {}, {} evaluation rows, evicted {} (layer, KV head, position) entries\n",
             r.id, r.tokens.size(), r.c, r.eval_rows.size(), t.plan.total_evicted());
  if (cmp)
    fmt::print("resid_L2: the target's ({}); compare_L2: {}; reduction = 1 - compare_L2 / resid_L2\n", t.source,
               cmp->source);
  fmt::print("{:>5} {:>12} {:>12} {:>10} {:>9} {:>9} {:>9} {:>11}{}{}\n", "layer", "resid_L1", "resid_L2",
             "dtheta", "S_min", "sink_raw", "sink_corr", "sink_full", n_placebo ? "  placebo_L2" : "",
             cmp ? "  compare_L2  reduction" : "");
  for (size_t l = 0; l < t.metrics.layers.size(); ++l) {
    const LayerMaskMetrics& m = t.metrics.layers[l];
    double dt = 0, smin = 1, sr = 0, sc = 0, sf = 0;
    for (double x : m.delta_theta) dt += x;
    for (double x : m.retained) smin = std::min(smin, x);
    for (size_t i = 0; i < m.sink_raw.size(); ++i) {
      sr += m.sink_raw[i] / static_cast<double>(m.sink_raw.size());
      sc += m.sink_corrected[i] / static_cast<double>(m.sink_raw.size());
      sf += m.sink_full[i] / static_cast<double>(m.sink_raw.size());
    }
    std::string placebo;
    if (n_placebo) {
      double p = 0;
      for (const MaskRun* run : placebos) p += run->metrics.layers[l].resid_l2_mean();
      placebo = fmt::format("  {:>11.4g}", p / static_cast<double>(n_placebo));
    }
    std::string compare;
    if (cmp) {
      const double c2 = cmp->metrics.layers[l].resid_l2_mean(), t2 = m.resid_l2_mean();
      compare = fmt::format("  {:>10.4g} {:>9.1f}%", c2, t2 > 0 ? 100 * (1 - c2 / t2) : 0.0);
    }
    fmt::print("{:>5} {:>12.4g} {:>12.4g} {:>10.4g} {:>9.4f} {:>9.4f} {:>9.4f} {:>11.4f}{}{}\n", l,
               m.resid_l1_mean(), m.resid_l2_mean(), dt, smin, sr, sc, sf, placebo, compare);
  }
  for (const MaskRun& run : r.runs) {
    fmt::print("{:>9}: KL(full||masked) {:.4g}, top-1 {}", run.name, run.next.kl, run.next.top1_agree ? "agrees" : "differs");
    if (run.logp_answer) fmt::print(", log p(answer) {:.4f} (full {:.4f})", *run.logp_answer, *r.logp_answer_full);
    if (run.ratio) fmt::print(", Delta_theta ratio {:.3f}", *run.ratio);
    if (verify && run.physical_max_diff)
      fmt::print(", physical check max |diff| {:.3g} (outputs up to {:.3g})", *run.physical_max_diff, *run.physical_max_abs);
    fmt::print("\n");
    if (run.generation) print_generation("", *run.generation);
  }
  if (r.generation_full) print_generation("full", *r.generation_full);
  std::fflush(stdout);
}

}  // namespace ckv::app

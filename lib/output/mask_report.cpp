#include "output/mask_report.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "analysis/mask_metrics.h"

namespace ckv {
namespace {

using Out = std::back_insert_iterator<std::string>;

void write_generation(Out out, const std::string& name, const Generation& g) {
  fmt::format_to(out, "{:>9}  generation: \"{}\"{}\n", name, g.text,
                 g.has_answer ? (*g.has_answer ? " (contains the answer)" : " (no answer)") : "");
}

}  // namespace

std::string mask_summary(const MaskRecord& r, bool verify) {
  std::string text;
  const Out out(text);
  const MaskRun& t = r.runs.front();
  const MaskRun* cmp = nullptr;  // --compare
  std::vector<const MaskRun*> placebos;
  for (const MaskRun& run : r.runs) {
    if (run.name == "compare") cmp = &run;
    if (run.name.starts_with("placebo")) placebos.push_back(&run);
  }
  const size_t n_placebo = placebos.size();
  fmt::format_to(out, "record \"{}\": {} tokens, c = {}, {} evaluation rows; evicted by {}: {} (layer, KV head, "
                 "position) entries\n", r.id, r.tokens.size(), r.c, r.eval_rows.size(), t.source, t.plan.total_evicted());
  if (cmp)
    fmt::format_to(out, "resid_L2: the target's ({}); compare_L2: {}; reduction = 1 - compare_L2 / resid_L2\n", t.source,
                   cmp->source);
  fmt::format_to(out, "{:>5} {:>12} {:>12} {:>10} {:>9} {:>9} {:>9} {:>11}{}{}\n", "layer", "resid_L1", "resid_L2",
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
    fmt::format_to(out, "{:>5} {:>12.4g} {:>12.4g} {:>10.4g} {:>9.4f} {:>9.4f} {:>9.4f} {:>11.4f}{}{}\n", l,
                   m.resid_l1_mean(), m.resid_l2_mean(), dt, smin, sr, sc, sf, placebo, compare);
  }
  for (const MaskRun& run : r.runs) {
    fmt::format_to(out, "{:>9}: KL(full||masked) {:.4g}, top-1 {}", run.name, run.next.kl, run.next.top1_agree ? "agrees" : "differs");
    if (run.logp_answer) fmt::format_to(out, ", log p(answer) {:.4f} (full {:.4f})", *run.logp_answer, *r.logp_answer_full);
    if (run.ratio) fmt::format_to(out, ", Delta_theta ratio {:.3f}", *run.ratio);
    if (verify && run.physical_max_diff)
      fmt::format_to(out, ", physical check max |diff| {:.3g} (outputs up to {:.3g})", *run.physical_max_diff, *run.physical_max_abs);
    fmt::format_to(out, "\n");
    if (run.generation) write_generation(out, "", *run.generation);
  }
  if (r.generation_full) write_generation(out, "full", *r.generation_full);
  return text;
}

}  // namespace ckv

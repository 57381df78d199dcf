// An SVG (no dependencies) of a serving benchmark: TTFT, TPOT, ITL and E2E percentiles and
// throughput/goodput against request rate, one color per series (a configuration), p50 solid,
// p90 dashed, p99 dotted, the SLO as a grey line.
#pragma once

#include <string>
#include <vector>

#include "serve_stats.h"

namespace tandem::bench {

struct PlotSeries {
  std::string label;
  std::vector<RateSummary> points;  // by rising rate; an infinite rate is drawn last as "inf"
};

std::string serve_plot_svg(const std::vector<PlotSeries>& series, const Slo& slo,
                           const std::string& title);

}  // namespace tandem::bench

#include "serve_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace tandem::bench {

namespace {

constexpr double kPanelW = 420, kPanelH = 260, kMarginL = 60, kMarginB = 40, kMarginT = 30;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// A "nice" upper bound for an axis: 1, 2 or 5 times a power of ten.
double nice_ceil(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (v <= m * p) return m * p;
  }
  return 10 * p;
}

struct Line {
  std::vector<double> y;  // [points] of one series
  const char* color;
  const char* dash;  // "" solid
  std::string label;
};

struct Panel {
  std::string title, unit;
  std::vector<Line> lines;
  double slo = -1;  // < 0: none
};

void draw_panel(std::string& svg, const Panel& p, double x0, double y0,
                const std::vector<double>& xs, const std::vector<std::string>& xlabels) {
  const double w = kPanelW - kMarginL - 20, h = kPanelH - kMarginB - kMarginT;
  const double left = x0 + kMarginL, top = y0 + kMarginT;
  double ymax = p.slo > 0 ? p.slo * 1.1 : 0;
  for (const Line& l : p.lines) {
    for (double v : l.y) ymax = std::max(ymax, v);
  }
  ymax = nice_ceil(ymax * 1.05);
  const double xmax = xs.empty() ? 1 : xs.back();
  auto px = [&](double x) { return left + (xmax > 0 ? x / xmax : 0) * w; };
  auto py = [&](double y) { return top + h - y / ymax * h; };

  svg += "<text x='" + fmt(x0 + kPanelW / 2) + "' y='" + fmt(y0 + 18) +
         "' text-anchor='middle' font-weight='bold'>" + esc(p.title) + "</text>\n";
  svg += "<rect x='" + fmt(left) + "' y='" + fmt(top) + "' width='" + fmt(w) + "' height='" +
         fmt(h) + "' fill='none' stroke='#888'/>\n";
  for (int i = 0; i <= 4; ++i) {  // y grid and labels
    const double v = ymax * i / 4;
    svg += "<line x1='" + fmt(left) + "' x2='" + fmt(left + w) + "' y1='" + fmt(py(v)) + "' y2='" +
           fmt(py(v)) + "' stroke='#eee'/>\n";
    svg += "<text x='" + fmt(left - 5) + "' y='" + fmt(py(v) + 4) +
           "' text-anchor='end' font-size='11'>" + fmt(v) + "</text>\n";
  }
  svg += "<text x='" + fmt(x0 + 14) + "' y='" + fmt(top + h / 2) +
         "' font-size='11' transform='rotate(-90 " + fmt(x0 + 14) + " " + fmt(top + h / 2) +
         ")' text-anchor='middle'>" + esc(p.unit) + "</text>\n";
  for (size_t i = 0; i < xs.size(); ++i) {
    svg += "<text x='" + fmt(px(xs[i])) + "' y='" + fmt(top + h + 15) +
           "' text-anchor='middle' font-size='11'>" + esc(xlabels[i]) + "</text>\n";
  }
  svg += "<text x='" + fmt(left + w / 2) + "' y='" + fmt(top + h + 32) +
         "' text-anchor='middle' font-size='11'>request rate (req/s)</text>\n";
  if (p.slo > 0) {
    svg += "<line x1='" + fmt(left) + "' x2='" + fmt(left + w) + "' y1='" + fmt(py(p.slo)) +
           "' y2='" + fmt(py(p.slo)) + "' stroke='#999' stroke-width='2'/>\n";
    svg += "<text x='" + fmt(left + w - 4) + "' y='" + fmt(py(p.slo) - 4) +
           "' text-anchor='end' font-size='10' fill='#666'>SLO " + fmt(p.slo) + "</text>\n";
  }
  for (const Line& l : p.lines) {
    std::string pts;
    for (size_t i = 0; i < l.y.size() && i < xs.size(); ++i) {
      pts += fmt(px(xs[i])) + "," + fmt(py(l.y[i])) + " ";
    }
    svg += "<polyline fill='none' stroke='" + std::string(l.color) + "' stroke-width='1.8'" +
           (*l.dash ? " stroke-dasharray='" + std::string(l.dash) + "'" : std::string()) +
           " points='" + pts + "'><title>" + esc(l.label) + "</title></polyline>\n";
    for (size_t i = 0; i < l.y.size() && i < xs.size(); ++i) {
      svg += "<circle cx='" + fmt(px(xs[i])) + "' cy='" + fmt(py(l.y[i])) + "' r='2.5' fill='" +
             l.color + "'/>\n";
    }
  }
}

}  // namespace

std::string serve_plot_svg(const std::vector<PlotSeries>& series, const Slo& slo,
                           const std::string& title) {
  // X positions: the rates of the first series; an infinite rate sits one step past the last.
  std::vector<double> xs;
  std::vector<std::string> xlabels;
  if (!series.empty()) {
    double last = 0;
    for (const RateSummary& s : series.front().points) {
      if (std::isfinite(s.rate)) {
        last = s.rate;
        xs.push_back(s.rate);
        xlabels.push_back(fmt(s.rate));
      } else {
        xs.push_back(last > 0 ? last * 1.25 : 1);
        xlabels.push_back("inf");
      }
    }
  }
  using Get = std::function<double(const RateSummary&)>;
  auto pct_lines = [&](const std::function<const Percentiles&(const RateSummary&)>& of) {
    std::vector<Line> lines;
    for (size_t k = 0; k < series.size(); ++k) {
      const char* color = kColors[k % std::size(kColors)];
      const std::pair<const char*, Get> qs[] = {
          {"", [&](const RateSummary& s) { return of(s).p50; }},
          {"6,3", [&](const RateSummary& s) { return of(s).p90; }},
          {"2,3", [&](const RateSummary& s) { return of(s).p99; }}};
      const char* names[] = {"p50", "p90", "p99"};
      for (size_t q = 0; q < 3; ++q) {
        Line l{{}, color, qs[q].first, series[k].label + " " + names[q]};
        for (const RateSummary& s : series[k].points) l.y.push_back(qs[q].second(s));
        lines.push_back(std::move(l));
      }
    }
    return lines;
  };
  std::vector<Panel> panels;
  panels.push_back({"TTFT", "ms",
                    pct_lines([](const RateSummary& s) -> const Percentiles& { return s.ttft; }),
                    slo.ttft_ms});
  panels.push_back({"TPOT", "ms",
                    pct_lines([](const RateSummary& s) -> const Percentiles& { return s.tpot; }),
                    slo.tpot_ms});
  panels.push_back({"ITL", "ms",
                    pct_lines([](const RateSummary& s) -> const Percentiles& { return s.itl; }),
                    -1});
  panels.push_back({"E2E latency", "ms",
                    pct_lines([](const RateSummary& s) -> const Percentiles& { return s.e2e; }),
                    -1});
  Panel tput{"Throughput (solid) and goodput (dashed)", "req/s", {}, -1};
  for (size_t k = 0; k < series.size(); ++k) {
    const char* color = kColors[k % std::size(kColors)];
    Line t{{}, color, "", series[k].label + " throughput"};
    Line g{{}, color, "6,3", series[k].label + " goodput"};
    for (const RateSummary& s : series[k].points) {
      t.y.push_back(s.request_throughput);
      g.y.push_back(s.goodput);
    }
    tput.lines.push_back(std::move(t));
    tput.lines.push_back(std::move(g));
  }
  panels.push_back(std::move(tput));

  const int cols = 3, rows = 2;
  const double legend_h = 24.0 + 16.0 * double(series.size());
  const double width = cols * kPanelW, height = rows * kPanelH + legend_h + 30;
  std::string svg = "<svg xmlns='http://www.w3.org/2000/svg' width='" + fmt(width) + "' height='" +
                    fmt(height) + "' font-family='sans-serif' font-size='12'>\n";
  svg += "<rect width='100%' height='100%' fill='white'/>\n";
  svg += "<text x='" + fmt(width / 2) + "' y='20' text-anchor='middle' font-size='15'>" +
         esc(title) + "</text>\n";
  for (size_t i = 0; i < panels.size(); ++i) {
    draw_panel(svg, panels[i], double(i % cols) * kPanelW, 30 + double(i / cols) * kPanelH, xs,
               xlabels);
  }
  // Legend in the sixth cell: series colors and percentile dashes.
  const double lx = 2 * kPanelW + 30, ly = 30 + kPanelH + 50;
  svg += "<text x='" + fmt(lx) + "' y='" + fmt(ly) + "'>p50 solid, p90 dashed, p99 dotted; " +
         "grey: SLO</text>\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const double y = ly + 20 + 16 * double(k);
    svg += "<line x1='" + fmt(lx) + "' x2='" + fmt(lx + 24) + "' y1='" + fmt(y - 4) + "' y2='" +
           fmt(y - 4) + "' stroke='" + kColors[k % std::size(kColors)] + "' stroke-width='3'/>\n";
    svg +=
        "<text x='" + fmt(lx + 30) + "' y='" + fmt(y) + "'>" + esc(series[k].label) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tandem::bench

#include "tools/cli/growth_plot.h"

#include <time.h>

#include <algorithm>
#include <array>

#include "base/text.h"
#include "fmt/format.h"
#include "tools/cli/progress.h"

namespace tbfs::cli {

namespace {

constexpr double kWidth = 820, kHeight = 520;
constexpr double kLeft = 90, kRight = 800;  // plot area, both panels
constexpr double kBytesTop = 60, kBytesBottom = 300;
constexpr double kFullTop = 350, kFullBottom = 470;

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : Printable(text)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string UtcTime(double unix_s) {
  const time_t t = static_cast<time_t>(unix_s);
  struct tm tm;
  char buf[32] = "?";
  if (::gmtime_r(&t, &tm) != nullptr) ::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// A "nice" axis maximum at or above v: 1, 2 or 5 times a power of two's
// neighbourhood is not needed; bytes read best at 1/2/5 x 10^k.
double NiceCeil(double v) {
  if (v <= 0) return 1;
  double p = 1;
  while (p * 10 <= v) p *= 10;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::string GrowthSvg(const std::vector<store::GrowthSample>& series, const std::string& title,
                      double warn_at_pct) {
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" font-size=\"15\">{3}</text>\n",
      kWidth, kHeight, kLeft, Escape("Growth of " + title));
  if (series.empty()) return svg + "<text x=\"90\" y=\"80\">no samples yet</text>\n</svg>\n";

  const double t0 = series.front().unix_s, t1 = series.back().unix_s;
  const double span = std::max(t1 - t0, 1.0);
  auto x = [&](double t) {
    return series.size() == 1 ? (kLeft + kRight) / 2 : kLeft + (t - t0) / span * (kRight - kLeft);
  };
  uint64_t max_bytes = 0;
  for (const auto& s : series) max_bytes = std::max(max_bytes, s.logdir_bytes());
  const double top = NiceCeil(static_cast<double>(max_bytes));
  auto y_bytes = [&](double b) { return kBytesBottom - b / top * (kBytesBottom - kBytesTop); };
  auto y_full = [&](double pct) { return kFullBottom - pct / 100 * (kFullBottom - kFullTop); };

  // Axes, grid and labels.
  for (int i = 0; i <= 4; ++i) {
    const double b = top * i / 4, y = y_bytes(b);
    svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n",
                       kLeft, y, kRight, y);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", kLeft - 6,
                       y + 4, Escape(HumanBytes(static_cast<uint64_t>(b))));
  }
  for (int pct : {0, 50, 100}) {
    const double y = y_full(pct);
    svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n",
                       kLeft, y, kRight, y);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}%</text>\n", kLeft - 6,
                       y + 4, pct);
  }
  svg +=
      fmt::format("<text x=\"{}\" y=\"{}\">logdir bytes by class</text>\n", kLeft, kBytesTop - 8);
  svg += fmt::format("<text x=\"{}\" y=\"{}\">filesystem used</text>\n", kLeft, kFullTop - 8);
  svg += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", kLeft, kFullBottom + 20, UtcTime(t0));
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", kRight,
                     kFullBottom + 20, UtcTime(t1));

  // The classes, stacked from the bottom.
  struct Layer {
    const char* name;
    const char* color;
    uint64_t (*bytes)(const store::GrowthSample&);
  };
  const std::array<Layer, 4> layers = {{
      {"cold (logical)", "#9ecae1", [](const store::GrowthSample& s) { return s.cold_bytes; }},
      {"traces (hot)", "#fd8d3c", [](const store::GrowthSample& s) { return s.trace_bytes; }},
      {"tfevents", "#31a354", [](const store::GrowthSample& s) { return s.tfevents_bytes; }},
      {"other", "#bdbdbd", [](const store::GrowthSample& s) { return s.other_bytes; }},
  }};
  std::vector<double> below(series.size(), 0);
  for (size_t k = 0; k < layers.size(); ++k) {
    std::vector<double> above(series.size());
    for (size_t i = 0; i < series.size(); ++i)
      above[i] = below[i] + static_cast<double>(layers[k].bytes(series[i]));
    std::string points;
    for (size_t i = 0; i < series.size(); ++i)
      points += fmt::format("{:.1f},{:.1f} ", x(series[i].unix_s), y_bytes(above[i]));
    for (size_t i = series.size(); i-- > 0;)
      points += fmt::format("{:.1f},{:.1f} ", x(series[i].unix_s), y_bytes(below[i]));
    points.pop_back();
    svg += fmt::format(
        "<polygon points=\"{}\" fill=\"{}\" stroke=\"{}\"><title>{}</title></polygon>\n", points,
        layers[k].color, layers[k].color, layers[k].name);
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{}\">{}</text>\n",
        kRight - 150, kBytesTop + 16 * k, layers[k].color, kRight - 135, kBytesTop + 16 * k + 9,
        layers[k].name);
    below = std::move(above);
  }

  // How full the filesystem is, and the warning threshold.
  std::string line;
  for (const auto& s : series)
    line += fmt::format("{:.1f},{:.1f} ", x(s.unix_s), y_full(100 * s.fs_used_fraction()));
  line.pop_back();
  svg += fmt::format(
      "<polyline points=\"{}\" fill=\"none\" stroke=\"#3182bd\" stroke-width=\"2\"/>\n", line);
  const double warn = std::clamp(warn_at_pct, 0.0, 100.0);
  svg += fmt::format(
      "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#de2d26\" "
      "stroke-dasharray=\"6,4\"/>\n<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" "
      "fill=\"#de2d26\">warn at {:.0f}%</text>\n",
      kLeft, y_full(warn), kRight, y_full(warn), kRight, y_full(warn) - 4, warn);
  return svg + "</svg>\n";
}

}  // namespace tbfs::cli

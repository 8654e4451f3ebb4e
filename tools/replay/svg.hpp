// A small SVG line chart for memlake-replay --svg: memory over time, one
// polyline per series, horizontal reference lines, axes in GiB, a legend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memlake {

struct SvgSeries {
  std::string name;
  std::string color;
  std::vector<std::uint64_t> values;  // bytes, one per x
};

struct SvgLine {
  std::string name;
  std::string color;
  std::uint64_t value = 0;  // bytes
};

struct SvgChart {
  std::string title;
  std::string x_label;
  double x_scale = 1.0;  // axis labels show x * x_scale
  double x_min = 0;      // left end of the x axis
  std::vector<double> x;
  std::vector<SvgSeries> series;
  std::vector<SvgLine> lines;
};

std::string render_svg(const SvgChart& chart);
// Throws std::runtime_error naming the file when it cannot be written.
void write_svg(const std::string& path, const SvgChart& chart);

}  // namespace memlake

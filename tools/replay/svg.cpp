// SVG rendering for memlake-replay (see svg.hpp); plain text output, no
// dependencies.
#include "replay/svg.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace memlake {

namespace {

constexpr double kWidth = 1000;
constexpr double kHeight = 540;
constexpr double kLeft = 80;
constexpr double kRight = 24;
constexpr double kTop = 44;
constexpr double kBottom = 64;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string label(double v) {
  char buf[32];
  if (std::fabs(v) >= 1e6 && std::fabs(v - std::round(v)) < 1e-9) {
    std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
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

// A tick step of 1, 2 or 5 times a power of ten giving about `want` ticks.
double nice_step(double range, int want) {
  if (range <= 0) return 1;
  const double raw = range / want;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::string render_svg(const SvgChart& c) {
  const double pw = kWidth - kLeft - kRight;
  const double ph = kHeight - kTop - kBottom;
  const double x0 = c.x_min;
  double x1 = c.x.empty() ? x0 + 1 : c.x.back();
  if (x1 <= x0) x1 = x0 + 1;
  double ymax = 0;
  for (const SvgSeries& s : c.series) {
    for (std::uint64_t v : s.values) ymax = std::max(ymax, static_cast<double>(v) / kGiB);
  }
  for (const SvgLine& l : c.lines) ymax = std::max(ymax, static_cast<double>(l.value) / kGiB);
  if (ymax <= 0) ymax = 1;
  const double ystep = nice_step(ymax * 1.05, 6);
  const double ytop = std::ceil(ymax * 1.05 / ystep) * ystep;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double gib) { return kTop + ph - gib / ytop * ph; };

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" +
       num(kHeight) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) +
       "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(kWidth / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">" +
       escape(c.title) + "</text>\n";
  // Grid and y ticks.
  for (double y = 0; y <= ytop + ystep / 2; y += ystep) {
    s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(py(y)) + "\" x2=\"" + num(kLeft + pw) +
         "\" y2=\"" + num(py(y)) + "\" stroke=\"#e4e4e4\"/>\n";
    s += "<text x=\"" + num(kLeft - 8) + "\" y=\"" + num(py(y) + 4) + "\" text-anchor=\"end\">" +
         label(y) + "</text>\n";
  }
  const double xrange = (x1 - x0) * c.x_scale;
  const double xstep = nice_step(xrange, 8);
  for (double x = std::ceil(x0 * c.x_scale / xstep) * xstep; x <= x1 * c.x_scale + xstep * 1e-9;
       x += xstep) {
    const double X = px(x / c.x_scale);
    s += "<line x1=\"" + num(X) + "\" y1=\"" + num(kTop + ph) + "\" x2=\"" + num(X) + "\" y2=\"" +
         num(kTop + ph + 5) + "\" stroke=\"#444\"/>\n";
    s += "<text x=\"" + num(X) + "\" y=\"" + num(kTop + ph + 20) + "\" text-anchor=\"middle\">" +
         label(x) + "</text>\n";
  }
  s += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(pw) +
       "\" height=\"" + num(ph) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  s += "<text x=\"" + num(kLeft + pw / 2) + "\" y=\"" + num(kHeight - 18) +
       "\" text-anchor=\"middle\">" + escape(c.x_label) + "</text>\n";
  s += "<text transform=\"translate(22 " + num(kTop + ph / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">memory (GiB)</text>\n";
  // Reference lines, then series on top.
  for (const SvgLine& l : c.lines) {
    const double Y = py(static_cast<double>(l.value) / kGiB);
    s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(Y) + "\" x2=\"" + num(kLeft + pw) +
         "\" y2=\"" + num(Y) + "\" stroke=\"" + l.color + "\" stroke-dasharray=\"6 4\"/>\n";
  }
  for (const SvgSeries& ser : c.series) {
    std::string pts;
    const std::size_t n = std::min(ser.values.size(), c.x.size());
    for (std::size_t i = 0; i < n; ++i) {
      pts += num(px(c.x[i])) + "," + num(py(static_cast<double>(ser.values[i]) / kGiB)) + " ";
    }
    s += "<polyline fill=\"none\" stroke=\"" + ser.color + "\" stroke-width=\"1.5\" points=\"" +
         pts + "\"/>\n";
  }
  // Legend, top left inside the plot.
  const std::size_t entries = c.series.size() + c.lines.size();
  s += "<rect x=\"" + num(kLeft + 10) + "\" y=\"" + num(kTop + 10) + "\" width=\"300\" height=\"" +
       num(10 + 18 * static_cast<double>(entries)) +
       "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#bbb\"/>\n";
  double ly = kTop + 26;
  auto entry = [&](const std::string& name, const std::string& color, bool dashed) {
    s += "<line x1=\"" + num(kLeft + 20) + "\" y1=\"" + num(ly - 4) + "\" x2=\"" + num(kLeft + 48) +
         "\" y2=\"" + num(ly - 4) + "\" stroke=\"" + color + "\" stroke-width=\"2\"" +
         (dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
    s += "<text x=\"" + num(kLeft + 56) + "\" y=\"" + num(ly) + "\">" + escape(name) + "</text>\n";
    ly += 18;
  };
  for (const SvgSeries& ser : c.series) entry(ser.name, ser.color, false);
  for (const SvgLine& l : c.lines) entry(l.name, l.color, true);
  s += "</svg>\n";
  return s;
}

void write_svg(const std::string& path, const SvgChart& chart) {
  const std::string text = render_svg(chart);
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok)
    throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
}

}  // namespace memlake

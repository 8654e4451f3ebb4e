// Number formatting and the JSON builder of memlake-replay (see format.hpp).
#include "replay/format.hpp"

#include <cmath>
#include <cstdio>

#include "profiling/json_text.hpp"

namespace memlake {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string count(std::uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string gib(std::uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::uint64_t{1} << 30) || bytes == 0) return fmt("%.2f GiB", b / (1 << 30));
  if (bytes >= (std::uint64_t{1} << 20)) return fmt("%.2f MiB", b / (1 << 20));
  return fmt("%.2f KiB", b / (1 << 10));
}

std::string mib(std::uint64_t bytes) {
  const double m = static_cast<double>(bytes) / (1 << 20);
  return m == std::floor(m) ? count(static_cast<std::uint64_t>(m)) + " MiB" : fmt("%.2f MiB", m);
}

double ratio(std::uint64_t a, std::uint64_t b) {
  return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
}

std::string pad(std::string s, std::size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

Json& Json::key(std::string_view k) {
  s_ += first_ ? "" : ",";
  first_ = false;
  str(k);
  s_ += ':';
  return *this;
}

Json& Json::u(std::uint64_t v) {
  s_ += std::to_string(v);
  return *this;
}

Json& Json::i(std::int64_t v) {
  s_ += std::to_string(v);
  return *this;
}

Json& Json::d(double v) {
  s_ += std::isfinite(v) ? fmt("%.6g", v) : "null";
  return *this;
}

Json& Json::b(bool v) {
  s_ += v ? "true" : "false";
  return *this;
}

Json& Json::null() {
  s_ += "null";
  return *this;
}

Json& Json::str(std::string_view v) {
  json::string(s_, v);
  return *this;
}

Json& Json::raw(const std::string& json) {
  s_ += json;
  return *this;
}

}  // namespace memlake

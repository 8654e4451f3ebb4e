// Number formatting of memlake-replay's reports: sizes in GiB with two
// decimals (MiB or KiB below a GiB) for people, counts with thousands
// separators, and a small JSON object builder for --json.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace memlake {

std::string fmt(const char* format, double v);
// 1234567 -> "1,234,567"
std::string count(std::uint64_t v);
// "13.14 GiB"; MiB or KiB below a GiB, so that small traces read well.
std::string gib(std::uint64_t bytes);
// "2 MiB", "1.50 MiB"
std::string mib(std::uint64_t bytes);
// a / b, 0 when b is 0.
double ratio(std::uint64_t a, std::uint64_t b);
// `s` padded with spaces to `width` (on the left when `right`).
std::string pad(std::string s, std::size_t width, bool right = false);

// One JSON object, built key by key: Json().key("a").u(1).done() is {"a":1}.
class Json {
 public:
  Json& key(std::string_view k);
  Json& u(std::uint64_t v);
  Json& i(std::int64_t v);
  Json& d(double v);  // null when not finite
  Json& b(bool v);
  Json& null();
  Json& str(std::string_view v);
  Json& raw(const std::string& json);  // a value already in JSON
  std::string done() const { return "{" + s_ + "}"; }

 private:
  std::string s_;
  bool first_ = true;
};

}  // namespace memlake

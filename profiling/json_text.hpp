// Appending JSON text: the few pieces the timeline and the snapshot write
// (strings are ASCII names the profiler makes, escaped all the same).
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace memlake::json {

inline void string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || c == '<') {  // '<': safe to embed in an HTML <script>
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

inline void number(std::string& out, std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%" PRIu64, v);
  out += buf;
}

inline void number(std::string& out, std::int64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%" PRId64, v);
  out += buf;
}

// Nanoseconds as microseconds with three decimals: the Trace Event format's
// unit, exact to the nanosecond. Negative values are clamped to 0.
inline void micros(std::string& out, std::int64_t ns) {
  if (ns < 0) ns = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
  out += buf;
}

// An address as "0x..." text: JSON numbers lose precision past 2^53.
inline void address(std::string& out, std::uint64_t a) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"0x%" PRIx64 "\"", a);
  out += buf;
}

}  // namespace memlake::json

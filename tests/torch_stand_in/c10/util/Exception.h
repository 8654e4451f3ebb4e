// Stand-in for PyTorch's c10/util/Exception.h: c10::Error and TORCH_CHECK,
// whose message is its arguments streamed one after another.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace c10 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  const char* what_without_backtrace() const noexcept { return what(); }
};

template <class... Parts>
[[noreturn]] void torch_check_failed(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  throw Error(out.str());
}

}  // namespace c10

#define TORCH_CHECK(condition, ...) \
  if (!(condition)) ::c10::torch_check_failed("" __VA_OPT__(, ) __VA_ARGS__)

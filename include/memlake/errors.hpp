// Exceptions of the C++ API. The C API turns them into return values and a
// message from memlake_last_error().
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace memlake {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The request could not be met even after reclaiming cached memory.
class out_of_memory : public error {
 public:
  out_of_memory(const std::string& what, std::size_t requested)
      : error(what), requested_(requested) {}
  std::size_t requested() const noexcept { return requested_; }

 private:
  std::size_t requested_;
};

// Bad input from the caller: double free, unknown or interior pointer,
// impossible size, wrong device.
class misuse : public error {
 public:
  using error::error;
};

// A bad configuration key or value.
class config_error : public error {
 public:
  using error::error;
};

// A backend call failed for a reason other than memory exhaustion.
class backend_error : public error {
 public:
  using error::error;
};

}  // namespace memlake

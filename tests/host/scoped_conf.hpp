// ScopedConf: MEMLAKE_CONF holds a suite's options for a scope and is put
// back (or unset) after it, also when an assertion leaves the scope early.
// The C API suites create their devices' allocators inside one: the
// allocators take the suite's options, and the rest of the test binary sees
// the environment it started with.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace memlake::test {

class ScopedConf {
 public:
  explicit ScopedConf(const char* conf) {
    if (const char* old = std::getenv("MEMLAKE_CONF")) saved_ = old;
    ::setenv("MEMLAKE_CONF", conf, 1);
  }
  ~ScopedConf() {
    if (saved_)
      ::setenv("MEMLAKE_CONF", saved_->c_str(), 1);
    else
      ::unsetenv("MEMLAKE_CONF");
  }
  ScopedConf(const ScopedConf&) = delete;
  ScopedConf& operator=(const ScopedConf&) = delete;

 private:
  std::optional<std::string> saved_;
};

}  // namespace memlake::test

// The graph suites' device work on the HostBackend: host functions over the
// memory in place. Their arguments live as long as the platform, since a
// captured graph calls them at every replay.
#pragma once

#include <deque>
#include <mutex>

#include "suites/device_work.hpp"

namespace memlake::test {

class HostWork final : public DeviceWork {
 public:
  void fill(Backend& b, StreamHandle s, std::uint32_t* dst, std::size_t words,
            std::uint32_t seed) override;
  void mix(Backend& b, StreamHandle s, const std::uint32_t* src, std::uint32_t* dst,
           std::size_t words, std::uint32_t key) override;
  void accumulate(Backend& b, StreamHandle s, const std::uint32_t* src, std::size_t words,
                  std::uint32_t* acc, std::size_t acc_words) override;
  void delay(Backend& b, StreamHandle s, std::chrono::microseconds d) override;

 private:
  struct Args {
    const std::uint32_t* src = nullptr;
    std::uint32_t* dst = nullptr;
    std::size_t words = 0;
    std::size_t acc_words = 0;
    std::uint32_t key = 0;
    std::chrono::microseconds delay{0};
  };
  void launch(Backend& b, StreamHandle s, HostFn fn, const Args& a);

  std::mutex mutex_;
  std::deque<Args> args_;
};

}  // namespace memlake::test

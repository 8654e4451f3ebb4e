// Host functions of the graph suites' device work (host_work.hpp).
#include "host/host_work.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace memlake::test {

void HostWork::launch(Backend& b, StreamHandle s, HostFn fn, const Args& a) {
  Args* stored;
  {
    std::lock_guard lock(mutex_);
    stored = &args_.emplace_back(a);
  }
  ASSERT_EQ(b.launch_host_func(s, fn, stored), Status::ok) << b.last_error();
}

void HostWork::fill(Backend& b, StreamHandle s, std::uint32_t* dst, std::size_t words,
                    std::uint32_t seed) {
  launch(
      b, s,
      [](void* p) {
        const auto& a = *static_cast<const Args*>(p);
        for (std::size_t i = 0; i < a.words; ++i)
          a.dst[i] = work_word(a.key, static_cast<std::uint32_t>(i));
      },
      Args{nullptr, dst, words, 0, seed, {}});
}

void HostWork::mix(Backend& b, StreamHandle s, const std::uint32_t* src, std::uint32_t* dst,
                   std::size_t words, std::uint32_t key) {
  launch(
      b, s,
      [](void* p) {
        const auto& a = *static_cast<const Args*>(p);
        for (std::size_t i = 0; i < a.words; ++i)
          a.dst[i] = mix_word(a.src[i], a.key, static_cast<std::uint32_t>(i));
      },
      Args{src, dst, words, 0, key, {}});
}

void HostWork::accumulate(Backend& b, StreamHandle s, const std::uint32_t* src, std::size_t words,
                          std::uint32_t* acc, std::size_t acc_words) {
  launch(
      b, s,
      [](void* p) {
        const auto& a = *static_cast<const Args*>(p);
        for (std::size_t i = 0; i < a.words; ++i) a.dst[i % a.acc_words] += a.src[i];
      },
      Args{src, acc, words, acc_words, 0, {}});
}

void HostWork::delay(Backend& b, StreamHandle s, std::chrono::microseconds d) {
  launch(
      b, s, [](void* p) { std::this_thread::sleep_for(static_cast<const Args*>(p)->delay); },
      Args{nullptr, nullptr, 0, 0, 0, d});
}

}  // namespace memlake::test

// graph_step's kernels as host functions (step_work.hpp). Their arguments
// live as long as the Work, since captured graphs call them at every replay.
#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>

#include "backend/backend.hpp"
#include "step_work.hpp"

namespace graph_step {

namespace {

class HostWork final : public Work {
 public:
  explicit HostWork(memlake::Backend& b) : backend_(b) {}

  void layer(memlake::Stream s, const std::uint32_t* src, std::size_t src_words, std::uint32_t* dst,
             std::size_t dst_words, std::uint32_t key) override {
    launch(s, &run_layer, Args{src, src_words, dst, dst_words, key});
  }
  void accumulate(memlake::Stream s, const std::uint32_t* src, std::size_t words,
                  std::uint32_t* acc, std::size_t acc_words) override {
    launch(s, &run_accumulate, Args{src, words, acc, acc_words, 0});
  }
  void read(const void* p, void* out, std::size_t bytes) override {
    std::copy_n(static_cast<const char*>(p), bytes, static_cast<char*>(out));
  }

 private:
  struct Args {
    const std::uint32_t* src;
    std::size_t src_words;
    std::uint32_t* dst;
    std::size_t dst_words;
    std::uint32_t key;
  };
  static void run_layer(void* p) {
    const Args& a = *static_cast<const Args*>(p);
    for (std::size_t i = 0; i < a.dst_words; ++i)
      a.dst[i] = word(a.src[i % a.src_words] ^ a.key, static_cast<std::uint32_t>(i));
  }
  static void run_accumulate(void* p) {
    const Args& a = *static_cast<const Args*>(p);
    for (std::size_t i = 0; i < a.src_words; ++i) a.dst[i % a.dst_words] += a.src[i];
  }
  void launch(memlake::Stream s, memlake::HostFn fn, const Args& a) {
    args_.push_back(a);
    if (backend_.launch_host_func(s, fn, &args_.back()) != memlake::Status::ok)
      throw std::runtime_error("launch_host_func failed: " + backend_.last_error());
  }

  memlake::Backend& backend_;
  std::deque<Args> args_;
};

}  // namespace

std::unique_ptr<Work> host_work(memlake::Backend& backend) {
  return std::make_unique<HostWork>(backend);
}

}  // namespace graph_step

// Out of memory at the true device limit while another process holds part of
// the device: memlake's capacity is set above what is really there, so the
// limit is the driver's (cuMemCreate fails), not memlake's bookkeeping. The
// allocator must report it cleanly, stay usable, and use the memory once
// the other process has given it back.
//
// The other process is this test binary again, running only the holder test
// below (which skips unless asked for through the environment).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "memlake/allocator.hpp"

extern char** environ;

namespace memlake {
namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30;

// Runs only inside the child: takes MEMLAKE_TEST_HOLD_BYTES of device memory,
// says so in MEMLAKE_TEST_READY, and keeps it until killed.
TEST(GpuOtherProcess, HolderProcess) {
  const char* bytes = std::getenv("MEMLAKE_TEST_HOLD_BYTES");
  const char* ready = std::getenv("MEMLAKE_TEST_READY");
  if (!bytes || !ready) GTEST_SKIP() << "runs only as the memory-holding child process";
  void* p = nullptr;
  const std::size_t n = std::strtoull(bytes, nullptr, 10);
  ASSERT_EQ(cudaMalloc(&p, n), cudaSuccess);
  ASSERT_EQ(cudaMemset(p, 0x7B, n), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::ofstream(ready) << "ready\n";
  std::this_thread::sleep_for(std::chrono::seconds(300));  // killed long before
}

TEST(GpuOtherProcess, OutOfMemoryWhileAnotherProcessHoldsMemoryThenRecovery) {
  if (CudaBackend::device_count() == 0) GTEST_SKIP() << "no GPU";
  std::size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  const std::size_t hold = free_before / 2 / kGiB * kGiB;
  ASSERT_GT(hold, 4 * kGiB);

  const std::string ready = "/tmp/memlake_holder_ready_" + std::to_string(getpid());
  std::remove(ready.c_str());
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  env_strings.push_back("MEMLAKE_TEST_HOLD_BYTES=" + std::to_string(hold));
  env_strings.push_back("MEMLAKE_TEST_READY=" + ready);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--gtest_filter=GpuOtherProcess.HolderProcess";
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  auto kill_child = [&] {
    if (child > 0) {
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
      child = 0;
    }
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::ifstream(ready).good() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!std::ifstream(ready).good()) {
    kill_child();
    FAIL() << "the holder process did not take its memory";
  }

  std::size_t free_now = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_now, &total), cudaSuccess);
  Config c;
  c.backend = BackendKind::cuda;
  c.capacity = total;  // above what is there: the driver's limit is the one met
  Allocator a(c);
  std::vector<void*> live;
  std::string message;
  for (std::size_t i = 0; i < total / kGiB + 2 && message.empty(); ++i) {
    try {
      live.push_back(a.allocate(kGiB));
    } catch (const out_of_memory& e) {
      message = e.what();
    }
  }
  EXPECT_FALSE(message.empty()) << "no out_of_memory";
  EXPECT_NE(message.find("requested 1073741824 bytes"), std::string::npos) << message;
  // The other process's memory was not available, and nearly all the rest was.
  EXPECT_LE(live.size() * kGiB, free_now);
  EXPECT_GE(live.size() * kGiB + 2 * kGiB, free_now) << message;
  const std::size_t got_while_held = live.size();
  std::printf("[   INFO   ] %zu GiB while another process held %zu GiB: %s\n", got_while_held,
              hold / kGiB, message.c_str());

  // Still usable: free two blocks, allocate them again.
  for (int i = 0; i < 2; ++i) {
    a.deallocate(live.back(), kGiB);
    live.pop_back();
  }
  a.process_pending_frees();
  for (int i = 0; i < 2; ++i) live.push_back(a.allocate(kGiB));
  EXPECT_EQ(cudaMemset(live.back(), 1, kGiB), cudaSuccess);

  // The other process gives its memory back: memlake can use it.
  kill_child();
  void* more = nullptr;
  for (int tries = 0; tries < 100 && !more; ++tries) {
    try {
      more = a.allocate(kGiB);
    } catch (const out_of_memory&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the driver frees it lazily
    }
  }
  ASSERT_NE(more, nullptr) << "the memory the other process released never became available";
  EXPECT_EQ(cudaMemset(more, 2, kGiB), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(a.check_invariants(), "");
  a.deallocate(more, kGiB);
  for (void* p : live) a.deallocate(p, kGiB);
  std::remove(ready.c_str());
}

}  // namespace
}  // namespace memlake

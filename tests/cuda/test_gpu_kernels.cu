// GPU-only tests of memlake::Allocator over the CudaBackend where kernels,
// not copies, touch the memory: a kernel writes through a stitched block and
// another reads the same bytes through the chunks' own mappings; kernels on
// several streams write and verify their blocks while blocks are freed and
// reused across streams; and the allocator runs into the device's real memory
// limit, reports it, and recovers with the bytes of live blocks intact.
// Every check counts mismatching words on the GPU and asserts zero, and every
// test skips where no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "allocator/allocator_impl.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "memlake/allocator.hpp"
#include "stitched_block.hpp"

namespace memlake {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;
constexpr int kBlocks = 264;  // two per multiprocessor on an H200
constexpr int kThreads = 256;

#define SKIP_WITHOUT_GPU() \
  if (memlake::CudaBackend::device_count() == 0) GTEST_SKIP() << "no GPU"

#define ASSERT_CUDA(expr)                                                      \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

// The word at index i of the pattern of `seed` (the same hash as the shared
// suites' pattern_word), so a word read at the wrong place or from another
// block does not match.
__host__ __device__ inline std::uint32_t pattern_word(std::uint32_t seed, std::uint64_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(seed) << 32) ^ (i * 0x9E3779B97F4A7C15ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<std::uint32_t>(x);
}

// Writes words [first, first + n) of the pattern of `seed` to p[0, n).
__global__ void fill_words(std::uint32_t* p, std::size_t n, std::uint32_t seed, std::size_t first) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    p[i] = pattern_word(seed, first + i);
}

// Counts the words of p[0, n) that differ from words [first, first + n) of
// the pattern, and the words looked at.
__global__ void count_mismatches(const std::uint32_t* p, std::size_t n, std::uint32_t seed,
                                 std::size_t first, unsigned long long* bad,
                                 unsigned long long* seen) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned long long my_bad = 0, my_seen = 0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    my_bad += p[i] != pattern_word(seed, first + i) ? 1 : 0;
    ++my_seen;
  }
  if (my_bad) atomicAdd(bad, my_bad);
  if (my_seen) atomicAdd(seen, my_seen);
}

// Keeps a stream busy for about `cycles` clock cycles, so that work queued
// after it (a verification) runs late: a block handed to another stream too
// early would be overwritten before it is checked.
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// Two device counters (mismatches, words checked) read back at the end.
class Counters {
 public:
  Counters() {
    if (cudaMalloc(&d_, 2 * sizeof(unsigned long long)) != cudaSuccess) d_ = nullptr;
    if (d_) cudaMemset(d_, 0, 2 * sizeof(unsigned long long));
  }
  ~Counters() { cudaFree(d_); }
  Counters(const Counters&) = delete;
  Counters& operator=(const Counters&) = delete;
  bool ok() const { return d_ != nullptr; }
  unsigned long long* bad() const { return d_; }
  unsigned long long* seen() const { return d_ + 1; }
  // Waits for the whole device, then reads both counters and zeroes them.
  cudaError_t read(unsigned long long* bad, unsigned long long* seen) {
    unsigned long long h[2] = {0, 0};
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(h, d_, sizeof h, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) e = cudaMemset(d_, 0, sizeof h);
    *bad = h[0];
    *seen = h[1];
    return e;
  }

 private:
  unsigned long long* d_ = nullptr;
};

void fill(void* p, std::size_t bytes, std::uint32_t seed, std::size_t first_word,
          cudaStream_t stream) {
  fill_words<<<kBlocks, kThreads, 0, stream>>>(static_cast<std::uint32_t*>(p), bytes / 4, seed,
                                               first_word);
}

void verify(const void* p, std::size_t bytes, std::uint32_t seed, std::size_t first_word,
            const Counters& c, cudaStream_t stream) {
  count_mismatches<<<kBlocks, kThreads, 0, stream>>>(
      static_cast<const std::uint32_t*>(p), bytes / 4, seed, first_word, c.bad(), c.seen());
}

// Launches each kernel once on nothing, so that its code is loaded while the
// device still has free memory (modules load lazily, at the first launch).
::testing::AssertionResult warm_up_kernels(const Counters& c) {
  fill_words<<<1, 1>>>(nullptr, 0, 0, 0);
  count_mismatches<<<1, 1>>>(nullptr, 0, 0, 0, c.bad(), c.seen());
  spin<<<1, 1>>>(0);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return ::testing::AssertionFailure() << cudaGetErrorString(e);
  return ::testing::AssertionSuccess();
}

Config cuda_config() {
  Config c;
  c.backend = BackendKind::cuda;
  return c;
}

TEST(GpuKernels, StitchedBlockWrittenByAKernelReadsBackThroughTheChunksOwnMappings) {
  SKIP_WITHOUT_GPU();
  Counters counters;
  ASSERT_TRUE(counters.ok());
  ASSERT_TRUE(warm_up_kernels(counters));
  Config c = cuda_config();
  c.max_chunk = 2 * kMiB;  // every chunk one granule, so the 8 MiB block is a stitch
  c.capacity = 256 * kMiB;
  Allocator a(c);

  const StitchedBlock stitched = allocate_stitched_block(a);
  ASSERT_CUDA(stitched.sync);
  void* big = stitched.ptr;
  const Stats& before = stitched.before;
  const Stats after = a.stats();
  ASSERT_GT(after.rung_stitch.current, before.rung_stitch.current) << "no stitch happened";
  EXPECT_EQ(after.reserved_bytes.current, before.reserved_bytes.current)
      << "the stitch created memory instead of reusing the free chunks";

  const auto aliases = a.impl().aliases(big);
  ASSERT_EQ(aliases.size(), 4u) << "four 2 MiB chunks, each also mapped in its own block";
  std::size_t total = 0;
  for (const auto& [va, len] : aliases) {
    EXPECT_NE(va, reinterpret_cast<DevicePtr>(big) + total) << "an alias is the block itself";
    total += len;
  }
  ASSERT_EQ(total, 8 * kMiB);

  // Written by a kernel through the stitched range, read through each chunk's
  // other mapping.
  fill(big, 8 * kMiB, 7, 0, nullptr);
  std::size_t offset = 0;
  for (const auto& [va, len] : aliases) {
    verify(reinterpret_cast<void*>(va), len, 7, offset / 4, counters, nullptr);
    offset += len;
  }
  ASSERT_CUDA(cudaGetLastError());
  unsigned long long bad = 0, seen = 0;
  ASSERT_CUDA(counters.read(&bad, &seen));
  EXPECT_EQ(bad, 0u) << "words that differ through the alias mappings";
  EXPECT_EQ(seen, 8 * kMiB / 4) << "every word was checked";

  // The checker sees a wrong pattern (so a zero above means something)...
  verify(reinterpret_cast<void*>(aliases[0].first), aliases[0].second, 8, 0, counters, nullptr);
  ASSERT_CUDA(counters.read(&bad, &seen));
  EXPECT_GT(bad, seen / 2) << "the checker accepted another seed's pattern";

  // ...and bytes written through the aliases show through the stitched range.
  offset = 0;
  for (const auto& [va, len] : aliases) {
    fill(reinterpret_cast<void*>(va), len, 9, offset / 4, nullptr);
    offset += len;
  }
  verify(big, 8 * kMiB, 9, 0, counters, nullptr);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(counters.read(&bad, &seen));
  EXPECT_EQ(bad, 0u) << "words that differ through the stitched range";
  EXPECT_EQ(seen, 8 * kMiB / 4);

  a.deallocate(big, 8 * kMiB);
  ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(a.check_invariants(), "");
}

// Blocks move between four streams (freed on their own stream, handed over
// by record_stream, freed on another stream) while kernels still use them;
// every word is checked late on the GPU. Frees go to the lake at once and a
// stream given another's memory waits on its fence.
TEST(GpuKernels, KernelsOnSeveralStreamsKeepTheirBlocksWhileBlocksMoveBetweenStreams) {
  SKIP_WITHOUT_GPU();
  Counters counters;
  ASSERT_TRUE(counters.ok());
  ASSERT_TRUE(warm_up_kernels(counters));
  Config c = cuda_config();
  c.capacity = 2 * kGiB;
  Allocator a(c);

  constexpr int kStreams = 4;
  constexpr int kRounds = 48;
  constexpr long long kSpinCycles = 40000;  // ~20 us at H200 clocks
  std::vector<cudaStream_t> streams;
  for (int i = 0; i < kStreams; ++i)
    streams.push_back(static_cast<cudaStream_t>(a.create_stream()));
  std::vector<cudaEvent_t> events(kStreams);
  for (auto& e : events) ASSERT_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  struct Live {
    void* p;
    std::size_t bytes;
    std::uint32_t seed;
    int stream;
  };
  std::vector<Live> live;
  std::mt19937 rng(20240613);
  const std::size_t sizes[] = {4096, 64 * 1024, 1 * kMiB, 3 * kMiB - 512, 8 * kMiB, 20 * kMiB};
  std::uint32_t next_seed = 1;
  unsigned long long expected_words = 0;
  std::size_t handed_over = 0, freed_elsewhere = 0;

  for (int round = 0; round < kRounds; ++round) {
    // Each stream allocates new blocks and fills them.
    for (int s = 0; s < kStreams; ++s) {
      for (int k = 0; k < 3; ++k) {
        const std::size_t bytes = sizes[rng() % std::size(sizes)];
        void* p = a.allocate(bytes, streams[s]);
        const std::uint32_t seed = next_seed++;
        fill(p, bytes, seed, 0, streams[s]);
        live.push_back({p, bytes, seed, s});
      }
    }
    // About half the live blocks are checked, late, and freed: on their own
    // stream, after a handover to another stream (record_stream), or on the
    // other stream itself.
    for (std::size_t i = 0; i < live.size();) {
      if (rng() % 2) {
        ++i;
        continue;
      }
      const Live b = live[i];
      live[i] = live.back();
      live.pop_back();
      const int other = (b.stream + 1 + static_cast<int>(rng() % (kStreams - 1))) % kStreams;
      switch (rng() % 3) {
        case 0:
          spin<<<1, 1, 0, streams[b.stream]>>>(kSpinCycles);
          verify(b.p, b.bytes, b.seed, 0, counters, streams[b.stream]);
          a.deallocate(b.p, b.bytes, streams[b.stream]);
          break;
        case 1:
          ASSERT_CUDA(cudaEventRecord(events[b.stream], streams[b.stream]));
          ASSERT_CUDA(cudaStreamWaitEvent(streams[other], events[b.stream], 0));
          spin<<<1, 1, 0, streams[other]>>>(kSpinCycles);
          verify(b.p, b.bytes, b.seed, 0, counters, streams[other]);
          a.record_stream(b.p, streams[other]);
          a.deallocate(b.p, b.bytes, streams[b.stream]);
          ++handed_over;
          break;
        default:
          ASSERT_CUDA(cudaEventRecord(events[b.stream], streams[b.stream]));
          ASSERT_CUDA(cudaStreamWaitEvent(streams[other], events[b.stream], 0));
          spin<<<1, 1, 0, streams[other]>>>(kSpinCycles);
          verify(b.p, b.bytes, b.seed, 0, counters, streams[other]);
          a.deallocate(b.p, b.bytes, streams[other]);
          ++freed_elsewhere;
          break;
      }
      expected_words += b.bytes / 4;
    }
    ASSERT_CUDA(cudaGetLastError());
    if (round % 8 == 7) a.process_pending_frees();
  }
  // The survivors are checked on their own streams.
  for (const Live& b : live) {
    verify(b.p, b.bytes, b.seed, 0, counters, streams[b.stream]);
    expected_words += b.bytes / 4;
  }
  for (cudaStream_t s : streams) ASSERT_CUDA(cudaStreamSynchronize(s));
  unsigned long long bad = 0, seen = 0;
  ASSERT_CUDA(counters.read(&bad, &seen));
  EXPECT_EQ(bad, 0u) << "words overwritten or lost while blocks moved between streams";
  EXPECT_EQ(seen, expected_words) << "every queued check ran";
  EXPECT_GT(handed_over, 0u);
  EXPECT_GT(freed_elsewhere, 0u);

  for (const Live& b : live) a.deallocate(b.p, b.bytes, streams[b.stream]);
  for (cudaStream_t s : streams) ASSERT_CUDA(cudaStreamSynchronize(s));
  const Stats st = a.stats();
  EXPECT_EQ(st.allocs.current, st.frees.current);
  EXPECT_GT(st.cross_stream_waits.current, 0) << "no stream waited for another's free";
  EXPECT_EQ(st.host_waits.current, 0);
  EXPECT_EQ(a.check_invariants(), "");
  for (auto& e : events) ASSERT_CUDA(cudaEventDestroy(e));
  for (cudaStream_t s : streams) a.destroy_stream(s);
}

TEST(GpuKernels, OutOfMemoryAtTheDeviceLimitThenRecoveryWithBytesIntact) {
  SKIP_WITHOUT_GPU();
  Counters counters;
  ASSERT_TRUE(counters.ok());
  ASSERT_TRUE(warm_up_kernels(counters));
  Config c = cuda_config();
  c.capacity = 0;  // the device's free memory
  Allocator a(c);
  ASSERT_GT(a.capacity(), kGiB);

  struct Live {
    void* p;
    std::uint32_t seed;
  };
  std::vector<Live> live;
  const std::size_t limit = a.capacity() / kGiB + 8;  // the loop must end by an OOM
  std::string message;
  std::size_t requested = 0;
  for (std::size_t i = 0; i < limit && message.empty(); ++i) {
    try {
      void* p = a.allocate(kGiB);
      const auto seed = static_cast<std::uint32_t>(100 + i);
      fill(p, kGiB, seed, 0, nullptr);
      live.push_back({p, seed});
    } catch (const out_of_memory& e) {
      message = e.what();
      requested = e.requested();
    }
  }
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_FALSE(message.empty()) << "no out_of_memory after " << live.size() << " GiB";
  ASSERT_GE(live.size(), 2u);
  std::printf("[   INFO   ] %zu GiB allocated before: %s\n", live.size(), message.c_str());
  EXPECT_EQ(requested, kGiB);
  EXPECT_NE(message.find("out of memory"), std::string::npos) << message;
  EXPECT_NE(message.find("requested 1073741824 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("largest free block"), std::string::npos) << message;
  EXPECT_NE(message.find("capacity"), std::string::npos) << message;
  EXPECT_EQ(a.stats().ooms.current, 1);

  // Free every other block, then take the same number again.
  std::vector<Live> kept;
  std::size_t freed = 0;
  for (std::size_t i = 0; i < live.size(); ++i) {
    if (i % 2) {
      a.deallocate(live[i].p, kGiB);
      ++freed;
    } else {
      kept.push_back(live[i]);
    }
  }
  a.process_pending_frees();
  for (std::size_t i = 0; i < freed; ++i) {
    void* p = nullptr;
    try {
      p = a.allocate(kGiB);
    } catch (const error& e) {
      FAIL() << "allocation " << i << " of " << freed << " after freeing failed: " << e.what();
    }
    const auto seed = static_cast<std::uint32_t>(5000 + i);
    fill(p, kGiB, seed, 0, nullptr);
    kept.push_back({p, seed});
  }
  for (const Live& b : kept) verify(b.p, kGiB, b.seed, 0, counters, nullptr);
  ASSERT_CUDA(cudaGetLastError());
  unsigned long long bad = 0, seen = 0;
  ASSERT_CUDA(counters.read(&bad, &seen));
  EXPECT_EQ(bad, 0u) << "words lost across the out-of-memory and the reuse";
  EXPECT_EQ(seen, kept.size() * (kGiB / 4));
  EXPECT_EQ(a.stats().ooms.current, 1);
  EXPECT_EQ(a.check_invariants(), "");
  for (const Live& b : kept) a.deallocate(b.p, kGiB);
  ASSERT_CUDA(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace memlake

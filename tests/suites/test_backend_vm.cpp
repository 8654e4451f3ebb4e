// The virtual-memory half of the backend contract (src/backend/backend.hpp),
// on every platform and adaptor stack: reserved ranges, chunks mapped whole
// at several addresses showing the same bytes, stitched ranges, unmap and
// remap, capacity, bad arguments, per-thread errors, many threads at once.
// What only one backend does (HostBackend's tables and messages, the CUDA
// driver's results) is tested in tests/host/ and tests/cuda/.
#include <gmock/gmock.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "suites/backend_contract.hpp"

namespace memlake::test {
namespace {

using ::testing::HasSubstr;

TEST_P(BackendVm, ReportsGranularityCapacityAndNothingCreated) {
  auto b = make();
  EXPECT_STRNE(b->name(), "");
  EXPECT_GE(b->device(), 0);
  const std::size_t g = b->granularity();
  EXPECT_GT(g, 0u);
  EXPECT_EQ(g & (g - 1), 0u) << "granularity is a power of two";
  EXPECT_GT(b->capacity(), 0u);
  EXPECT_EQ(b->physical_bytes(), 0u);
  EXPECT_EQ(make(10 * g)->capacity(), 10 * g) << "an explicit capacity is the capacity";
}

TEST_P(BackendVm, ReserveIsAlignedAndRejectsBadSizes) {
  auto b = make();
  const std::size_t g = b->granularity();
  DevicePtr va = 0, vb = 0;
  ASSERT_EQ(b->reserve(3 * g, &va), Status::ok) << b->last_error();
  ASSERT_EQ(b->reserve(g, &vb), Status::ok) << b->last_error();
  EXPECT_EQ(va % g, 0u);
  EXPECT_EQ(vb % g, 0u);
  EXPECT_TRUE(vb >= va + 3 * g || vb + g <= va) << "ranges overlap";
  DevicePtr untouched = 77;
  EXPECT_EQ(b->reserve(0, &untouched), Status::invalid_argument);
  EXPECT_EQ(b->reserve(g / 2, &untouched), Status::invalid_argument);
  EXPECT_EQ(untouched, 77u) << "a refused reservation leaves its output alone";
  EXPECT_EQ(b->reserve(g, nullptr), Status::invalid_argument);
  EXPECT_EQ(b->unreserve(va, 3 * g), Status::ok) << b->last_error();
  EXPECT_EQ(b->unreserve(vb, g), Status::ok) << b->last_error();
  EXPECT_EQ(leftovers(*b), "");
}

TEST_P(BackendVm, OneChunkAtTwoAddressesShowsTheSameBytes) {
  auto b = make();
  const std::size_t g = b->granularity();
  ChunkHandle c = 0;
  DevicePtr va = 0, vb = 0;
  ASSERT_EQ(b->create_chunk(g, &c), Status::ok) << b->last_error();
  EXPECT_EQ(b->physical_bytes(), g);
  ASSERT_EQ(b->reserve(g, &va), Status::ok) << b->last_error();
  ASSERT_EQ(b->reserve(g, &vb), Status::ok) << b->last_error();
  ASSERT_EQ(b->map(va, g, c), Status::ok) << b->last_error();
  ASSERT_EQ(b->map(vb, g, c), Status::ok) << b->last_error();
  EXPECT_EQ(b->physical_bytes(), g) << "a second mapping takes no memory";
  ASSERT_EQ(b->set_access(va, g), Status::ok) << b->last_error();
  ASSERT_EQ(b->set_access(vb, g), Status::ok) << b->last_error();

  fill(va, g, 7);
  EXPECT_TRUE(holds(vb, g, 7)) << "written at one address, read at the other";
  fill(vb, g, 8);
  EXPECT_TRUE(holds(va, g, 8)) << "and the other way round";
  EXPECT_FALSE(holds(va, g, 7)) << "the check must see a changed pattern";

  EXPECT_EQ(b->unmap(va, g), Status::ok) << b->last_error();
  EXPECT_EQ(b->unmap(vb, g), Status::ok) << b->last_error();
  EXPECT_EQ(b->release_chunk(c), Status::ok) << b->last_error();
  EXPECT_EQ(b->physical_bytes(), 0u);
  EXPECT_EQ(b->unreserve(va, g), Status::ok) << b->last_error();
  EXPECT_EQ(b->unreserve(vb, g), Status::ok) << b->last_error();
  EXPECT_EQ(leftovers(*b), "");
}

TEST_P(BackendVm, StitchedRangeShowsBytesOfEachChunk) {
  // Two chunks, each mapped on its own, then both stitched into one range
  // (the second first: the order of the maps does not matter).
  auto b = make();
  const std::size_t g = b->granularity();
  ChunkHandle c1 = 0, c2 = 0;
  DevicePtr v1 = 0, v2 = 0, s = 0;
  ASSERT_EQ(b->create_chunk(g, &c1), Status::ok) << b->last_error();
  ASSERT_EQ(b->create_chunk(2 * g, &c2), Status::ok) << b->last_error();
  ASSERT_EQ(b->reserve(g, &v1), Status::ok);
  ASSERT_EQ(b->reserve(2 * g, &v2), Status::ok);
  ASSERT_EQ(b->reserve(3 * g, &s), Status::ok);
  ASSERT_EQ(b->map(v1, g, c1), Status::ok) << b->last_error();
  ASSERT_EQ(b->map(v2, 2 * g, c2), Status::ok) << b->last_error();
  ASSERT_EQ(b->set_access(v1, g), Status::ok) << b->last_error();
  ASSERT_EQ(b->set_access(v2, 2 * g), Status::ok) << b->last_error();
  fill(v1, g, 1);
  fill(v2, 2 * g, 2);

  ASSERT_EQ(b->map(s + g, 2 * g, c2), Status::ok) << b->last_error();
  ASSERT_EQ(b->map(s, g, c1), Status::ok) << b->last_error();
  ASSERT_EQ(b->set_access(s, 3 * g), Status::ok)
      << "one call over the whole stitched range: " << b->last_error();
  EXPECT_TRUE(holds(s, g, 1));
  EXPECT_TRUE(holds(s + g, 2 * g, 2));

  // Writes through the stitched range, across the chunk boundary, land in
  // the chunks.
  fill(s, 3 * g, 3);
  EXPECT_TRUE(holds(v1, g, 3));
  EXPECT_FALSE(holds(v2, 2 * g, 2)) << "the write reached the second chunk too";
  fill(s + g, 2 * g, 4);
  EXPECT_TRUE(holds(v2, 2 * g, 4));

  EXPECT_EQ(b->unmap(s, 3 * g), Status::ok) << "one call over both chunks: " << b->last_error();
  EXPECT_TRUE(holds(v1, g, 3)) << "the chunks' own mappings stay";
  EXPECT_TRUE(holds(v2, 2 * g, 4));
  EXPECT_EQ(b->unmap(v1, g), Status::ok);
  EXPECT_EQ(b->unmap(v2, 2 * g), Status::ok);
  EXPECT_EQ(b->release_chunk(c1), Status::ok);
  EXPECT_EQ(b->release_chunk(c2), Status::ok);
  EXPECT_EQ(b->unreserve(s, 3 * g), Status::ok);
  EXPECT_EQ(b->unreserve(v1, g), Status::ok);
  EXPECT_EQ(b->unreserve(v2, 2 * g), Status::ok);
  EXPECT_EQ(leftovers(*b), "");
}

TEST_P(BackendVm, UnmapKeepsTheChunkAndRemapShowsItsBytes) {
  auto b = make();
  const std::size_t g = b->granularity();
  ChunkHandle c = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b->create_chunk(g, &c), Status::ok) << b->last_error();
  ASSERT_EQ(b->reserve(2 * g, &va), Status::ok);
  ASSERT_EQ(b->map(va, g, c), Status::ok);
  ASSERT_EQ(b->set_access(va, g), Status::ok);
  fill(va, g, 42);
  ASSERT_EQ(b->unmap(va, g), Status::ok) << b->last_error();
  EXPECT_EQ(b->physical_bytes(), g) << "the chunk lives on";

  // Mapped again, at the other half of the range: the bytes are the chunk's.
  ASSERT_EQ(b->map(va + g, g, c), Status::ok) << b->last_error();
  ASSERT_EQ(b->set_access(va + g, g), Status::ok) << b->last_error();
  EXPECT_TRUE(holds(va + g, g, 42));
  ASSERT_EQ(b->unmap(va + g, g), Status::ok);
  ASSERT_EQ(b->map(va, g, c), Status::ok);
  ASSERT_EQ(b->set_access(va, g), Status::ok);
  EXPECT_TRUE(holds(va, g, 42));
  ASSERT_EQ(b->unmap(va, g), Status::ok);
  EXPECT_EQ(b->release_chunk(c), Status::ok);
  EXPECT_EQ(b->unreserve(va, 2 * g), Status::ok);
  EXPECT_EQ(leftovers(*b), "");
}

TEST_P(BackendVm, MapTakesWholeChunksAtAlignedAddressesOnly) {
  auto b = make();
  const std::size_t g = b->granularity();
  ChunkHandle c = 0, big = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b->create_chunk(g, &c), Status::ok) << b->last_error();
  ASSERT_EQ(b->create_chunk(2 * g, &big), Status::ok) << b->last_error();
  ASSERT_EQ(b->reserve(3 * g, &va), Status::ok);

  EXPECT_EQ(b->map(va + 4096, g, c), Status::invalid_argument);
  EXPECT_THAT(b->last_error(), HasSubstr("not aligned"));
  EXPECT_EQ(b->map(va, g / 2, c), Status::invalid_argument);
  EXPECT_THAT(b->last_error(), HasSubstr("mapped whole"));
  EXPECT_EQ(b->map(va, 2 * g, c), Status::invalid_argument) << "more than the chunk";
  EXPECT_EQ(b->map(va, g, big), Status::invalid_argument) << "part of a chunk";
  EXPECT_EQ(b->map(va, g, c + 12345), Status::invalid_argument);
  EXPECT_THAT(b->last_error(), HasSubstr("unknown chunk"));

  ASSERT_EQ(b->map(va + g, 2 * g, big), Status::ok) << b->last_error();
  EXPECT_NE(b->map(va + g, g, c), Status::ok) << "already mapped there";
  EXPECT_NE(b->last_error(), "");
  EXPECT_EQ(b->map(va, g, c), Status::ok) << "the free granule before it: " << b->last_error();
  EXPECT_EQ(b->unmap(va, 3 * g), Status::ok) << "one call over both: " << b->last_error();
  EXPECT_EQ(b->release_chunk(c), Status::ok);
  EXPECT_EQ(b->release_chunk(big), Status::ok);
  EXPECT_EQ(b->unreserve(va, 3 * g), Status::ok);
  EXPECT_EQ(leftovers(*b), "");
}

TEST_P(BackendVm, RejectsBadHandlesAndSizesWithAMessage) {
  auto b = make();
  const std::size_t g = b->granularity();
  ChunkHandle c = 0;
  DevicePtr va = 0;
  EXPECT_EQ(b->release_chunk(12345), Status::invalid_argument);
  EXPECT_THAT(b->last_error(), HasSubstr("unknown chunk handle"));
  EXPECT_EQ(b->create_chunk(0, &c), Status::invalid_argument);
  EXPECT_EQ(b->create_chunk(g + 4096, &c), Status::invalid_argument);
  EXPECT_THAT(b->last_error(), HasSubstr("granularity"));
  EXPECT_EQ(b->create_chunk(g, nullptr), Status::invalid_argument);
  EXPECT_EQ(b->physical_bytes(), 0u) << "refused creations take nothing";

  ASSERT_EQ(b->create_chunk(g, &c), Status::ok) << b->last_error();
  ASSERT_EQ(b->reserve(g, &va), Status::ok);
  EXPECT_EQ(b->release_chunk(c), Status::ok);
  EXPECT_EQ(b->release_chunk(c), Status::invalid_argument) << "double release";
  EXPECT_THAT(b->last_error(), HasSubstr("unknown chunk handle"));
  EXPECT_EQ(b->map(va, g, c), Status::invalid_argument) << "released handle";
  EXPECT_EQ(b->unreserve(va, g), Status::ok);

  EXPECT_EQ(b->stream_destroy(nullptr), Status::invalid_argument) << "the default stream stays";
  EXPECT_EQ(b->launch_host_func(nullptr, nullptr, nullptr), Status::invalid_argument);
  EXPECT_EQ(leftovers(*b), "");
}

TEST_P(BackendVm, LastErrorIsPerThread) {
  auto b = make();
  EXPECT_EQ(b->release_chunk(777), Status::invalid_argument);
  const std::string mine = b->last_error();
  EXPECT_NE(mine, "");
  std::string other;
  std::thread([&] {
    EXPECT_EQ(b->release_chunk(888), Status::invalid_argument);
    other = b->last_error();
  }).join();
  EXPECT_NE(other, "");
  EXPECT_NE(other, mine) << "each message names its own call";
  EXPECT_EQ(b->last_error(), mine) << "another thread's failure left this thread's message";
}

TEST_P(BackendVm, CapacityGivesOutOfMemoryUntilAChunkIsReleased) {
  const std::size_t g = make()->granularity();
  auto b = make(3 * g);
  EXPECT_EQ(b->capacity(), 3 * g);
  ChunkHandle c1 = 0, c2 = 0, c3 = 0;
  ASSERT_EQ(b->create_chunk(2 * g, &c1), Status::ok) << b->last_error();
  EXPECT_EQ(b->physical_bytes(), 2 * g);
  EXPECT_EQ(b->create_chunk(2 * g, &c2), Status::out_of_memory);
  EXPECT_THAT(b->last_error(), HasSubstr("out of memory"));
  EXPECT_EQ(b->physical_bytes(), 2 * g) << "a refused creation takes nothing";
  EXPECT_EQ(b->create_chunk(4 * g, &c2), Status::out_of_memory);
  ASSERT_EQ(b->create_chunk(g, &c2), Status::ok) << "exactly at capacity: " << b->last_error();
  EXPECT_EQ(b->physical_bytes(), 3 * g);
  EXPECT_EQ(b->create_chunk(g, &c3), Status::out_of_memory);
  ASSERT_EQ(b->release_chunk(c1), Status::ok);
  EXPECT_EQ(b->physical_bytes(), g);
  ASSERT_EQ(b->create_chunk(2 * g, &c3), Status::ok) << b->last_error();
  EXPECT_EQ(b->physical_bytes(), 3 * g);
  EXPECT_EQ(b->release_chunk(c2), Status::ok);
  EXPECT_EQ(b->release_chunk(c3), Status::ok);
  EXPECT_EQ(leftovers(*b), "");
}

TEST_P(BackendVm, ReleasedChunkStaysReadableWhileMapped) {
  auto b = make();
  const std::size_t g = b->granularity();
  ChunkHandle c = 0;
  DevicePtr va = 0;
  ASSERT_EQ(b->create_chunk(g, &c), Status::ok) << b->last_error();
  ASSERT_EQ(b->reserve(g, &va), Status::ok);
  ASSERT_EQ(b->map(va, g, c), Status::ok);
  ASSERT_EQ(b->set_access(va, g), Status::ok);
  fill(va, g, 9);
  ASSERT_EQ(b->release_chunk(c), Status::ok) << b->last_error();
  EXPECT_EQ(b->physical_bytes(), 0u) << "the handle is gone";
  EXPECT_TRUE(holds(va, g, 9)) << "the memory goes with the last mapping";
  EXPECT_EQ(b->unmap(va, g), Status::ok);
  EXPECT_EQ(b->unreserve(va, g), Status::ok);
  EXPECT_EQ(leftovers(*b), "");
}

// The first and last 64 KiB of a range: enough bytes, at both ends, to
// show a mapping holds what another wrote, without copying every byte from
// every thread.
constexpr std::size_t kEnd = std::size_t{64} << 10;

TEST_P(BackendVm, ManyThreadsCreateMapAndCheckTheirBytes) {
  auto b = make();
  const std::size_t g = b->granularity();
  constexpr int kThreads = 8;
  constexpr int kRounds = 24;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const std::size_t n = (1 + static_cast<std::size_t>((t + r) % 3)) * g;
        ChunkHandle c = 0;
        DevicePtr va = 0, vb = 0;
        bool ok = b->create_chunk(n, &c) == Status::ok && b->reserve(n, &va) == Status::ok &&
                  b->reserve(n, &vb) == Status::ok && b->map(va, n, c) == Status::ok &&
                  b->map(vb, n, c) == Status::ok && b->set_access(va, n) == Status::ok &&
                  b->set_access(vb, n) == Status::ok;
        if (ok) {
          const auto seed = static_cast<std::uint32_t>(t * 1000 + r);
          fill(va, kEnd, seed);
          fill(va + n - kEnd, kEnd, seed + 1);
          ok = holds(vb, kEnd, seed) && holds(vb + n - kEnd, kEnd, seed + 1);
        }
        ok = ok && b->unmap(va, n) == Status::ok && b->unmap(vb, n) == Status::ok &&
             b->release_chunk(c) == Status::ok && b->unreserve(va, n) == Status::ok &&
             b->unreserve(vb, n) == Status::ok;
        if (!ok) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(b->physical_bytes(), 0u);
  EXPECT_EQ(leftovers(*b), "");
}

INSTANTIATE_TEST_SUITE_P(Stack, BackendVm, ::testing::ValuesIn(backend_stacks()), stack_name);

}  // namespace
}  // namespace memlake::test

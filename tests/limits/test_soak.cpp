// The soak test (soak.hpp): short here (ctest, under ASan and TSan in
// .ci/run), as long as asked by hand:
//   MEMLAKE_SOAK_OPS=5000000 build/tests/memlake_limit_tests --gtest_filter='Soak.*'
//   MEMLAKE_SOAK_SECONDS=600 ... (also MEMLAKE_SOAK_CAPACITY, _FAULTS, _MAX_MAPPINGS, _SEED)
// What it asserts is what the allocator must already guarantee under every
// refusal kind: nothing but memlake::error escapes, no block changes, the
// invariants hold, and nothing is left once everything is freed. That every
// exhaustion refusal also ends in a retry or out_of_memory rather than a
// backend_error is asserted in test_core_limits.cpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "pattern.hpp"
#include "soak.hpp"

namespace memlake::test {
namespace {

void expect_nothing_lost(const SoakReport& r) {
  EXPECT_EQ(r.other_exceptions, 0u);
  EXPECT_EQ(r.failed_frees, 0u);
  EXPECT_EQ(r.corrupted_blocks, 0u);
  EXPECT_EQ(r.invariant_failures, 0u);
  EXPECT_EQ(r.chunks_left, 0u);
  EXPECT_EQ(r.bytes_left, 0u);
  EXPECT_EQ(r.mappings_left, 0u);
  EXPECT_EQ(r.reservations_left, 0u);
}

void record(const SoakReport& r) {
  ::testing::Test::RecordProperty("operations", std::to_string(r.operations));
  ::testing::Test::RecordProperty("allocations", std::to_string(r.allocations));
  ::testing::Test::RecordProperty("out_of_memory", std::to_string(r.out_of_memory));
  ::testing::Test::RecordProperty("exhaustion_errors", std::to_string(r.exhaustion_errors()));
  std::printf("[ soak     ] %s\n", r.summary().c_str());
}

TEST(Soak, StreamsMixedSizesWorkerAndEveryFaultKind) {
  const SoakOptions o = SoakOptions{}.with_env();
  const SoakReport r = run_soak(o);
  record(r);
  expect_nothing_lost(r);
  EXPECT_GT(r.allocations, r.operations / 4);
  EXPECT_GT(r.out_of_memory, 0u) << "the capacity is near the peak";
  if (o.fault_probability > 0) {
    for (const char* kind : {"out_of_memory", "out_of_va", "out_of_mappings", "out_of_descriptors",
                             "out_of_host_memory", "error"})
      EXPECT_GT(r.injected.count(kind), 0u) << kind << " was never injected";
  }
}

// No faults: the emulated mapping limit is the only refusal there is.
TEST(Soak, AtAnEmulatedMappingLimit) {
  SoakOptions o;
  o.operations = 60'000;
  o.fault_probability = 0;
  o.max_mappings = 600;
  o = o.with_env();
  const SoakReport r = run_soak(o);
  record(r);
  expect_nothing_lost(r);
  EXPECT_LE(r.peak_mapping_units, o.max_mappings);
  EXPECT_TRUE(r.injected.empty());
}

TEST(Soak, ThePatternSeesAChangedByte) {
  for (std::size_t size :
       {std::size_t{3}, std::size_t{512}, std::size_t{100'000}, std::size_t{20} << 20}) {
    std::vector<unsigned char> block(size);
    fill_pattern(block.data(), size, 42);
    ASSERT_TRUE(check_pattern(block.data(), size, 42)) << size;
    EXPECT_FALSE(check_pattern(block.data(), size, 43)) << size;
    block[size - 1] ^= 1;
    EXPECT_FALSE(check_pattern(block.data(), size, 42)) << size;
    block[size - 1] ^= 1;
    block[0] ^= 0x80;
    EXPECT_FALSE(check_pattern(block.data(), size, 42)) << size;
  }
}

}  // namespace
}  // namespace memlake::test

// The backend's limits other than memory: the HostBackend's count of the
// kernel's memory mappings (checked against /proc/self/maps), its emulated
// limits on mappings, descriptors and address space, the machine's budget
// (met for real: a backend maps until the budget is gone, and the process's
// own mmap and malloc still work), the shared chunk file of non-shareable
// chunks, and the statuses each refusal comes back with.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/host/host_backend.hpp"
#include "backend/process_limits.hpp"

namespace memlake {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t kG = std::size_t{2} << 20;

unsigned char* bytes(DevicePtr va) {
  return reinterpret_cast<unsigned char*>(va);
}

std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

// Lines of /proc/self/maps that overlap [start, end): the kernel's mappings
// there, as it counts them against vm.max_map_count.
std::size_t kernel_mappings(DevicePtr start, DevicePtr end) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::size_t n = 0;
  while (std::getline(maps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) != 2) continue;
    if (lo < end && hi > start) ++n;
  }
  return n;
}

HostBackendOptions options(bool shareable) {
  HostBackendOptions o;
  o.shareable = shareable;
  return o;
}

TEST(BackendStatus, LimitRefusalsHaveNamesAndAreExhaustion) {
  EXPECT_STREQ(status_name(Status::out_of_mappings), "out_of_mappings");
  EXPECT_STREQ(status_name(Status::out_of_descriptors), "out_of_descriptors");
  EXPECT_STREQ(status_name(Status::out_of_host_memory), "out_of_host_memory");
  for (Status s : {Status::out_of_memory, Status::out_of_va, Status::out_of_mappings,
                   Status::out_of_descriptors, Status::out_of_host_memory}) {
    EXPECT_TRUE(is_exhaustion(s)) << status_name(s);
  }
  for (Status s : {Status::ok, Status::not_ready, Status::invalid_argument, Status::not_supported,
                   Status::error}) {
    EXPECT_FALSE(is_exhaustion(s)) << status_name(s);
  }
  EXPECT_STREQ(vmm_op_name(VmmOp::export_chunk), "export_chunk");
  EXPECT_STREQ(vmm_op_name(VmmOp::import_chunk), "import_chunk");
}

TEST(HostLimits, ComeFromTheMachine) {
  std::ifstream f("/proc/sys/vm/max_map_count");
  std::size_t max_map_count = 0;
  ASSERT_TRUE(f >> max_map_count);
  rlimit nofile{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &nofile), 0);

  const ProcessLimits& m = process_limits();
  EXPECT_EQ(m.max_map_count, max_map_count);
  EXPECT_GT(m.maps_in_use, 0u);
  EXPECT_GT(m.mapping_budget, 0u);
  EXPECT_LE(m.mapping_budget + m.maps_in_use, max_map_count - max_map_count / 8);
  EXPECT_EQ(m.nofile_limit, nofile.rlim_cur == RLIM_INFINITY
                                ? ~std::size_t{0}
                                : static_cast<std::size_t>(nofile.rlim_cur));
  EXPECT_LT(m.descriptor_budget, m.nofile_limit);

  HostBackend b;
  EXPECT_EQ(b.limits().mappings, m.mapping_budget);
  EXPECT_EQ(b.limits().descriptors, m.descriptor_budget);
  RecordProperty("max_map_count", std::to_string(m.max_map_count));
  RecordProperty("mapping_budget", std::to_string(m.mapping_budget));
  RecordProperty("nofile", std::to_string(m.nofile_limit));
  RecordProperty("descriptor_budget", std::to_string(m.descriptor_budget));

  HostBackendOptions o;
  o.max_mappings = 100;
  o.max_descriptors = 7;
  o.max_va_bytes = 64 * kG;
  HostBackend small(o);
  EXPECT_EQ(small.limits().mappings, 100u);
  EXPECT_EQ(small.limits().descriptors, 7u);
  EXPECT_EQ(small.limits().va_bytes, 64 * kG);
}

// Every step of a random sequence of maps and unmaps inside two adjacent
// reservations: the backend's count is what the kernel shows, exactly for
// chunks with files of their own (no two mappings merge), at most that for
// chunks of the shared file (neighbouring offsets may merge into one).
void count_matches_the_kernel(bool shareable) {
  HostBackend b(options(shareable));
  constexpr std::size_t kSlots = 24;
  DevicePtr va = 0;
  ASSERT_EQ(b.reserve(kSlots * kG, &va), Status::ok) << b.last_error();
  EXPECT_EQ(b.usage().mappings, 1u);
  std::vector<ChunkHandle> chunks(kSlots);
  for (auto& c : chunks) ASSERT_EQ(b.create_chunk(kG, &c), Status::ok) << b.last_error();
  std::vector<bool> mapped(kSlots, false);
  std::mt19937 rng(shareable ? 7 : 8);
  for (int step = 0; step < 400; ++step) {
    const std::size_t i = rng() % kSlots;
    const DevicePtr at = va + i * kG;
    if (!mapped[i]) {
      ASSERT_EQ(b.map(at, kG, chunks[i]), Status::ok) << b.last_error();
      if (rng() % 2) {
        ASSERT_EQ(b.set_access(at, kG), Status::ok) << b.last_error();
      }
    } else {
      // Sometimes a run of mapped neighbours at once.
      std::size_t n = 1;
      while (rng() % 2 && i + n < kSlots && mapped[i + n]) ++n;
      ASSERT_EQ(b.unmap(at, n * kG), Status::ok) << b.last_error();
      for (std::size_t k = 1; k < n; ++k) mapped[i + k] = false;
    }
    mapped[i] = !mapped[i];
    const std::size_t kernel = kernel_mappings(va, va + kSlots * kG);
    if (shareable) {
      ASSERT_EQ(b.usage().mappings, kernel) << "step " << step;
    } else {
      ASSERT_GE(b.usage().mappings, kernel) << "step " << step;
    }
  }
  for (std::size_t i = 0; i < kSlots; ++i) {
    if (mapped[i]) {
      ASSERT_EQ(b.unmap(va + i * kG, kG), Status::ok);
    }
  }
  EXPECT_EQ(b.usage().mappings, 1u);
  ASSERT_EQ(b.unreserve(va, kSlots * kG), Status::ok);
  EXPECT_EQ(b.usage().mappings, 0u);
  for (auto c : chunks) ASSERT_EQ(b.release_chunk(c), Status::ok);
}

TEST(HostLimits, MappingCountIsTheKernelsForChunksWithOwnFiles) {
  count_matches_the_kernel(true);
}

TEST(HostLimits, MappingCountBoundsTheKernelsForChunksOfTheSharedFile) {
  count_matches_the_kernel(false);
}

TEST(HostLimits, EmulatedMappingLimitRefusesBeforeTheKernelAndChangesNothing) {
  HostBackendOptions o = options(false);
  o.max_mappings = 7;
  HostBackend b(o);
  DevicePtr va = 0;
  ASSERT_EQ(b.reserve(8 * kG, &va), Status::ok);
  std::vector<ChunkHandle> c(8);
  for (auto& h : c) ASSERT_EQ(b.create_chunk(kG, &h), Status::ok);
  // From the start of the range: each chunk adds one unit (the range's
  // unmapped rest stays one).
  for (std::size_t i = 0; i < 5; ++i) {
    ASSERT_EQ(b.map(va + i * kG, kG, c[i]), Status::ok) << b.last_error();
    EXPECT_EQ(b.usage().mappings, i + 2);
  }
  const std::size_t before = b.mapped_ranges();
  // In the middle of the unmapped rest a chunk splits it: two units more,
  // one more than the limit allows.
  EXPECT_EQ(b.map(va + 6 * kG, kG, c[6]), Status::out_of_mappings);
  EXPECT_THAT(b.last_error(), HasSubstr("max_mappings"));
  EXPECT_EQ(b.mapped_ranges(), before);
  EXPECT_EQ(b.usage().mappings, 6u);
  EXPECT_EQ(b.chunk_mappings(c[6]), 0u);
  // Next to the last one it costs one: allowed, and at the limit.
  ASSERT_EQ(b.map(va + 5 * kG, kG, c[5]), Status::ok) << b.last_error();
  EXPECT_EQ(b.usage().mappings, 7u);
  ASSERT_EQ(b.set_access(va, 6 * kG), Status::ok);
  std::memset(bytes(va), 0x5A, 6 * kG);
  // A new reservation costs one more: refused too.
  DevicePtr other = 0;
  EXPECT_EQ(b.reserve(kG, &other), Status::out_of_mappings);
  // Unmapping gives units back; the bytes are intact.
  ASSERT_EQ(b.unmap(va + 3 * kG, 3 * kG), Status::ok);
  EXPECT_EQ(b.usage().mappings, 4u);
  EXPECT_EQ(bytes(va)[3 * kG - 1], 0x5A);
  ASSERT_EQ(b.map(va + 6 * kG, kG, c[6]), Status::ok) << b.last_error();
  ASSERT_EQ(b.unmap(va, 3 * kG), Status::ok);
  ASSERT_EQ(b.unmap(va + 6 * kG, kG), Status::ok);
  ASSERT_EQ(b.unreserve(va, 8 * kG), Status::ok);
  for (auto h : c) ASSERT_EQ(b.release_chunk(h), Status::ok);
  EXPECT_EQ(b.usage().mappings, 0u);
}

TEST(HostLimits, EmulatedDescriptorLimitBoundsShareableChunksOnly) {
  HostBackendOptions o = options(true);
  o.max_descriptors = 3;
  HostBackend b(o);
  std::vector<ChunkHandle> c(3);
  for (auto& h : c) ASSERT_EQ(b.create_chunk(kG, &h), Status::ok) << b.last_error();
  EXPECT_EQ(b.usage().descriptors, 3u);
  ChunkHandle more = 0;
  EXPECT_EQ(b.create_chunk(kG, &more), Status::out_of_descriptors);
  EXPECT_THAT(b.last_error(), HasSubstr("max_descriptors"));
  EXPECT_EQ(b.live_chunks(), 3u);
  EXPECT_EQ(b.physical_bytes(), 3 * kG);
  int fd = -1;
  EXPECT_EQ(b.export_chunk(c[0], &fd), Status::out_of_descriptors) << "an export needs one more";
  ASSERT_EQ(b.release_chunk(c[2]), Status::ok);
  EXPECT_EQ(b.usage().descriptors, 2u);
  ASSERT_EQ(b.export_chunk(c[0], &fd), Status::ok) << b.last_error();
  ::close(fd);
  ChunkHandle imported = 0;
  ASSERT_EQ(b.export_chunk(c[1], &fd), Status::ok);
  ASSERT_EQ(b.import_chunk(fd, kG, &imported), Status::ok) << b.last_error();
  EXPECT_EQ(b.import_chunk(fd, kG, &more), Status::out_of_descriptors);
  ::close(fd);
  for (ChunkHandle h : {c[0], c[1], imported}) ASSERT_EQ(b.release_chunk(h), Status::ok);
  EXPECT_EQ(b.usage().descriptors, 0u);

  // Chunks of the shared file hold one descriptor together.
  HostBackendOptions shared = options(false);
  shared.max_descriptors = 1;
  HostBackend a(shared);
  const std::size_t fds = open_fds();
  std::vector<ChunkHandle> many(200);
  for (auto& h : many) ASSERT_EQ(a.create_chunk(kG, &h), Status::ok) << a.last_error();
  EXPECT_EQ(open_fds(), fds + 1);
  EXPECT_EQ(a.usage().descriptors, 1u);
  EXPECT_EQ(a.export_chunk(many[0], &fd), Status::not_supported);
  EXPECT_THAT(a.last_error(), HasSubstr("shareable"));
  for (auto h : many) ASSERT_EQ(a.release_chunk(h), Status::ok);
}

TEST(HostLimits, EmulatedAddressSpaceLimit) {
  HostBackendOptions o;
  o.max_va_bytes = 4 * kG;
  HostBackend b(o);
  DevicePtr a = 0, c = 0;
  ASSERT_EQ(b.reserve(3 * kG, &a), Status::ok);
  EXPECT_EQ(b.reserve(2 * kG, &c), Status::out_of_va);
  EXPECT_THAT(b.last_error(), HasSubstr("max_va_bytes"));
  EXPECT_EQ(b.usage().va_bytes, 3 * kG);
  ASSERT_EQ(b.reserve(kG, &c), Status::ok);
  ASSERT_EQ(b.unreserve(a, 3 * kG), Status::ok);
  ASSERT_EQ(b.reserve(2 * kG, &a), Status::ok);
  ASSERT_EQ(b.unreserve(a, 2 * kG), Status::ok);
  ASSERT_EQ(b.unreserve(c, kG), Status::ok);
  EXPECT_EQ(b.usage().va_bytes, 0u);
}

// Chunks of the shared file keep the contract: two mappings show the same
// bytes, a chunk released while mapped keeps its bytes until its last
// unmap, and its offsets come back zeroed (its memory went back).
TEST(HostLimits, ChunksOfTheSharedFileKeepTheContract) {
  HostBackend b(options(false));
  ChunkHandle c = 0;
  DevicePtr x = 0, y = 0;
  ASSERT_EQ(b.create_chunk(2 * kG, &c), Status::ok);
  ASSERT_EQ(b.reserve(2 * kG, &x), Status::ok);
  ASSERT_EQ(b.reserve(2 * kG, &y), Status::ok);
  ASSERT_EQ(b.map(x, 2 * kG, c), Status::ok);
  ASSERT_EQ(b.map(y, 2 * kG, c), Status::ok);
  ASSERT_EQ(b.set_access(x, 2 * kG), Status::ok);
  ASSERT_EQ(b.set_access(y, 2 * kG), Status::ok);
  std::memset(bytes(x), 0xC3, 2 * kG);
  EXPECT_EQ(bytes(y)[2 * kG - 1], 0xC3);
  ASSERT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.live_chunks(), 0u);
  EXPECT_EQ(b.physical_bytes(), 0u);
  EXPECT_EQ(b.released_mapped_chunks(), 1u);
  ASSERT_EQ(b.unmap(x, 2 * kG), Status::ok);
  EXPECT_EQ(bytes(y)[12345], 0xC3) << "the last mapping keeps the memory";
  // A new chunk cannot take the released one's offsets while it is mapped.
  ChunkHandle d = 0;
  ASSERT_EQ(b.create_chunk(2 * kG, &d), Status::ok);
  ASSERT_EQ(b.map(x, 2 * kG, d), Status::ok);
  ASSERT_EQ(b.set_access(x, 2 * kG), Status::ok);
  bytes(x)[0] = 0x11;
  EXPECT_EQ(bytes(y)[0], 0xC3);
  ASSERT_EQ(b.unmap(y, 2 * kG), Status::ok);
  EXPECT_EQ(b.released_mapped_chunks(), 0u);
  // Now they are free: a chunk made there reads zeros.
  ChunkHandle e = 0;
  ASSERT_EQ(b.create_chunk(2 * kG, &e), Status::ok);
  ASSERT_EQ(b.map(y, 2 * kG, e), Status::ok);
  ASSERT_EQ(b.set_access(y, 2 * kG), Status::ok);
  for (std::size_t i = 0; i < 2 * kG; i += 4096) ASSERT_EQ(bytes(y)[i], 0) << i;
  EXPECT_EQ(bytes(x)[0], 0x11);
  ASSERT_EQ(b.unmap(x, 2 * kG), Status::ok);
  ASSERT_EQ(b.unmap(y, 2 * kG), Status::ok);
  ASSERT_EQ(b.release_chunk(d), Status::ok);
  ASSERT_EQ(b.release_chunk(e), Status::ok);
  ASSERT_EQ(b.unreserve(x, 2 * kG), Status::ok);
  ASSERT_EQ(b.unreserve(y, 2 * kG), Status::ok);
}

// The machine's budget met for real: pages mapped one apart in one range
// (two units each) until the backend refuses. The refusal names
// vm.max_map_count, and the kernel still has room for the rest of the
// process: a new mapping, a large malloc and an unmap all work there.
TEST(HostLimits, TheMachinesMappingBudgetIsRefusedBeforeTheKernelLimit) {
  const ProcessLimits& m = process_limits();
  if (m.mapping_budget > (std::size_t{1} << 20)) {
    GTEST_SKIP() << "vm.max_map_count is " << m.max_map_count << ": too many mappings to make";
  }
  HostBackendOptions o = options(false);
  o.granularity = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t page = o.granularity;
  HostBackend b(o);
  const std::size_t slots = m.mapping_budget + 16;
  DevicePtr va = 0;
  ASSERT_EQ(b.reserve(2 * slots * page, &va), Status::ok) << b.last_error();
  ChunkHandle c = 0;
  ASSERT_EQ(b.create_chunk(page, &c), Status::ok);
  std::size_t mapped = 0;
  Status s = Status::ok;
  while (mapped < slots && (s = b.map(va + (2 * mapped + 1) * page, page, c)) == Status::ok)
    ++mapped;
  ASSERT_EQ(s, Status::out_of_mappings) << b.last_error();
  EXPECT_THAT(b.last_error(), HasSubstr("vm.max_map_count"));
  // A reservation costs one unit: at most one more fits.
  std::vector<DevicePtr> extra;
  DevicePtr more = 0;
  while (extra.size() < 3 && b.reserve(page, &more) == Status::ok) extra.push_back(more);
  EXPECT_LE(extra.size(), 1u);
  // Other backends of the process (a C API allocator, say) hold part of it.
  EXPECT_EQ(host_mapping_ledger().used(), m.mapping_budget);
  EXPECT_LE(b.usage().mappings, m.mapping_budget);
  EXPECT_LE(process_maps_in_use() + m.max_map_count / 16, m.max_map_count)
      << "the headroom is left to the rest of the process";

  // The rest of the process still maps and allocates.
  std::vector<std::unique_ptr<char[]>> blocks;
  for (int i = 0; i < 64; ++i) blocks.emplace_back(new char[1 << 20]);
  ASSERT_EQ(b.reserve(page, &more), Status::out_of_mappings) << "one unit more is over budget";
  for (DevicePtr e : extra) ASSERT_EQ(b.unreserve(e, page), Status::ok);
  ASSERT_EQ(b.unmap(va + page, page), Status::ok) << b.last_error();
  ASSERT_EQ(b.reserve(page, &more), Status::ok) << b.last_error();
  ASSERT_EQ(b.unreserve(more, page), Status::ok);
  for (std::size_t i = 1; i < mapped; ++i)
    ASSERT_EQ(b.unmap(va + (2 * i + 1) * page, page), Status::ok);
  ASSERT_EQ(b.unreserve(va, 2 * slots * page), Status::ok);
  ASSERT_EQ(b.release_chunk(c), Status::ok);
  EXPECT_EQ(b.usage().mappings, 0u);
}

}  // namespace
}  // namespace memlake

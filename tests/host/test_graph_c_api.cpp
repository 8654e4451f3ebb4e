// Graph pools through the C API (memlake.h) and PyTorch's graph-pool hooks
// (memlake/torch_hooks.h), on the host backend: a filter routes allocations
// to a pool, pools of a group share chunks, errors are -1 with a message
// (exceptions for the PyTorch hooks, except release, which never throws),
// and the hooks have the exact types PyTorch casts their addresses to.
// Device 4 of the process-wide C API table is this suite's.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "host/scoped_conf.hpp"
#include "memlake/errors.hpp"
#include "memlake/memlake.h"
#include "memlake/torch_hooks.h"

namespace {

constexpr int kDevice = 4;
constexpr std::size_t MiB = std::size_t{1} << 20;

// What PyTorch's Module.cpp casts the hook addresses to.
using TorchPoolId = std::pair<unsigned long long, unsigned long long>;  // c10::cuda::MempoolId_t
static_assert(std::is_same_v<decltype(memlake_torch_begin_allocate_to_pool),
                             void(int, TorchPoolId, std::function<bool(CUstream_st*)>)>);
static_assert(std::is_same_v<decltype(memlake_torch_end_allocate_to_pool), void(int, TorchPoolId)>);
static_assert(std::is_same_v<decltype(memlake_torch_release_pool), void(int, TorchPoolId)>);

std::string error() {
  return memlake_last_error();
}

memlake_pool_stats pool_stats(memlake_pool_id pool) {
  memlake_pool_stats s{};
  EXPECT_EQ(memlake_get_pool_stats(kDevice, pool, &s), 0) << error();
  return s;
}

std::int64_t stat(const char* name) {
  memlake_stats s{};
  s.version = MEMLAKE_STATS_VERSION;
  s.size = sizeof s;
  EXPECT_EQ(memlake_get_stats(kDevice, &s), 0) << error();
  if (std::string(name) == "graph_allocs") return s.graph_allocs.current;
  if (std::string(name) == "graph_pools") return s.graph_pools.current;
  return s.graph_pool_bytes.current;
}

struct Routing {
  int accept = 1;
  int calls = 0;
  static int filter(void* self, void* /*stream*/) {
    auto* r = static_cast<Routing*>(self);
    ++r->calls;
    return r->accept;
  }
};

class GraphCApi : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const memlake::test::ScopedConf conf("backend:host,capacity:128M");
    void* p = memlake_malloc(1, kDevice, nullptr);
    memlake_free(p, 1, kDevice, nullptr);
  }
};

TEST_F(GraphCApi, AFilterRoutesAllocationsToThePoolUntilEnd) {
  memlake_pool_id pool{};
  ASSERT_EQ(memlake_graph_pool_handle(kDevice, &pool), 0) << error();
  EXPECT_NE(pool.first | pool.second, 0u);
  Routing routing;
  ASSERT_EQ(memlake_begin_allocate_to_pool(kDevice, pool, &Routing::filter, &routing), 0)
      << error();
  const std::int64_t allocs = stat("graph_allocs");
  void* p = memlake_malloc(3 * MiB, kDevice, nullptr);
  ASSERT_NE(p, nullptr) << error();
  EXPECT_EQ(routing.calls, 1);
  EXPECT_EQ(pool_stats(pool).live_blocks, 1u);
  EXPECT_GE(pool_stats(pool).live_bytes, 3 * MiB);
  EXPECT_EQ(stat("graph_allocs"), allocs + 1);
  routing.accept = 0;  // the lake's, now
  void* q = memlake_malloc(MiB, kDevice, nullptr);
  ASSERT_NE(q, nullptr) << error();
  EXPECT_EQ(pool_stats(pool).live_blocks, 1u);
  memlake_free(q, MiB, kDevice, nullptr);
  memlake_free(p, 3 * MiB, kDevice, nullptr);
  EXPECT_EQ(error(), "");
  EXPECT_EQ(pool_stats(pool).live_blocks, 0u);
  ASSERT_EQ(memlake_end_allocate_to_pool(kDevice, pool), 0) << error();
  void* r = memlake_malloc(MiB, kDevice, nullptr);  // no route: never asks the filter
  EXPECT_EQ(routing.calls, 2);
  memlake_free(r, MiB, kDevice, nullptr);
  EXPECT_GT(stat("graph_pool_bytes"), 0);
  ASSERT_EQ(memlake_release_pool(kDevice, pool), 0) << error();
  EXPECT_EQ(stat("graph_pools"), 0);
  EXPECT_EQ(stat("graph_pool_bytes"), 0);
}

TEST_F(GraphCApi, PoolsOfAGroupShareTheirChunks) {
  std::uint64_t group = 0;
  ASSERT_EQ(memlake_exclusive_group(kDevice, 0, &group), 0) << error();
  Routing routing;
  memlake_pool_id pools[2];
  std::uint64_t largest = 0;
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ(memlake_exclusive_pool_handle(kDevice, group, &pools[k]), 0) << error();
    ASSERT_EQ(memlake_begin_allocate_to_pool(kDevice, pools[k], &Routing::filter, &routing), 0);
    void* p = memlake_malloc((6 + 4 * static_cast<std::size_t>(k)) * MiB, kDevice, nullptr);
    ASSERT_NE(p, nullptr) << error();
    memlake_free(p, 0, kDevice, nullptr);
    ASSERT_EQ(memlake_end_allocate_to_pool(kDevice, pools[k]), 0) << error();
    const memlake_pool_stats s = pool_stats(pools[k]);
    EXPECT_EQ(s.group, group);
    largest = std::max<std::uint64_t>(largest, s.reserved_bytes);
  }
  std::uint64_t shared = 0;
  ASSERT_EQ(memlake_exclusive_group_bytes(kDevice, group, &shared), 0) << error();
  EXPECT_EQ(shared, largest);
  EXPECT_EQ(memlake_check_exclusive_group(kDevice, group), 0) << error();
  for (const memlake_pool_id& p : pools) EXPECT_EQ(memlake_release_pool(kDevice, p), 0) << error();
  ASSERT_EQ(memlake_exclusive_group_bytes(kDevice, group, &shared), 0) << error();
  EXPECT_EQ(shared, 0u);
}

TEST_F(GraphCApi, APoolIsListedAndPutBackToTheList) {
  memlake_pool_id pool{};
  ASSERT_EQ(memlake_graph_pool_handle(kDevice, &pool), 0) << error();
  Routing routing;
  ASSERT_EQ(memlake_begin_allocate_to_pool(kDevice, pool, &Routing::filter, &routing), 0);
  void* a = memlake_malloc(3 * MiB, kDevice, nullptr);
  void* b = memlake_malloc(64 * 1024, kDevice, nullptr);
  ASSERT_TRUE(a && b) << error();
  std::size_t count = 0;
  ASSERT_EQ(memlake_pool_blocks(kDevice, pool, nullptr, 0, &count), 0) << error();
  ASSERT_EQ(count, 2u);
  memlake_pool_block checkpoint[2];
  ASSERT_EQ(memlake_pool_blocks(kDevice, pool, checkpoint, 2, &count), 0) << error();
  EXPECT_EQ(checkpoint[0].ptr, std::min(a, b));
  EXPECT_EQ(checkpoint[a < b ? 0 : 1].size, 3 * MiB);
  // The device's live blocks hold the pool's, each found by its address.
  memlake_pool_block found{};
  int device = -1;
  ASSERT_EQ(memlake_block_info(b, &found, &device), 0) << error();
  EXPECT_EQ(found.size, 64 * 1024u);
  EXPECT_EQ(device, kDevice);
  std::size_t all = 0;
  ASSERT_EQ(memlake_live_blocks(kDevice, nullptr, 0, &all), 0) << error();
  std::vector<memlake_pool_block> live(all);
  ASSERT_EQ(memlake_live_blocks(kDevice, live.data(), live.size(), &all), 0) << error();
  for (const memlake_pool_block& block : checkpoint) {
    EXPECT_EQ(std::count_if(live.begin(), live.end(),
                            [&](const memlake_pool_block& l) {
                              return l.ptr == block.ptr && l.size == block.size;
                            }),
              1)
        << block.ptr;
  }
  memlake_free(b, 64 * 1024, kDevice, nullptr);
  void* c = memlake_malloc(5 * MiB, kDevice, nullptr);
  ASSERT_NE(c, nullptr) << error();
  void* freed[2] = {};
  std::size_t freed_count = 0;
  // Room for one pointer, two blocks live: refused before anything changes.
  EXPECT_EQ(memlake_restore_pool(kDevice, pool, checkpoint, 2, freed, 1, &freed_count), -1);
  EXPECT_NE(error().find("room for 1"), std::string::npos) << error();
  EXPECT_EQ(pool_stats(pool).live_blocks, 2u);
  ASSERT_EQ(memlake_restore_pool(kDevice, pool, checkpoint, 2, freed, 2, &freed_count), 0)
      << error();
  EXPECT_EQ(freed_count, 2u);
  EXPECT_TRUE((freed[0] == a && freed[1] == c) || (freed[0] == c && freed[1] == a));
  memlake_pool_block now[2];
  ASSERT_EQ(memlake_pool_blocks(kDevice, pool, now, 2, &count), 0) << error();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(now[i].ptr, checkpoint[i].ptr);
    EXPECT_EQ(now[i].size, checkpoint[i].size);
  }
  EXPECT_EQ(memlake_restore_pool(kDevice, pool, nullptr, 1, freed, 2, &freed_count), -1);
  EXPECT_NE(error().find("null pointer"), std::string::npos) << error();
  memlake_free(a, 3 * MiB, kDevice, nullptr);
  memlake_free(b, 64 * 1024, kDevice, nullptr);
  EXPECT_EQ(error(), "");
  ASSERT_EQ(memlake_end_allocate_to_pool(kDevice, pool), 0) << error();
  ASSERT_EQ(memlake_release_pool(kDevice, pool), 0) << error();
}

TEST_F(GraphCApi, ErrorsAreMinusOneWithAMessage) {
  memlake_pool_id pool{};
  ASSERT_EQ(memlake_graph_pool_handle(kDevice, &pool), 0);
  EXPECT_EQ(memlake_end_allocate_to_pool(kDevice, pool), -1);
  EXPECT_NE(error().find("end without begin"), std::string::npos) << error();
  EXPECT_EQ(memlake_release_pool(kDevice, pool), -1);
  EXPECT_NE(error().find("is not known"), std::string::npos) << error();
  EXPECT_EQ(memlake_begin_allocate_to_pool(kDevice, pool, nullptr, nullptr), -1);
  EXPECT_NE(error().find("null filter"), std::string::npos) << error();
  EXPECT_EQ(memlake_graph_launch(kDevice, pool, nullptr, nullptr), -1);
  EXPECT_NE(error().find("null graph"), std::string::npos) << error();
  EXPECT_EQ(memlake_graph_pool_handle(64, &pool), -1);
  EXPECT_NE(error().find("bad device"), std::string::npos) << error();
  EXPECT_EQ(memlake_release_pool(kDevice + 1, pool), -1);
  EXPECT_NE(error().find("no allocator"), std::string::npos) << error();
  EXPECT_EQ(memlake_exclusive_pool_handle(kDevice, 99, &pool), -1);
  EXPECT_NE(error().find("unknown exclusive group"), std::string::npos) << error();
}

TEST_F(GraphCApi, PyTorchHooksRouteAndReport) {
  const TorchPoolId pool{0, 77};
  int asked = 0;
  memlake_torch_begin_allocate_to_pool(kDevice, pool, [&](CUstream_st*) { return ++asked > 0; });
  void* p = memlake_torch_malloc(2 * MiB, kDevice, nullptr);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(pool_stats(memlake_pool_id{0, 77}).live_blocks, 1u);
  // PyTorch releases from destructors: an error is reported, never thrown.
  EXPECT_NO_THROW(memlake_torch_release_pool(kDevice, TorchPoolId{0, 78}));
  EXPECT_NE(error().find("is not known"), std::string::npos) << error();
  memlake_torch_free(p, 2 * MiB, kDevice, nullptr);
  memlake_torch_end_allocate_to_pool(kDevice, pool);
  EXPECT_THROW(memlake_torch_end_allocate_to_pool(kDevice, pool), memlake::misuse);
  EXPECT_NE(error().find("end without begin"), std::string::npos) << error();
  memlake_torch_release_pool(kDevice, pool);
  EXPECT_EQ(error(), "");
  EXPECT_EQ(stat("graph_pools"), 0);
}

}  // namespace

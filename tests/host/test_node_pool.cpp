// NodePool: nodes are distinct, aligned and hold what is written to them;
// nodes given back are handed out again, last first and by their own size
// class only, across slab refills; larger nodes come from the heap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "common/node_pool.hpp"

namespace memlake {
namespace {

// More nodes than one slab holds, so that refills happen in between.
constexpr std::size_t kNodes = 3000;

TEST(NodePool, NodesAreDistinctAlignedAndKeepTheirBytes) {
  NodePool pool;
  std::vector<unsigned char*> nodes;
  for (std::size_t i = 0; i < kNodes; ++i) {
    auto* p = static_cast<unsigned char*>(pool.get(48));
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % NodePool::kAlign, 0u);
    std::memset(p, static_cast<int>(i & 0xff), 48);
    nodes.push_back(p);
  }
  EXPECT_EQ(std::set<unsigned char*>(nodes.begin(), nodes.end()).size(), kNodes);
  for (std::size_t i = 0; i < kNodes; ++i)
    for (std::size_t b = 0; b < 48; ++b)
      ASSERT_EQ(nodes[i][b], static_cast<unsigned char>(i & 0xff)) << "node " << i << " byte " << b;
  for (unsigned char* p : nodes) pool.put(p, 48);
}

TEST(NodePool, NodesGivenBackComeBackLastFirstAndOnlyToTheirClass) {
  NodePool pool;
  std::vector<void*> nodes;
  for (std::size_t i = 0; i < kNodes; ++i) nodes.push_back(pool.get(32));
  for (void* p : nodes) pool.put(p, 32);
  // Another class draws nothing of them.
  std::vector<void*> other;
  for (std::size_t i = 0; i < 100; ++i) other.push_back(pool.get(64));
  for (void* p : other) EXPECT_EQ(std::count(nodes.begin(), nodes.end(), p), 0);
  // Their own class gets exactly them back, the last given first.
  for (std::size_t i = kNodes; i-- > 0;) ASSERT_EQ(pool.get(32), nodes[i]) << "node " << i;
  for (void* p : nodes) pool.put(p, 32);
  for (void* p : other) pool.put(p, 64);
}

TEST(NodePool, SizesInOneClassShareItsNodes) {
  NodePool pool;
  void* p = pool.get(40);  // rounded up to 48
  pool.put(p, 40);
  EXPECT_EQ(pool.get(48), p);
  pool.put(p, 48);
}

TEST(NodePool, NodesLargerThanTheLargestClassComeFromTheHeap) {
  NodePool pool;
  auto* p = static_cast<unsigned char*>(pool.get(NodePool::kMaxNode + 1));
  std::memset(p, 0x5a, NodePool::kMaxNode + 1);
  EXPECT_EQ(p[NodePool::kMaxNode], 0x5a);
  pool.put(p, NodePool::kMaxNode + 1);  // back to the heap (the sanitizers check it)
}

}  // namespace
}  // namespace memlake

// Recycles small fixed-size nodes: the lake's trees, hash maps and piece
// lists and the allocator's live blocks. They come and go by the thousand
// per large allocation (a 150 MB block takes 75 chunks, each a tree node or
// two) and one or more per malloc and free, which the general-purpose heap
// would serve far more slowly.
// Not thread-safe: its users run under the allocator's lock.
#pragma once

#include <array>
#include <cstddef>
#include <new>
#include <type_traits>
#include <vector>

namespace memlake {

class NodePool {
 public:
  static constexpr std::size_t kAlign = 16;
  // Slabs start on a cache line, so that a node of 32 or 64 bytes (a hash
  // map's entry of an allocation) never spans two lines.
  static constexpr std::size_t kSlabAlign = 64;
  static constexpr std::size_t kMaxNode = 256;  // larger requests go to the heap

  NodePool() = default;
  ~NodePool() {
    for (void* slab : slabs_) ::operator delete (slab, std::align_val_t{kSlabAlign});
  }
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;

  void* get(std::size_t size) {
    if (size > kMaxNode) return ::operator new (size, std::align_val_t{kAlign});
    Free*& head = free_[index(size)];
    if (head == nullptr) refill(index(size));
    Free* node = head;
    head = node->next;
    return node;
  }

  void put(void* p, std::size_t size) noexcept {
    if (size > kMaxNode) {
      ::operator delete (p, std::align_val_t{kAlign});
      return;
    }
    auto* node = static_cast<Free*>(p);
    node->next = free_[index(size)];
    free_[index(size)] = node;
  }

 private:
  struct Free {
    Free* next;
  };
  static constexpr std::size_t kSlabBytes = 16 << 10;

  static std::size_t index(std::size_t size) { return (size + kAlign - 1) / kAlign - 1; }

  void refill(std::size_t i) {
    const std::size_t node = (i + 1) * kAlign;
    auto* slab = static_cast<char*>(::operator new (kSlabBytes, std::align_val_t{kSlabAlign}));
    slabs_.push_back(slab);
    for (std::size_t at = 0; at + node <= kSlabBytes; at += node) put(slab + at, node);
  }

  std::array<Free*, kMaxNode / kAlign> free_{};
  std::vector<void*> slabs_;
};

// A standard allocator over a NodePool: single nodes come from the pool,
// arrays (hash buckets) from the heap. Default-constructed, it has no pool
// and uses the heap; containers take the allocator along when assigned, so
// a default-constructed one can be given a pool later.
template <typename T>
class PoolAllocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  static_assert(alignof(T) <= NodePool::kAlign);

  PoolAllocator() noexcept = default;
  explicit PoolAllocator(NodePool* pool) noexcept : pool_(pool) {}
  template <typename U>
  PoolAllocator(const PoolAllocator<U>& other) noexcept : pool_(other.pool()) {}

  T* allocate(std::size_t n) {
    if (n == 1 && pool_) return static_cast<T*>(pool_->get(sizeof(T)));
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{alignof(T)}));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1 && pool_)
      pool_->put(p, sizeof(T));
    else
      ::operator delete (p, std::align_val_t{alignof(T)});
  }
  NodePool* pool() const noexcept { return pool_; }
  template <typename U>
  bool operator==(const PoolAllocator<U>& other) const noexcept {
    return pool_ == other.pool();
  }

 private:
  NodePool* pool_ = nullptr;
};

}  // namespace memlake

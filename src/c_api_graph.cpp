// The C API of CUDA graph pools (memlake.h) and PyTorch's graph-pool hooks
// (memlake/torch_hooks.h), over memlake/graph.hpp.
#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "c_api_table.hpp"
#include "memlake/errors.hpp"
#include "memlake/graph.hpp"
#include "memlake/memlake.h"
#include "memlake/torch_hooks.h"

using namespace memlake;
using namespace memlake::c_api;

namespace {

PoolId id_of(memlake_pool_id p) {
  return PoolId{p.first, p.second};
}

// The device's allocator for a call that makes pools (created on first use).
Allocator& make_for(const char* function, int device) {
  check_open();
  check_device(function, device);
  return get_or_create(device);
}

// The device's allocator for a call about pools that must exist already.
Allocator& known(const char* function, int device) {
  check_open();
  check_device(function, device);
  Allocator* a = existing(device);
  if (a == nullptr)
    throw misuse(std::string(function) + ": device " + std::to_string(device) +
                 " has no allocator, so no graph pool");
  return *a;
}

template <class F>
int status_of(F&& body) {
  return guarded(-1, [&] {
    body();
    return 0;
  });
}

using TorchPool = std::pair<unsigned long long, unsigned long long>;

PoolId id_of(TorchPool p) {
  return PoolId{p.first, p.second};
}

// Keeps memlake_last_error() in step with what is thrown to PyTorch.
template <class F>
void reporting(F&& body) {
  clear_error();
  try {
    body();
  } catch (const std::exception& e) {
    set_error(e.what());
    throw;
  }
}

}  // namespace

extern "C" {

int memlake_graph_pool_handle(int device, memlake_pool_id* out) {
  return status_of([&] {
    if (out == nullptr) throw misuse("memlake_graph_pool_handle: null output pointer");
    const PoolId id = graph_pool_handle(make_for("memlake_graph_pool_handle", device));
    *out = memlake_pool_id{id.first, id.second};
  });
}

int memlake_exclusive_group(int device, int check, uint64_t* out) {
  return status_of([&] {
    if (out == nullptr) throw misuse("memlake_exclusive_group: null output pointer");
    *out = new_exclusive_group(make_for("memlake_exclusive_group", device), check != 0);
  });
}

int memlake_exclusive_pool_handle(int device, uint64_t group, memlake_pool_id* out) {
  return status_of([&] {
    if (out == nullptr) throw misuse("memlake_exclusive_pool_handle: null output pointer");
    const PoolId id = exclusive_pool_handle(known("memlake_exclusive_pool_handle", device), group);
    *out = memlake_pool_id{id.first, id.second};
  });
}

int memlake_begin_allocate_to_pool(int device, memlake_pool_id pool, memlake_stream_filter filter,
                                   void* context) {
  return status_of([&] {
    if (filter == nullptr) throw misuse("memlake_begin_allocate_to_pool: null filter");
    begin_allocate_to_pool(make_for("memlake_begin_allocate_to_pool", device), id_of(pool),
                           [filter, context](Stream s) { return filter(context, s) != 0; });
  });
}

int memlake_begin_allocate_to_capture(int device, memlake_pool_id pool, void* stream) {
  return status_of([&] {
    Allocator& a = make_for("memlake_begin_allocate_to_capture", device);
    begin_allocate_to_pool(a, id_of(pool), capture_filter(a, stream));
  });
}

int memlake_end_allocate_to_pool(int device, memlake_pool_id pool) {
  return status_of(
      [&] { end_allocate_to_pool(known("memlake_end_allocate_to_pool", device), id_of(pool)); });
}

int memlake_release_pool(int device, memlake_pool_id pool) {
  return status_of([&] { release_pool(known("memlake_release_pool", device), id_of(pool)); });
}

int memlake_graph_launch(int device, memlake_pool_id pool, void* graph, void* stream) {
  return status_of([&] {
    if (graph == nullptr) throw misuse("memlake_graph_launch: null graph");
    launch_exclusive(known("memlake_graph_launch", device), id_of(pool), graph, stream);
  });
}

int memlake_check_exclusive_group(int device, uint64_t group) {
  return status_of(
      [&] { check_exclusive_group(known("memlake_check_exclusive_group", device), group); });
}

int memlake_get_pool_stats(int device, memlake_pool_id pool, memlake_pool_stats* out) {
  return status_of([&] {
    if (out == nullptr) throw misuse("memlake_get_pool_stats: null output pointer");
    const GraphPoolStats s = graph_pool_stats(known("memlake_get_pool_stats", device), id_of(pool));
    *out = memlake_pool_stats{s.group,
                              s.reserved_bytes,
                              s.mapped_bytes,
                              s.live_bytes,
                              s.live_blocks,
                              s.retired_bytes,
                              s.allocations,
                              s.users,
                              s.allocating ? 1 : 0,
                              s.released ? 1 : 0,
                              0,
                              s.kept_bytes};
  });
}

int memlake_exclusive_group_bytes(int device, uint64_t group, uint64_t* out) {
  return status_of([&] {
    if (out == nullptr) throw misuse("memlake_exclusive_group_bytes: null output pointer");
    *out = exclusive_group_bytes(known("memlake_exclusive_group_bytes", device), group);
  });
}

int memlake_pool_blocks(int device, memlake_pool_id pool, memlake_pool_block* out, size_t capacity,
                        size_t* count) {
  return status_of([&] {
    if (count == nullptr || (out == nullptr && capacity != 0))
      throw misuse("memlake_pool_blocks: null output pointer");
    const std::vector<PoolBlock> blocks =
        pool_blocks(known("memlake_pool_blocks", device), id_of(pool));
    for (std::size_t i = 0; i < blocks.size() && i < capacity; ++i)
      out[i] = memlake_pool_block{blocks[i].ptr, blocks[i].size, blocks[i].stream};
    *count = blocks.size();
  });
}

int memlake_restore_pool(int device, memlake_pool_id pool, const memlake_pool_block* blocks,
                         size_t n, void** freed, size_t capacity, size_t* freed_count) {
  return status_of([&] {
    if (freed_count == nullptr || (freed == nullptr && capacity != 0) ||
        (blocks == nullptr && n != 0))
      throw misuse("memlake_restore_pool: null pointer");
    std::vector<PoolBlock> to(n);
    for (std::size_t i = 0; i < n; ++i)
      to[i] = PoolBlock{blocks[i].ptr, blocks[i].size, blocks[i].stream};
    // The room is checked under the allocator's lock, before anything
    // changes: another thread may allocate to the pool meanwhile.
    const std::vector<void*> gone =
        restore_pool(known("memlake_restore_pool", device), id_of(pool), to, capacity);
    std::copy(gone.begin(), gone.end(), freed);
    *freed_count = gone.size();
  });
}

void memlake_torch_begin_allocate_to_pool(int device, TorchPool pool,
                                          std::function<bool(CUstream_st*)> filter) {
  reporting([&] {
    if (!filter) throw misuse("memlake_torch_begin_allocate_to_pool: empty filter");
    begin_allocate_to_pool(
        make_for("memlake_torch_begin_allocate_to_pool", device), id_of(pool),
        [f = std::move(filter)](Stream s) { return f(static_cast<CUstream_st*>(s)); });
  });
}

void memlake_torch_end_allocate_to_pool(int device, TorchPool pool) {
  reporting([&] {
    end_allocate_to_pool(known("memlake_torch_end_allocate_to_pool", device), id_of(pool));
  });
}

void memlake_torch_release_pool(int device, TorchPool pool) {
  if (memlake_release_pool(device, memlake_pool_id{pool.first, pool.second}) != 0)
    std::fprintf(stderr, "%s\n", memlake_last_error());
}

}  // extern "C"

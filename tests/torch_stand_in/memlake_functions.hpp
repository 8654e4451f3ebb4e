// What memlake/_torch_build.py hands memlake's PyTorch allocator
// (python/memlake/_torch_allocator.cpp, included before this header), filled
// from the libmemlake linked here, for the host tests and benchmarks that
// build that file against this stand-in torch.
#pragma once

#include <cstddef>

#include "memlake/memlake.h"
#include "memlake/torch_hooks.h"

// The allocator declares memlake.h's structs under its own names, field for
// field.
static_assert(sizeof(PoolId) == sizeof(memlake_pool_id) &&
              offsetof(PoolId, second) == offsetof(memlake_pool_id, second));
static_assert(sizeof(PoolBlock) == sizeof(memlake_pool_block) &&
              offsetof(PoolBlock, size) == offsetof(memlake_pool_block, size) &&
              offsetof(PoolBlock, stream) == offsetof(memlake_pool_block, stream));
static_assert(sizeof(StatValue) == sizeof(memlake_stat_value) &&
              offsetof(StatValue, peak) == offsetof(memlake_stat_value, peak));

// A function taking those structs as the allocator's field declares it.
template <class To, class From>
To as_function(From* function) {
  return reinterpret_cast<To>(reinterpret_cast<void (*)()>(function));
}

// What memlake/_torch_build.py fills from libmemlake.so, each field from
// its function: the compiler checks each type against the field's, except
// for the five functions of those structs.
inline MemlakeFunctions memlake_functions() {
  MemlakeFunctions f{};
  f.torch_malloc = memlake_torch_malloc;
  f.torch_free = memlake_torch_free;
  f.torch_record_stream = memlake_torch_record_stream;
  f.torch_empty_cache = memlake_torch_empty_cache;
  f.torch_set_memory_fraction = memlake_torch_set_memory_fraction;
  f.torch_begin_allocate_to_pool = memlake_torch_begin_allocate_to_pool;
  f.torch_end_allocate_to_pool = memlake_torch_end_allocate_to_pool;
  f.torch_release_pool = memlake_torch_release_pool;
  f.pool_blocks = as_function<decltype(f.pool_blocks)>(memlake_pool_blocks);
  f.restore_pool = as_function<decltype(f.restore_pool)>(memlake_restore_pool);
  f.last_error = memlake_last_error;
  f.stat_count = memlake_stat_count;
  f.stat_name = memlake_stat_name;
  f.get_stat_values = as_function<decltype(f.get_stat_values)>(memlake_get_stat_values);
  f.reset_peak_stats = memlake_reset_peak_stats;
  f.largest_available = memlake_largest_available;
  f.torch_free_block = memlake_torch_free_block;
  f.block_info = as_function<decltype(f.block_info)>(memlake_block_info);
  f.live_blocks = as_function<decltype(f.live_blocks)>(memlake_live_blocks);
  return f;
}

/* memlake C API: one allocator per device, created on first use and
 * configured from MEMLAKE_CONF / MEMLAKE_<KEY>.
 *
 *   void* p = memlake_malloc(64 << 20, 0, stream);
 *   if (p == NULL) { fprintf(stderr, "%s\n", memlake_last_error()); ... }
 *   memlake_free(p, 64 << 20, 0, stream);
 *
 * Errors: memlake_malloc returns NULL and memlake_last_error() says why (per
 * thread); with on_misuse:abort, misuse prints a report and aborts instead.
 *
 * PyTorch: memlake_malloc/memlake_free have the signatures of
 * CUDAPluggableAllocator, but PyTorch does not check the pointer it gets
 * back, so a NULL (out of memory) would crash later instead of raising. Use
 * memlake.torch.enable() (python/), which plugs in the functions of
 * memlake/torch_hooks.h: they raise memlake's error as a Python
 * RuntimeError. */
#ifndef MEMLAKE_MEMLAKE_H_
#define MEMLAKE_MEMLAKE_H_

#include <stddef.h>
#include <stdint.h>

#include "memlake/stat_fields.h"

#ifdef __cplusplus
extern "C" {
#endif

void* memlake_malloc(size_t size, int device, void* stream);
void memlake_free(void* ptr, size_t size, int device, void* stream);
/* 0 on success, -1 on error (see memlake_last_error). */
int memlake_record_stream(void* ptr, int device, void* stream);
int memlake_empty_cache(int device);

/* One statistic: gauges have a current value and the highest it reached
 * since the last reset; counters only grow (peak == current). */
typedef struct memlake_stat_value {
  int64_t current;
  int64_t peak;
} memlake_stat_value;

/* Every statistic of MEMLAKE_STAT_FIELDS (memlake/stat_fields.h), in its
 * order: s.live_bytes.current, s.reserved_bytes.peak, s.allocs.current, ...
 * The version changes whenever the list does. */
#define MEMLAKE_STATS_VERSION 12
typedef struct memlake_stats {
  uint32_t version; /* set by the caller to MEMLAKE_STATS_VERSION */
  uint32_t size;    /* set by the caller to sizeof(memlake_stats) */
#define MEMLAKE_C_STAT_MEMBER_(name, kind, help) memlake_stat_value name;
  MEMLAKE_STAT_FIELDS(MEMLAKE_C_STAT_MEMBER_)
#undef MEMLAKE_C_STAT_MEMBER_
} memlake_stats;

/* The index of each statistic in MEMLAKE_STAT_FIELDS order:
 * MEMLAKE_STAT_live_bytes, ..., and MEMLAKE_STAT_COUNT, their number. */
/* clang-format off */
enum memlake_stat_index {
#define MEMLAKE_C_STAT_INDEX_(name, kind, help) MEMLAKE_STAT_##name,
  MEMLAKE_STAT_FIELDS(MEMLAKE_C_STAT_INDEX_)
#undef MEMLAKE_C_STAT_INDEX_
  MEMLAKE_STAT_COUNT
};
/* clang-format on */

/* Name, kind ("gauge" or "counter") and one-line help of statistic `index`
 * (0 <= index < MEMLAKE_STAT_COUNT); NULL for any other index. What a
 * program built against another version of this header reads to know the
 * library's list. */
const char* memlake_stat_name(int index);
const char* memlake_stat_kind(int index);
const char* memlake_stat_help(int index);
/* The number of statistics this library keeps. */
int memlake_stat_count(void);

/* Fills *out; 0 on success, -1 if the version or size is not supported. */
int memlake_get_stats(int device, memlake_stats* out);
/* JSON of all stats into buf (NUL-terminated, truncated to len); returns the
 * full length needed, or -1 on error. */
int memlake_get_stats_json(int device, char* buf, size_t len);
void memlake_reset_peak_stats(int device);
/* The statistics by index, memlake_stat_name(i) naming out[i]: for programs
 * that find statistics by name, so that they read this library's list
 * whatever version of this header they were built with. Fills out[i] for
 * i < count and i < memlake_stat_count(); returns how many it filled, -1 on
 * error. A device with no allocator yet reads zeros. */
int memlake_get_stat_values(int device, memlake_stat_value* out, int count);
/* The largest block memlake can hand out on `device` now without reclaiming
 * cached ranges: the largest free block, or the free chunks and the capacity
 * not yet reserved, which stitching joins, whichever is larger. What
 * PyTorch's cacheInfo answers, which cuDNN bounds its workspace by. Creates
 * the device's allocator on first use. 0 on success, -1 on error. */
int memlake_largest_available(int device, size_t* out);
/* The last error on this thread, "" if none. */
const char* memlake_last_error(void);
/* 0 if the configuration text ("key:value,...", as in MEMLAKE_CONF) is
 * valid, -1 if not (memlake_last_error names the key or value). NULL checks
 * the environment (MEMLAKE_CONF and MEMLAKE_<KEY>). */
int memlake_config_check(const char* conf);
/* Prints the options in use to stderr. */
void memlake_options_print(void);
/* Profiling (docs/profiling.md); both need the timeline option
 * (MEMLAKE_CONF=timeline:PATH) and return -1 without it.
 * memlake_timeline_dump writes the device's timeline as Chrome Trace Event
 * JSON (Perfetto, chrome://tracing) to `path`; 0 on success.
 * memlake_memory_snapshot_json writes the device's mapped ranges with their
 * blocks and its recent events as PyTorch's memory snapshot in JSON into buf
 * (NUL-terminated, truncated to len) and returns the full length needed;
 * the state may grow between a call that asks the length and the next. */
int memlake_timeline_dump(int device, const char* path);
int memlake_memory_snapshot_json(int device, char* buf, size_t len);
/* Destroys every allocator; later calls fail with an error. */
void memlake_shutdown(void);

/* --- CUDA graphs (docs/graphs.md; C++: memlake/graph.hpp) ------------------
 * What a stream allocates while it captures a graph must come from a graph
 * pool, whose memory stays the graph's, mapped at the same addresses, until
 * the pool is released:
 *
 *   memlake_pool_id pool;
 *   memlake_graph_pool_handle(0, &pool);
 *   memlake_begin_allocate_to_capture(0, pool, stream);   before the capture
 *   cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
 *   ... memlake_malloc / memlake_free on stream ...
 *   cudaStreamEndCapture(stream, &graph);
 *   memlake_end_allocate_to_pool(0, pool);
 *   ... replays; when the graph is destroyed: memlake_release_pool(0, pool);
 *
 * Pools of one exclusive group share physical memory: their graphs must
 * never run at the same time (memlake_graph_launch orders them).
 * Each returns 0 on success, -1 on error (memlake_last_error). */
typedef struct memlake_pool_id {
  uint64_t first; /* PyTorch's MempoolId_t; {0, 0} names no pool */
  uint64_t second;
} memlake_pool_id;
/* Nonzero when `stream` allocates to the pool; called under the allocator's
 * lock, so it must not call memlake. */
typedef int (*memlake_stream_filter)(void* context, void* stream);

int memlake_graph_pool_handle(int device, memlake_pool_id* out);
/* check: nonzero to catch graphs of the group running at the same time in
 * the graphs the C++ CapturedGraph captures (memlake_check_exclusive_group). */
int memlake_exclusive_group(int device, int check, uint64_t* out);
int memlake_exclusive_pool_handle(int device, uint64_t group, memlake_pool_id* out);
/* Allocations on streams `filter` accepts go to `pool` until
 * memlake_end_allocate_to_pool; each begin on a pool counts one more graph
 * using it. */
int memlake_begin_allocate_to_pool(int device, memlake_pool_id pool, memlake_stream_filter filter,
                                   void* context);
/* The same for every stream of the capture `stream` takes part in (call it
 * before the capture begins). */
int memlake_begin_allocate_to_capture(int device, memlake_pool_id pool, void* stream);
int memlake_end_allocate_to_pool(int device, memlake_pool_id pool);
/* One graph using the pool is gone; the last release frees the pool, after
 * synchronizing the device, once none of its blocks is live. */
int memlake_release_pool(int device, memlake_pool_id pool);
/* Launches `graph` (a cudaGraphExec_t) whose memory comes from `pool` on
 * `stream`, after the previous launch of the pool's exclusive group. */
int memlake_graph_launch(int device, memlake_pool_id pool, void* graph, void* stream);
/* -1 if graphs of the group were seen running at the same time. */
int memlake_check_exclusive_group(int device, uint64_t group);

typedef struct memlake_pool_stats {
  uint64_t group;          /* 0: a pool of its own */
  uint64_t reserved_bytes; /* physical bytes of the chunks it maps */
  uint64_t mapped_bytes;
  uint64_t live_bytes;
  uint64_t live_blocks;
  uint64_t retired_bytes; /* freed across streams: held until release */
  uint64_t allocations;
  int32_t users;
  int32_t allocating;
  int32_t released;
  int32_t reserved_;
  uint64_t kept_bytes; /* of reserved_bytes, chunks no other pool of its group maps */
} memlake_pool_stats;
int memlake_get_pool_stats(int device, memlake_pool_id pool, memlake_pool_stats* out);
/* Physical bytes the chunks of an exclusive group take. */
int memlake_exclusive_group_bytes(int device, uint64_t group, uint64_t* out);

/* Checkpoints of a pool, for PyTorch's CUDA graph trees
 * (torch.compile(mode="reduce-overhead")): a pool's live blocks are listed
 * (memlake_pool_blocks) and the pool is later put back to that list
 * (memlake_restore_pool), each block at the address it had. */
typedef struct memlake_pool_block {
  void* ptr;
  size_t size;  /* as requested */
  void* stream; /* the stream it was allocated on */
} memlake_pool_block;
/* The live blocks of `pool`, in address order: the first `capacity` of them
 * go to `out`, their number to *count (capacity 0 asks the number only). */
int memlake_pool_blocks(int device, memlake_pool_id pool, memlake_pool_block* out, size_t capacity,
                        size_t* count);
/* Frees every live block of `pool`, then allocates blocks[0..n) again at
 * their addresses, sizes and streams; the pointers freed go to `freed` (room
 * for `capacity`; *freed_count gets their number). Fails, with the pool as it
 * was, when `freed` has too little room (size it with memlake_pool_blocks)
 * or a block cannot go back where it was (its memory is not the pool's, or
 * is held by memory the pool retired). */
int memlake_restore_pool(int device, memlake_pool_id pool, const memlake_pool_block* blocks,
                         size_t n, void** freed, size_t capacity, size_t* freed_count);

/* --- Live blocks, graph pools' included, in memlake_pool_block's form ------
 * Each returns 0 on success, -1 on error (memlake_last_error). */
/* The live block at `ptr` (to *out), and the device whose allocator holds it
 * (to *device, if not NULL); -1 when no device holds a live block there. */
int memlake_block_info(const void* ptr, memlake_pool_block* out, int* device);
/* Every live block of `device`, in address order: the first `capacity` of
 * them go to `out`, their number to *count (capacity 0 asks the number
 * only). A device that has allocated nothing has none. */
int memlake_live_blocks(int device, memlake_pool_block* out, size_t capacity, size_t* count);

#ifdef __cplusplus
}
#endif

#endif /* MEMLAKE_MEMLAKE_H_ */

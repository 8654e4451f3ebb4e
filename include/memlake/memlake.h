/* memlake C API. memlake_malloc/memlake_free have exactly the signatures that
 * PyTorch's CUDAPluggableAllocator loads:
 *
 *   torch.cuda.memory.CUDAPluggableAllocator("libmemlake.so",
 *                                            "memlake_malloc", "memlake_free")
 *
 * One allocator per device is created on first use, configured from
 * MEMLAKE_CONF / MEMLAKE_<KEY>. Errors: memlake_malloc returns NULL and
 * memlake_last_error() says why (per thread); with on_misuse:abort, misuse
 * prints a report and aborts instead. */
#ifndef MEMLAKE_MEMLAKE_H_
#define MEMLAKE_MEMLAKE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void* memlake_malloc(size_t size, int device, void* stream);
void memlake_free(void* ptr, size_t size, int device, void* stream);
/* 0 on success, -1 on error (see memlake_last_error). */
int memlake_record_stream(void* ptr, int device, void* stream);
int memlake_empty_cache(int device);

#define MEMLAKE_STATS_VERSION 2
typedef struct memlake_stats {
  uint32_t version; /* set by the caller to MEMLAKE_STATS_VERSION */
  uint32_t size;    /* set by the caller to sizeof(memlake_stats) */
  int64_t live_bytes, peak_live_bytes;
  int64_t reserved_bytes, peak_reserved_bytes;
  int64_t mapped_bytes, stitched_bytes;
  int64_t chunks, chunks_created, chunks_released;
  int64_t allocs, frees;
  int64_t rung_remembered, rung_fragment, rung_idle_segment, rung_continuation;
  int64_t rung_run_between_pieces, rung_free_run, rung_extend, rung_grow, rung_borrowed_ends;
  int64_t rung_stitch, rung_reserve, rung_new_memory, rung_reclaim_retry;
  int64_t ooms, stitches, evictions;
  int64_t vmm_calls, critical_path_vmm_calls, worker_vmm_calls;
  int64_t host_waits, cross_stream_waits, misuse_errors;
} memlake_stats;

/* Fills *out; 0 on success, -1 if the version or size is not supported. */
int memlake_get_stats(int device, memlake_stats* out);
/* JSON of all stats into buf (NUL-terminated, truncated to len); returns the
 * full length needed, or -1 on error. */
int memlake_get_stats_json(int device, char* buf, size_t len);
void memlake_reset_peak_stats(int device);
/* The last error on this thread, "" if none. */
const char* memlake_last_error(void);
/* 0 if the configuration text ("key:value,...", as in MEMLAKE_CONF) is
 * valid, -1 if not (memlake_last_error names the key or value). NULL checks
 * the environment (MEMLAKE_CONF and MEMLAKE_<KEY>). */
int memlake_config_check(const char* conf);
/* Prints the options in use to stderr. */
void memlake_options_print(void);
/* Destroys every allocator; later calls fail with an error. */
void memlake_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif /* MEMLAKE_MEMLAKE_H_ */

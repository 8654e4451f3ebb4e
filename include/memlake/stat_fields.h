/* The list of memlake's statistics, declared once: memlake::Stats
 * (stats.hpp), the C struct memlake_stats (memlake.h), the JSON and the
 * Python package's view are all made from it. Each entry is
 * X(name, kind, help): `gauge` fields have a current value and a peak,
 * `counter` fields only grow. C and C++. */
#ifndef MEMLAKE_STAT_FIELDS_H_
#define MEMLAKE_STAT_FIELDS_H_

/* clang-format off */
#define MEMLAKE_STAT_FIELDS(X)                                                                  \
  X(live_bytes,              gauge,   "bytes handed out to callers (rounded sizes)")           \
  X(requested_bytes,         gauge,   "bytes handed out as the callers asked for them")        \
  X(reserved_bytes,          gauge,   "physical bytes held in chunks")                         \
  X(mapped_bytes,            gauge,   "virtual bytes mapped over chunks, all segments")        \
  X(stitched_bytes,          gauge,   "virtual bytes of stitched segments (sBlocks)")          \
  X(chunks,                  gauge,   "physical chunks held")                                  \
  X(segments,                gauge,   "mapped virtual ranges (pBlocks and sBlocks)")           \
  X(cached_segments,         gauge,   "segments with no live allocation, kept mapped")         \
  X(pending_free_bytes,      gauge,   "bytes freed on a stream whose events are not complete") \
  X(allocs,                  counter, "successful allocations")                                \
  X(frees,                   counter, "frees")                                                 \
  X(path_stream_cache,       counter, "allocations served from the same stream's pending frees")\
  X(path_exact,              counter, "allocations served by an exact fit")                    \
  X(path_split,              counter, "allocations carved from free space in a larger block")  \
  X(path_stitch,             counter, "allocations that stitched existing chunks")             \
  X(path_new,                counter, "allocations that created new chunks")                   \
  X(path_reclaim,            counter, "allocations that succeeded after reclaim and retry")    \
  X(remembered_hits,         counter, "allocations placed where the same request was placed before")\
  X(caught_up_mappings,      counter, "segment entries caught up with chunks claimed or freed earlier")\
  X(ooms,                    counter, "allocations that failed with out of memory")            \
  X(stitches,                counter, "stitched segments built")                               \
  X(evictions,               counter, "cached segments unmapped by the cache budget")          \
  X(chunks_created,          counter, "physical chunks created")                               \
  X(chunks_released,         counter, "physical chunks released")                              \
  X(vmm_calls,               counter, "VMM calls of any kind, on any thread")                  \
  X(critical_path_vmm_calls, counter, "VMM calls made inside malloc/free on the caller thread")\
  X(worker_vmm_calls,        counter, "VMM calls made by the background worker")               \
  X(worker_stitches,         counter, "ranges the worker stitched from free chunks ahead of use")\
  X(worker_failures,         counter, "worker jobs that failed (the lake is left as it was)")  \
  X(prestitch_hits,          counter, "large requests served by a range the worker stitched")   \
  X(prestitch_misses,        counter, "large requests that had to stitch on the caller thread") \
  X(prestitch_wasted_bytes,  counter, "bytes of worker-stitched ranges unmapped unused")        \
  X(reserve_bytes,           gauge,   "free chunks the worker created ahead of demand")         \
  X(reserve_hits,            counter, "requests needing new memory that found it in the reserve")\
  X(reserve_misses,          counter, "requests that created chunks on the caller thread")     \
  X(events_recorded,         counter, "stream events recorded for deferred frees")             \
  X(event_queries,           counter, "stream event queries made to retire deferred frees")    \
  X(cross_stream_waits,      counter, "pending blocks handed over by a GPU-side stream wait")  \
  X(fences,                  counter, "times all pending frees were made free for every stream")\
  X(own_releases,            counter, "times a stream's pending frees were made free before mapping")\
  X(direct_frees,            counter, "frees handed to the lake at once (one stream in use)")  \
  X(host_waits,              counter, "times malloc/free blocked the host on the GPU")         \
  X(slow_path_ns,            counter, "host ns in allocations the same-stream cache missed and in frees that retired batches")\
  X(lock_waits,              counter, "malloc/free calls that waited for the allocator's lock")\
  X(lock_wait_ns,            counter, "host ns malloc/free waited for the allocator's lock")   \
  X(critical_path_vmm_ns,    counter, "host ns of VMM calls made inside malloc/free")          \
  X(critical_path_event_ns,  counter, "host ns of event record/query/wait calls in malloc/free")\
  X(worker_vmm_ns,           counter, "host ns of VMM calls made by the background worker")   \
  X(misuse_errors,           counter, "bad frees and other misuse reported")
/* clang-format on */

#endif /* MEMLAKE_STAT_FIELDS_H_ */

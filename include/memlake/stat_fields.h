/* The list of memlake's statistics, declared once: memlake::Stats
 * (stats.hpp), the C struct memlake_stats (memlake.h), the JSON and the
 * Python package's view are all made from it. Each entry is
 * X(name, kind, help): `gauge` fields have a current value and a peak,
 * `counter` fields only grow. C and C++. */
#ifndef MEMLAKE_STAT_FIELDS_H_
#define MEMLAKE_STAT_FIELDS_H_

/* clang-format off */
#define MEMLAKE_STAT_FIELDS(X)                                                                  \
  X(live_bytes,              gauge,   "bytes handed out to callers (rounded sizes), graph pools' included")\
  X(requested_bytes,         gauge,   "bytes handed out as the callers asked for them, graph pools' included")\
  X(live_blocks,             gauge,   "blocks handed out to callers and not yet freed, graph pools' included")\
  X(reserved_bytes,          gauge,   "physical bytes held in chunks")                         \
  X(mapped_bytes,            gauge,   "virtual bytes mapped over chunks, all segments")        \
  X(stitched_bytes,          gauge,   "virtual bytes of stitched segments (sBlocks)")          \
  X(chunks,                  gauge,   "physical chunks held")                                  \
  X(segments,                gauge,   "mapped virtual ranges (pBlocks and sBlocks)")           \
    X(cached_segments,         gauge,   "segments with no live allocation, kept mapped")         \
  X(mapping_units,           gauge,   "mappings its ranges make the backend hold (backend.hpp's units)")\
  X(mapping_units_budget,    counter, "mapping units it keeps its ranges within (0: no limit known)")\
  X(backend_refusals,        counter, "calls the backend refused for want of a resource, routed around or reported")\
  X(allocs,                  counter, "successful allocations, graph pools' included")\
  X(frees,                   counter, "frees, graph pools' included")\
  X(rung_remembered,         counter, "allocations at the place the same request had before")  \
  X(rung_fragment,           counter, "allocations in free space of a chunk holding other blocks")\
  X(rung_idle_segment,       counter, "allocations that took a whole cached range")           \
  X(rung_continuation,       counter, "allocations continuing a recent block's free tail")     \
  X(rung_run_between_pieces, counter, "allocations over a free run and the free pieces beside it")\
  X(rung_free_run,           counter, "allocations in a run of free chunks already mapped")    \
  X(rung_extend,             counter, "allocations that mapped chunks past a range's end")     \
  X(rung_grow,               counter, "allocations that grew a range by the difference")       \
  X(rung_borrowed_ends,      counter, "allocations across the free ends of two chunks in use") \
  X(rung_stitch,             counter, "allocations that stitched free chunks into a new range")\
  X(rung_reserve,            counter, "allocations from the worker's reserve")                 \
  X(rung_new_memory,         counter, "allocations on new chunks only")                        \
  X(rung_reclaim_retry,      counter, "allocations served after reclaim and retry")            \
  X(caught_up_mappings,      counter, "segment entries caught up with chunks claimed or freed earlier")\
  X(ooms,                    counter, "allocations that failed with out of memory")            \
  X(stitches,                counter, "stitched segments built")                               \
  X(evictions,               counter, "cached segments unmapped by the cache budget")          \
  X(chunks_created,          counter, "physical chunks created")                               \
  X(chunks_released,         counter, "physical chunks released")                              \
  X(vmm_calls,               counter, "VMM calls of any kind, on any thread")                  \
  X(critical_path_vmm_calls, counter, "VMM calls made inside malloc/free on the caller thread")\
  X(worker_vmm_calls,        counter, "VMM calls made by the background worker")               \
  X(worker_reserves,         counter, "reserves the worker created and mapped ahead of demand")\
  X(worker_failures,         counter, "worker jobs that failed (the lake is left as it was)")  \
  X(reserve_bytes,           gauge,   "free chunks the worker created ahead of demand")         \
  X(reserve_hits,            counter, "requests needing new memory that found it in the reserve")\
  X(reserve_misses,          counter, "requests that created chunks on the caller thread")     \
  X(events_recorded,         counter, "stream events recorded for the fences of frees")        \
  X(event_queries,           counter, "stream event queries for the fences of frees")          \
  X(cross_stream_waits,      counter, "GPU-side waits of a stream on another stream's fence")  \
  X(host_waits,              counter, "times malloc/free blocked the host on the GPU")         \
  X(allocate_ns,             counter, "host ns inside allocate, after the lock was taken")     \
  X(lock_waits,              counter, "malloc/free calls that waited for the allocator's lock")\
  X(lock_wait_ns,            counter, "host ns malloc/free waited for the allocator's lock")   \
  X(critical_path_vmm_ns,    counter, "host ns of VMM calls made inside malloc/free")          \
  X(critical_path_event_ns,  counter, "host ns of event record/query/wait calls in malloc/free")\
  X(worker_vmm_ns,           counter, "host ns of VMM calls made by the background worker")   \
  X(worker_turn_waits,       counter, "worker VMM calls that waited while malloc called the driver")\
  X(worker_turn_wait_ns,     counter, "host ns the worker waited for malloc's driver calls")   \
  X(misuse_errors,           counter, "bad frees and other misuse reported")                 \
  X(graph_pools,             gauge,   "graph pools not yet freed")                            \
  X(graph_pool_bytes,        gauge,   "physical bytes graph pools hold (shared chunks once)") \
  X(graph_pool_mapped_bytes, gauge,   "virtual bytes graph pools map")                        \
  X(graph_pool_live_bytes,   gauge,   "bytes of graph pool blocks handed out (rounded sizes)")\
  X(graph_allocs,            counter, "allocations served by graph pools")                    \
  X(graph_captures_abandoned,counter, "uses of graph pools released by captures that failed") \
  X(graph_exclusive_overlaps,counter, "graphs of an exclusive group seen running at once")   \
  X(graph_kept_chunks,       counter, "chunks given to one exclusive pool for blocks kept after its capture")\
  X(deallocate_ns,           counter, "host ns inside deallocate, after the lock was taken")
/* clang-format on */

#endif /* MEMLAKE_STAT_FIELDS_H_ */

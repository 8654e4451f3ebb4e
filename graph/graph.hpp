// graph/: graph pools for CUDA graph capture (memlake/graph.hpp is the
// public API, docs/graphs.md the guide). The allocator owns a GraphPools
// and asks it first while a pool is being allocated to.
//
// Files here may include the public headers, the lake (placement of a
// pool's blocks and the allocator's ChunkPool they lease chunks from), the
// stream order (no event queries while captures are under way), the backend
// and src/common/; the allocator includes graph_pools.hpp, and api.cpp and
// capture.cpp reach the allocator's pools under its lock.
//
//   graph_pools.*      the allocator's pools: routing, lifetime, stats
//   graph_pool.*       one pool: lakes of its own per stream, never evicted
//   chunk_share.*      the physical chunks of a group, shared by its pools
//   leased_backend.*   a pool's backend: chunks leased from its share
//   exclusive_group.*  launch order and the overlap check of a group
//   api.cpp            memlake/graph.hpp's functions
//   capture.cpp        CapturedGraph
#pragma once

#include "graph/graph_pools.hpp"

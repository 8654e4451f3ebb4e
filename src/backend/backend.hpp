// The backend is memlake's platform layer: the only code that talks to memory
// hardware or a driver. Everything above it (lake, stream order, worker)
// speaks in virtual ranges, physical chunks and opaque stream/event handles.
//
// Contract (the CUDA VMM contract, which HostBackend reproduces on the CPU):
//  - reserve() returns a virtual range that is not accessible until chunks are
//    mapped into it and set_access() is called on the mapped range.
//  - A chunk is one physical allocation of a multiple of granularity(). It is
//    mapped whole (offset 0, its full size) at a granularity-aligned address.
//  - One chunk may be mapped at several addresses at once; all of them show the
//    same bytes.
//  - unmap() makes the range inaccessible again; the chunk lives on until
//    release_chunk(). A chunk may be released while still mapped; its memory
//    is returned once the last mapping is gone (as cuMemRelease does).
//  - Stream work is ordered per stream. event_record() marks the current tail
//    of a stream; event_query() says whether everything before it has run.
//  - Graph capture (CUDA's stream capture in its default, global mode): while
//    a stream captures, the work enqueued on it, and on every stream that
//    joins by waiting on an event recorded in the capture, is recorded into a
//    graph instead of run; stream_end_capture() on the stream that began it
//    gives a graph that graph_launch() runs, in order, as often as asked.
//    During a capture the backend refuses what CUDA refuses (docs/graphs.md
//    lists it): synchronizing or querying a capturing stream or an event
//    recorded in a capture, waiting from a capturing stream on an event
//    recorded outside it, and, from any thread while any capture is under
//    way, event queries and synchronizations, which CUDA calls potentially
//    unsafe. A refused call invalidates the capture: its end then fails and
//    gives no graph. VMM calls stay legal during a capture.
//
// Functions return Status and never throw, not even when the process runs out
// of heap for the backend's own tables (out_of_host_memory). On failure,
// last_error() holds a message naming the call and the cause (for CUDA, the
// CUresult name); it is per thread, like errno. Every method is safe to call
// from several threads.
//
// Limits (limits(), usage()): besides physical memory, a backend runs out of
// mappings (the host kernel's vm.max_map_count), address space and file
// descriptors. limits() gives the bounds known at construction and usage()
// what this backend holds now, in the same units, so the layers above can
// stay inside them by construction; a call that would cross one fails with
// out_of_mappings, out_of_va or out_of_descriptors and changes nothing. The
// units:
//  - mappings: reserve() adds at most 1, map() at most 2 (the chunk's range,
//    and the split of the unmapped part of its reservation around it: a
//    chunk that borders a mapped neighbour or an end of its reservation
//    adds 1, one that fills the last gap adds 0); unmap() and unreserve()
//    never add. So a fully mapped range of k chunks costs k units, and
//    `usage().mappings + 2 * chunks + 1 <= limits().mappings` before a
//    reserve-and-map of `chunks` chunks guarantees no out_of_mappings (on
//    the host, as long as the process's other HostBackends leave their
//    share of the machine's budget: limits() is this backend's bound).
//  - va_bytes: bytes reserved and not yet unreserved.
//  - descriptors: descriptors the backend holds (host: one per shareable or
//    imported chunk, one for the file shared by the others); export_chunk
//    needs one more.
// kUnbounded means no bound is known (the driver documents none).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>

namespace memlake {

enum class Status : int {
  ok = 0,
  out_of_memory,       // physical memory (or capacity) exhausted
  out_of_va,           // virtual address space could not be reserved
  out_of_mappings,     // too many mapped ranges (host: vm.max_map_count)
  out_of_descriptors,  // too many open file descriptors (RLIMIT_NOFILE)
  out_of_host_memory,  // the process's heap could not hold the backend's tables
  not_ready,           // event_query: work before the event is still pending
  invalid_argument,    // misaligned size/address, unknown handle
  not_supported,       // the backend cannot do this (e.g. no GPU present)
  error,               // anything else; see last_error(). Stays last (kStatusCount).
};
inline constexpr std::size_t kStatusCount = static_cast<std::size_t>(Status::error) + 1;

const char* status_name(Status s);

// True for the refusals that say a resource ran out (physical memory,
// address space, mappings, descriptors, host heap), as opposed to a bad
// argument or a broken driver: giving back cached resources (idle mappings,
// unused chunks, reservations) may let the same call succeed later.
constexpr bool is_exhaustion(Status s) {
  return s == Status::out_of_memory || s == Status::out_of_va || s == Status::out_of_mappings ||
         s == Status::out_of_descriptors || s == Status::out_of_host_memory;
}

using DevicePtr = std::uintptr_t;   // an address in the backend's virtual space
using ChunkHandle = std::uint64_t;  // one physical allocation
using StreamHandle = void*;         // nullptr is the default stream
using EventHandle = void*;
using HostFn = void (*)(void* user);  // work enqueued on a stream
// A 64-bit value the host sets and streams wait on, GPU-side (a word of
// pinned host memory the device polls, on CUDA).
// A captured graph, ready to launch (a cudaGraphExec_t on CUDA).
using GraphHandle = void*;
// A stream's part in a graph capture (cudaStreamCaptureStatus).
enum class CaptureState : int {
  none,         // not capturing
  active,       // capturing
  invalidated,  // capturing, but the capture will fail: it ends with no graph
};

// What kind of VMM call, for counters, latency simulation and fault injection
// (export_chunk and import_chunk count as VMM calls: they make or take a
// chunk's descriptor).
enum class VmmOp : int {
  reserve,
  unreserve,
  create,
  release,
  map,
  unmap,
  set_access,
  export_chunk,
  import_chunk,
  count
};
const char* vmm_op_name(VmmOp op);

// Bounds on what a backend may hold at once, in the units described at the
// top of this file.
struct BackendLimits {
  static constexpr std::size_t kUnbounded = ~std::size_t{0};
  std::size_t mappings = kUnbounded;
  std::size_t va_bytes = kUnbounded;
  std::size_t descriptors = kUnbounded;
};

// What a backend holds now, in the units of BackendLimits (0 where the
// backend does not count: its limit is then kUnbounded).
struct BackendUsage {
  std::size_t mappings = 0;
  std::size_t va_bytes = 0;
  std::size_t descriptors = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;
  virtual int device() const = 0;
  // Allocation granularity of chunks and of mapping addresses (2 MiB on H200).
  virtual std::size_t granularity() const = 0;
  // Physical bytes this backend may have created at once.
  virtual std::size_t capacity() const = 0;
  // Physical bytes currently created and not yet released.
  virtual std::size_t physical_bytes() const = 0;
  // Mappings, address space and descriptors: the bounds and what is held.
  // Never throw; the defaults know no bound and count nothing.
  virtual BackendLimits limits() const { return {}; }
  virtual BackendUsage usage() const { return {}; }

  // --- virtual memory -----------------------------------------------------
  virtual Status reserve(std::size_t size, DevicePtr* va) = 0;
  virtual Status unreserve(DevicePtr va, std::size_t size) = 0;
  virtual Status create_chunk(std::size_t size, ChunkHandle* chunk) = 0;
  virtual Status release_chunk(ChunkHandle chunk) = 0;
  virtual Status map(DevicePtr va, std::size_t size, ChunkHandle chunk) = 0;
  virtual Status unmap(DevicePtr va, std::size_t size) = 0;
  // Grants read/write access over [va, va+size), which may span several
  // mapped chunks: one call per mapped range, since the cost is per handle.
  virtual Status set_access(DevicePtr va, std::size_t size) = 0;

  // --- process sharing --------------------------------------------------------
  // A new file descriptor for `chunk` that another process can import (the
  // caller owns and closes it); not_supported unless chunks are created
  // shareable. import_chunk makes a chunk of this backend from such a
  // descriptor (it does not take the descriptor over); release it as usual.
  virtual Status export_chunk(ChunkHandle chunk, int* fd) = 0;
  virtual Status import_chunk(int fd, std::size_t size, ChunkHandle* chunk) = 0;

  // --- streams and events -------------------------------------------------
  virtual Status stream_create(StreamHandle* stream) = 0;
  virtual Status stream_destroy(StreamHandle stream) = 0;
  virtual Status event_create(EventHandle* event) = 0;
  virtual Status event_destroy(EventHandle event) = 0;
  virtual Status event_record(EventHandle event, StreamHandle stream) = 0;
  // ok when complete, not_ready when pending, another status on error.
  virtual Status event_query(EventHandle event) = 0;
  // GPU-side dependency: later work on `stream` waits for `event`. The host
  // does not wait.
  virtual Status stream_wait_event(StreamHandle stream, EventHandle event) = 0;
  virtual Status launch_host_func(StreamHandle stream, HostFn fn, void* user) = 0;
  // Blocks the calling thread. Never called from malloc/free; for tests,
  // tools and shutdown only.
  virtual Status stream_synchronize(StreamHandle stream) = 0;
  virtual Status stream_is_capturing(StreamHandle stream, bool* capturing) = 0;

  // --- graph capture (see the contract above) --------------------------------
  // The defaults say not_supported: a backend captures only where it says so.
  // Begins capturing `stream` in global mode (the default stream cannot be
  // captured).
  virtual Status stream_begin_capture(StreamHandle stream);
  // Ends the capture begun on `stream`: *graph is the launchable graph, or
  // null with an error when the capture was invalidated (last_error() says
  // by what) or a stream that joined it did not rejoin `stream`. Every
  // stream of the capture stops capturing either way.
  virtual Status stream_end_capture(StreamHandle stream, GraphHandle* graph);
  // Enqueues the graph's work on `stream`, in the order it was captured.
  virtual Status graph_launch(GraphHandle graph, StreamHandle stream);
  // A graph still running finishes first, as cudaGraphExecDestroy does.
  virtual Status graph_destroy(GraphHandle graph);
  // Whether `stream` takes part in a capture, and whether that capture is
  // still valid, with its id: unique in the process, 0 unless active.
  virtual Status stream_capture_info(StreamHandle stream, CaptureState* state, std::uint64_t* id);
  // Blocks until every stream's work so far has run (cudaDeviceSynchronize);
  // refused while a capture is under way.
  virtual Status device_synchronize();

  // An empty string where the heap cannot hold a copy of the message.
  virtual std::string last_error() const = 0;
};

// Static check for concrete backends, in the spirit of a platform concept.
template <class B>
concept IsBackend = std::derived_from<B, Backend> && requires(const B& b) {
  { b.granularity() } -> std::same_as<std::size_t>;
  { b.capacity() } -> std::same_as<std::size_t>;
};

}  // namespace memlake

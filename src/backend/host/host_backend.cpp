// HostBackend: virtual memory and limits (see host_backend.hpp; streams and
// events are in host_backend_streams.cpp). Every VM call checks its
// arguments against the tables first, grows a table before the system call
// it records, and touches the address space only once the call is known to
// be valid and within the limits, so a rejected call leaves no trace.
#include "backend/host/host_backend.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <mutex>
#include <utility>

#include "backend/backend_detail.hpp"
#include "backend/host/host_stream.hpp"
#include "backend/host/simulated_latency.hpp"
#include "backend/process_limits.hpp"
#include "memlake/errors.hpp"

namespace memlake {

using detail::fail;
using detail::is_aligned;

namespace {

// Chunk::fd of a chunk that has its own file, released while mapped: the
// descriptor is closed and the mappings keep the file alive.
constexpr int kClosedFile = -2;
constexpr int kArena = -1;

unsigned long long ull(std::uint64_t v) {
  return static_cast<unsigned long long>(v);
}

void* to_ptr(DevicePtr va) {
  return reinterpret_cast<void*>(va);
}

// Back to an inaccessible, uncommitted reservation.
bool remap_reserved(DevicePtr va, std::size_t size) {
  void* p = ::mmap(to_ptr(va), size, PROT_NONE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == to_ptr(va);
}

std::size_t or_unbounded(std::size_t limit) {
  return limit == 0 ? BackendLimits::kUnbounded : limit;
}

Status descriptor_status(int err) {
  if (err == EMFILE || err == ENFILE) return Status::out_of_descriptors;
  if (err == ENOMEM) return Status::out_of_memory;
  return Status::error;
}

template <typename Body>
Status guarded(const char* call, Body&& body) noexcept {
  return detail::no_throw("host", call, std::forward<Body>(body));
}

}  // namespace

HostBackend::HostBackend(HostBackendOptions options) : options_(options) {
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0 || options_.granularity == 0 ||
      !is_aligned(options_.granularity, static_cast<std::size_t>(page))) {
    throw backend_error(detail::format(
        "host backend: granularity %zu is not a positive multiple of the page size %ld",
        options_.granularity, page));
  }
  process_limits();  // read before this backend maps anything
}

HostBackend::~HostBackend() {
  std::unordered_map<StreamHandle, std::shared_ptr<HostStream>> streams;
  {
    std::lock_guard lock(stream_mutex_);
    streams.swap(streams_);
    events_.clear();
  }
  // Every queue keeps running until it is drained, so a wait of one stream on
  // another resolves whatever order they are shut down in.
  for (auto& [handle, stream] : streams) stream->shutdown();
  streams.clear();

  std::lock_guard lock(vm_mutex_);
  for (auto& [va, size] : reservations_) ::munmap(to_ptr(va), size);
  for (auto& [handle, chunk] : chunks_) {
    if (chunk.fd >= 0) ::close(chunk.fd);
  }
  reservations_.clear();
  mappings_.clear();
  chunks_.clear();
  released_mapped_.clear();
  host_mapping_ledger().give_back(mapping_units_);
  host_descriptor_ledger().give_back(descriptors_);
  host_va_ledger().give_back(va_bytes_);
}

std::size_t HostBackend::physical_bytes() const {
  std::lock_guard lock(vm_mutex_);
  return physical_bytes_;
}

BackendLimits HostBackend::limits() const {
  const ProcessLimits& m = process_limits();
  BackendLimits l;
  l.mappings = std::min(or_unbounded(options_.max_mappings), m.mapping_budget);
  l.descriptors = std::min(or_unbounded(options_.max_descriptors), m.descriptor_budget);
  l.va_bytes = std::min(or_unbounded(options_.max_va_bytes), m.va_budget);
  return l;
}

BackendUsage HostBackend::usage() const {
  std::lock_guard lock(vm_mutex_);
  return BackendUsage{mapping_units_, va_bytes_, descriptors_};
}

void HostBackend::simulate(VmmOp op, std::size_t handle_bytes) const {
  if (options_.simulate_latency) simulate(detail::simulated_cost(op, handle_bytes));
}

void HostBackend::simulate(std::chrono::nanoseconds cost) const {
  if (!options_.simulate_latency) return;
  // The driver runs one VMM call at a time for the whole process: on the
  // H200 the training thread's calls cost up to 3x more while the mapping
  // worker maps (docs/benchmarks.md, "Where the step time goes"), so the
  // simulated calls of all threads take turns too.
  static std::mutex driver;
  std::lock_guard turn(driver);
  detail::spin_for(cost);
}

// What `op` costs over the `n` mappings that tile a range from `va`: a cost
// per handle, by its size.
std::chrono::nanoseconds HostBackend::tiled_cost(VmmOp op, DevicePtr va, std::size_t n) const {
  std::chrono::nanoseconds cost{0};
  if (!options_.simulate_latency) return cost;
  auto it = mappings_.find(va);
  for (std::size_t i = 0; i < n; ++i, ++it) cost += detail::simulated_cost(op, it->second.size);
  return cost;
}

// --- limits --------------------------------------------------------------------

bool HostBackend::claim_mappings(std::size_t n, const char* call) {
  if (n == 0) return true;
  if (options_.max_mappings != 0 && mapping_units_ + n > options_.max_mappings) {
    fail(Status::out_of_mappings,
         "host: %s: out of mappings: this backend holds %zu of the %zu it may "
         "(HostBackendOptions::max_mappings) and needs %zu more",
         call, mapping_units_, options_.max_mappings, n);
    return false;
  }
  const ProcessLimits& m = process_limits();
  if (!host_mapping_ledger().claim(n, m.mapping_budget)) {
    fail(Status::out_of_mappings,
         "host: %s: out of mappings: the process's host backends hold %zu of their budget of %zu "
         "and need %zu more (vm.max_map_count is %zu; the process had %zu mappings when the "
         "first backend started, and the rest is left to it)",
         call, host_mapping_ledger().used(), m.mapping_budget, n, m.max_map_count, m.maps_in_use);
    return false;
  }
  mapping_units_ += n;
  return true;
}

bool HostBackend::claim_descriptors(std::size_t n, const char* call) {
  if (options_.max_descriptors != 0 && descriptors_ + n > options_.max_descriptors) {
    fail(Status::out_of_descriptors,
         "host: %s: out of descriptors: this backend holds %zu of the %zu it may "
         "(HostBackendOptions::max_descriptors)",
         call, descriptors_, options_.max_descriptors);
    return false;
  }
  const ProcessLimits& m = process_limits();
  if (!host_descriptor_ledger().claim(n, m.descriptor_budget)) {
    fail(Status::out_of_descriptors,
         "host: %s: out of descriptors: the process's host backends hold %zu of their budget of "
         "%zu (RLIMIT_NOFILE is %zu; the process had %zu open when the first backend started, "
         "and the rest is left to it)",
         call, host_descriptor_ledger().used(), m.descriptor_budget, m.nofile_limit,
         m.descriptors_in_use);
    return false;
  }
  descriptors_ += n;
  return true;
}

bool HostBackend::claim_va(std::size_t bytes, const char* call) {
  if (options_.max_va_bytes != 0 &&
      (bytes > options_.max_va_bytes || va_bytes_ > options_.max_va_bytes - bytes)) {
    fail(Status::out_of_va,
         "host: %s(size=%zu): out of address space: this backend holds %zu of the %zu bytes it "
         "may reserve (HostBackendOptions::max_va_bytes)",
         call, bytes, va_bytes_, options_.max_va_bytes);
    return false;
  }
  const ProcessLimits& m = process_limits();
  if (!host_va_ledger().claim(bytes, m.va_budget)) {
    fail(Status::out_of_va,
         "host: %s(size=%zu): out of address space: the process's host backends hold %zu of "
         "their budget of %zu bytes (RLIMIT_AS is %zu)",
         call, bytes, host_va_ledger().used(), m.va_budget, m.address_space);
    return false;
  }
  va_bytes_ += bytes;
  return true;
}

void HostBackend::give_back_mappings(std::size_t n) {
  mapping_units_ -= n;
  host_mapping_ledger().give_back(n);
}

void HostBackend::give_back_descriptors(std::size_t n) {
  descriptors_ -= n;
  host_descriptor_ledger().give_back(n);
}

void HostBackend::give_back_va(std::size_t bytes) {
  va_bytes_ -= bytes;
  host_va_ledger().give_back(bytes);
}

// ENOMEM from mmap, munmap or mprotect on ranges this backend manages means
// the kernel would need one more mapping than vm.max_map_count allows (the
// address space and the memory are accounted for already), except for a new
// reservation, which may also find no room.
Status HostBackend::vm_failure(int err, const char* call, DevicePtr va, std::size_t size) {
  if (err != ENOMEM) {
    return fail(Status::error, "host: %s(va=%#llx, size=%zu) failed: %s", call, ull(va), size,
                std::strerror(err));
  }
  const ProcessLimits& m = process_limits();
  const std::size_t in_use = process_maps_in_use();
  const bool at_map_count = in_use + 2 >= m.max_map_count;
  const bool is_reserve = std::strcmp(call, "reserve") == 0;
  if (is_reserve && !at_map_count) {
    return fail(Status::out_of_va,
                "host: reserve(size=%zu) failed: %s: no room left in the address space", size,
                std::strerror(err));
  }
  return fail(Status::out_of_mappings,
              "host: %s(va=%#llx, size=%zu) failed: %s: the process holds %zu memory mappings; "
              "vm.max_map_count is %zu (this backend's count: %zu of %zu)",
              call, ull(va), size, std::strerror(err), in_use, m.max_map_count, mapping_units_,
              limits().mappings);
}

// --- tables --------------------------------------------------------------------

HostBackend::ReservationMap::const_iterator HostBackend::find_reservation(DevicePtr va,
                                                                          std::size_t size) const {
  auto it = reservations_.upper_bound(va);
  if (it == reservations_.begin()) return reservations_.end();
  --it;
  const DevicePtr end = it->first + it->second;
  if (va >= end || size > end - va) return reservations_.end();
  return it;
}

std::size_t HostBackend::tiling_mappings(DevicePtr va, std::size_t size) const {
  auto it = mappings_.find(va);
  DevicePtr cur = va;
  const DevicePtr end = va + size;
  std::size_t n = 0;
  while (cur < end) {
    if (it == mappings_.end() || it->first != cur) return 0;
    cur += it->second.size;
    ++it;
    ++n;
  }
  return cur == end ? n : 0;
}

// [va, va+size) lies in one unmapped gap of its reservation. The gap's unit
// passes to the mapping; what is left of the gap on either side becomes a
// unit of its own.
std::size_t HostBackend::map_cost(ReservationMap::const_iterator r, DevicePtr va,
                                  std::size_t size) const {
  const DevicePtr r_end = r->first + r->second;
  DevicePtr gap_start = r->first;
  DevicePtr gap_end = r_end;
  auto next = mappings_.lower_bound(va);
  if (next != mappings_.begin()) {
    auto prev = std::prev(next);
    if (prev->first >= r->first) gap_start = prev->first + prev->second.size;
  }
  if (next != mappings_.end() && next->first < r_end) gap_end = next->first;
  return static_cast<std::size_t>(va > gap_start) + static_cast<std::size_t>(va + size < gap_end);
}

// The mappings tiling [va, va+size) become one gap per reservation they lie
// in, merged with the gaps next to it: n mappings and up to two gaps become
// one gap.
std::size_t HostBackend::unmap_refund(DevicePtr va, std::size_t size) const {
  std::size_t refund = 0;
  const DevicePtr end = va + size;
  DevicePtr cur = va;
  while (cur < end) {
    auto r = find_reservation(cur, 1);
    if (r == reservations_.end()) return refund;  // cannot happen: mappings lie in reservations
    const DevicePtr r_end = r->first + r->second;
    const DevicePtr piece_end = std::min(end, r_end);
    std::size_t n = 0;
    for (auto m = mappings_.find(cur); m != mappings_.end() && m->first < piece_end; ++m) ++n;
    bool gap_left = false;
    if (cur > r->first) {
      auto at = mappings_.find(cur);
      gap_left = at == mappings_.begin() ||
                 std::prev(at)->first + std::prev(at)->second.size != cur ||
                 std::prev(at)->first < r->first;
    }
    bool gap_right = false;
    if (piece_end < r_end) gap_right = mappings_.find(piece_end) == mappings_.end();
    refund += n + static_cast<std::size_t>(gap_left) + static_cast<std::size_t>(gap_right) - 1;
    cur = piece_end;
  }
  return refund;
}

void HostBackend::free_storage(const Chunk& c) {
  if (c.fd >= 0) {
    ::close(c.fd);
    give_back_descriptors(1);
  } else if (c.fd == kArena) {
    arena_.free(c.offset, c.size);
  }
}

void HostBackend::drop_mapping(ChunkHandle chunk) {
  if (auto c = chunks_.find(chunk); c != chunks_.end()) {
    --c->second.mappings;
    return;
  }
  auto r = released_mapped_.find(chunk);
  if (r == released_mapped_.end()) return;
  if (--r->second.mappings == 0) {
    free_storage(r->second);
    released_mapped_.erase(r);
  }
}

// --- virtual memory ----------------------------------------------------------

Status HostBackend::reserve(std::size_t size, DevicePtr* va) {
  return guarded("reserve", [&] {
    const std::size_t g = options_.granularity;
    if (va == nullptr) return fail(Status::invalid_argument, "host: reserve: null output pointer");
    if (size == 0 || !is_aligned(size, g)) {
      return fail(
          Status::invalid_argument,
          "host: reserve(size=%zu): size must be a positive multiple of the granularity %zu", size,
          g);
    }
    if (size > std::numeric_limits<std::size_t>::max() - g) {
      return fail(Status::out_of_va, "host: reserve(size=%zu): size too large", size);
    }
    {
      std::lock_guard lock(vm_mutex_);
      if (!claim_va(size, "reserve")) return Status::out_of_va;
      if (!claim_mappings(1, "reserve")) {
        give_back_va(size);
        return Status::out_of_mappings;
      }
    }
    auto unclaim = [&] {
      std::lock_guard lock(vm_mutex_);
      give_back_va(size);
      give_back_mappings(1);
    };
    // Over-reserve by one granule and trim both ends to get an aligned range.
    const std::size_t span = size + g;
    void* p = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      std::lock_guard lock(vm_mutex_);
      give_back_va(size);
      give_back_mappings(1);
      return vm_failure(err, "reserve", 0, size);
    }
    const DevicePtr base = reinterpret_cast<DevicePtr>(p);
    const DevicePtr aligned = (base + g - 1) / g * g;
    const std::size_t front = aligned - base;
    const std::size_t back = span - front - size;
    if (front != 0) ::munmap(p, front);
    if (back != 0) ::munmap(to_ptr(aligned + size), back);
    try {
      std::lock_guard lock(vm_mutex_);
      reservations_.emplace(aligned, size);
    } catch (...) {
      ::munmap(to_ptr(aligned), size);
      unclaim();
      throw;
    }
    *va = aligned;
    simulate(VmmOp::reserve, size);
    return Status::ok;
  });
}

Status HostBackend::unreserve(DevicePtr va, std::size_t size) {
  return guarded("unreserve", [&] {
    {
      std::lock_guard lock(vm_mutex_);
      auto it = reservations_.find(va);
      if (it == reservations_.end() || it->second != size) {
        return fail(Status::invalid_argument,
                    "host: unreserve(va=%#llx, size=%zu): not a reserved range (give the address "
                    "and size that reserve returned)",
                    ull(va), size);
      }
      auto m = mappings_.lower_bound(va);
      if (m != mappings_.end() && m->first < va + size) {
        return fail(Status::invalid_argument,
                    "host: unreserve(va=%#llx, size=%zu): range still has a chunk mapped at "
                    "%#llx; unmap it first",
                    ull(va), size, ull(m->first));
      }
      if (::munmap(to_ptr(va), size) != 0) return vm_failure(errno, "unreserve", va, size);
      reservations_.erase(it);
      give_back_va(size);
      give_back_mappings(1);
    }
    simulate(VmmOp::unreserve, size);
    return Status::ok;
  });
}

Status HostBackend::create_chunk(std::size_t size, ChunkHandle* chunk) {
  return guarded("create_chunk", [&] {
    const std::size_t g = options_.granularity;
    if (chunk == nullptr) {
      return fail(Status::invalid_argument, "host: create_chunk: null output pointer");
    }
    if (size == 0 || !is_aligned(size, g)) {
      return fail(Status::invalid_argument,
                  "host: create_chunk(size=%zu): size must be a positive multiple of the "
                  "granularity %zu",
                  size, g);
    }
    {
      std::lock_guard lock(vm_mutex_);
      if (size > options_.capacity || physical_bytes_ > options_.capacity - size) {
        return fail(Status::out_of_memory,
                    "host: create_chunk(size=%zu): out of memory: %zu of %zu bytes in use", size,
                    physical_bytes_, options_.capacity);
      }
      const ChunkHandle handle = next_chunk_;
      auto slot = chunks_.emplace(handle, Chunk{kArena, 0, size, 0}).first;
      Chunk& c = slot->second;
      Status s = Status::ok;
      if (options_.shareable) {
        if (!claim_descriptors(1, "create_chunk")) {
          s = Status::out_of_descriptors;
        } else {
          c.fd = ::memfd_create("memlake-chunk", MFD_CLOEXEC);
          if (c.fd < 0) {
            const int err = errno;
            give_back_descriptors(1);
            s = fail(descriptor_status(err),
                     "host: create_chunk(size=%zu): memfd_create failed: %s", size,
                     std::strerror(err));
          } else if (::ftruncate(c.fd, static_cast<off_t>(size)) != 0) {
            const int err = errno;
            free_storage(c);
            s = fail(err == ENOMEM || err == ENOSPC || err == EFBIG ? Status::out_of_memory
                                                                    : Status::error,
                     "host: create_chunk(size=%zu): ftruncate failed: %s", size,
                     std::strerror(err));
          }
        }
      } else {
        const bool opens_arena = arena_.fd() < 0;
        if (opens_arena && !claim_descriptors(1, "create_chunk")) {
          s = Status::out_of_descriptors;
        } else {
          s = arena_.allocate(size, &c.offset);
          if (opens_arena && arena_.fd() < 0) give_back_descriptors(1);
          if (s != Status::ok) {
            char cause[512];
            std::snprintf(cause, sizeof cause, "%s", detail::thread_last_error());
            fail(s, "host: create_chunk(size=%zu): %s", size, cause);
          }
        }
      }
      if (s != Status::ok) {
        chunks_.erase(slot);
        return s;
      }
      ++next_chunk_;
      physical_bytes_ += size;
      *chunk = handle;
    }
    simulate(VmmOp::create, size);
    return Status::ok;
  });
}

// A shareable chunk is a memfd: its export is a duplicate descriptor
// (inherited across exec, unlike the backend's own), its import a duplicate
// kept here.
Status HostBackend::export_chunk(ChunkHandle chunk, int* fd) {
  return guarded("export_chunk", [&] {
    if (fd == nullptr)
      return fail(Status::invalid_argument, "host: export_chunk: null output pointer");
    std::lock_guard lock(vm_mutex_);
    auto it = chunks_.find(chunk);
    if (it == chunks_.end()) {
      return fail(Status::invalid_argument, "host: export_chunk(chunk=%llu): unknown chunk handle",
                  ull(chunk));
    }
    if (it->second.fd < 0) {
      return fail(Status::not_supported,
                  "host: export_chunk(chunk=%llu): chunks were not created shareable (set "
                  "shareable:true)",
                  ull(chunk));
    }
    // The copy is the caller's; it must fit under the limit while it is made.
    if (!claim_descriptors(1, "export_chunk")) return Status::out_of_descriptors;
    const int copy = ::dup(it->second.fd);
    const int err = errno;
    give_back_descriptors(1);
    if (copy < 0) {
      return fail(descriptor_status(err), "host: export_chunk(chunk=%llu): dup failed: %s",
                  ull(chunk), std::strerror(err));
    }
    *fd = copy;
    return Status::ok;
  });
}

Status HostBackend::import_chunk(int fd, std::size_t size, ChunkHandle* chunk) {
  return guarded("import_chunk", [&] {
    if (chunk == nullptr)
      return fail(Status::invalid_argument, "host: import_chunk: null output pointer");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      return fail(Status::invalid_argument, "host: import_chunk(fd=%d): not an open file: %s", fd,
                  std::strerror(err));
    }
    if (size == 0 || !is_aligned(size, options_.granularity) ||
        static_cast<std::size_t>(st.st_size) != size) {
      return fail(Status::invalid_argument,
                  "host: import_chunk(fd=%d, size=%zu): the file holds %lld bytes; a chunk is a "
                  "positive multiple of the granularity %zu, imported whole",
                  fd, size, static_cast<long long>(st.st_size), options_.granularity);
    }
    std::lock_guard lock(vm_mutex_);
    const ChunkHandle handle = next_chunk_;
    auto slot = chunks_.emplace(handle, Chunk{kArena, 0, size, 0}).first;
    if (!claim_descriptors(1, "import_chunk")) {
      chunks_.erase(slot);
      return Status::out_of_descriptors;
    }
    const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) {
      const int err = errno;
      give_back_descriptors(1);
      chunks_.erase(slot);
      return fail(descriptor_status(err), "host: import_chunk(fd=%d): dup failed: %s", fd,
                  std::strerror(err));
    }
    slot->second.fd = copy;
    ++next_chunk_;
    physical_bytes_ += size;
    *chunk = handle;
    return Status::ok;
  });
}

Status HostBackend::release_chunk(ChunkHandle chunk) {
  return guarded("release_chunk", [&] {
    std::size_t bytes = 0;
    {
      std::lock_guard lock(vm_mutex_);
      auto it = chunks_.find(chunk);
      if (it == chunks_.end()) {
        return fail(Status::invalid_argument,
                    "host: release_chunk(chunk=%llu): unknown chunk handle (never created or "
                    "already released)",
                    ull(chunk));
      }
      // The memory goes with the last mapping, as with cuMemRelease: a chunk
      // still mapped waits in released_mapped_ (a file of its own is closed
      // now; its mappings keep it alive).
      Chunk& c = it->second;
      if (c.mappings > 0) {
        Chunk waiting = c;
        if (c.fd >= 0) waiting.fd = kClosedFile;
        released_mapped_.emplace(chunk, waiting);
        if (c.fd >= 0) free_storage(c);
      } else {
        free_storage(c);
      }
      physical_bytes_ -= c.size;
      bytes = c.size;
      chunks_.erase(it);
    }
    simulate(VmmOp::release, bytes);
    return Status::ok;
  });
}

Status HostBackend::map(DevicePtr va, std::size_t size, ChunkHandle chunk) {
  return guarded("map", [&] {
    const std::size_t g = options_.granularity;
    {
      std::lock_guard lock(vm_mutex_);
      auto c = chunks_.find(chunk);
      if (c == chunks_.end()) {
        return fail(Status::invalid_argument,
                    "host: map(va=%#llx, size=%zu, chunk=%llu): unknown chunk handle", ull(va),
                    size, ull(chunk));
      }
      if (!is_aligned(va, g)) {
        return fail(Status::invalid_argument,
                    "host: map(va=%#llx, size=%zu, chunk=%llu): address is not aligned to the "
                    "granularity %zu",
                    ull(va), size, ull(chunk), g);
      }
      if (size != c->second.size) {
        return fail(Status::invalid_argument,
                    "host: map(va=%#llx, size=%zu, chunk=%llu): a chunk is mapped whole; its size "
                    "is %zu",
                    ull(va), size, ull(chunk), c->second.size);
      }
      const auto r = find_reservation(va, size);
      if (r == reservations_.end()) {
        return fail(Status::invalid_argument,
                    "host: map(va=%#llx, size=%zu, chunk=%llu): range is not inside one reserved "
                    "range",
                    ull(va), size, ull(chunk));
      }
      auto next = mappings_.lower_bound(va);
      const bool overlaps_next = next != mappings_.end() && next->first < va + size;
      bool overlaps_prev = false;
      if (next != mappings_.begin()) {
        auto prev = std::prev(next);
        overlaps_prev = prev->first + prev->second.size > va;
      }
      if (overlaps_next || overlaps_prev) {
        return fail(Status::invalid_argument,
                    "host: map(va=%#llx, size=%zu, chunk=%llu): range overlaps an existing "
                    "mapping",
                    ull(va), size, ull(chunk));
      }
      const std::size_t cost = map_cost(r, va, size);
      auto slot = mappings_.emplace(va, Mapping{size, chunk, false}).first;
      if (!claim_mappings(cost, "map")) {
        mappings_.erase(slot);
        return Status::out_of_mappings;
      }
      const int fd = c->second.fd >= 0 ? c->second.fd : arena_.fd();
      const auto offset = static_cast<off_t>(c->second.fd >= 0 ? 0 : c->second.offset);
      void* p = ::mmap(to_ptr(va), size, PROT_NONE, MAP_FIXED | MAP_SHARED, fd, offset);
      if (p != to_ptr(va)) {
        const int err = errno;
        if (p != MAP_FAILED) ::munmap(p, size);
        remap_reserved(va, size);
        mappings_.erase(slot);
        give_back_mappings(cost);
        return vm_failure(err, "map", va, size);
      }
      ++c->second.mappings;
    }
    simulate(VmmOp::map, size);
    return Status::ok;
  });
}

Status HostBackend::unmap(DevicePtr va, std::size_t size) {
  return guarded("unmap", [&] {
    std::size_t n;
    std::chrono::nanoseconds cost{0};
    {
      std::lock_guard lock(vm_mutex_);
      n = size == 0 ? 0 : tiling_mappings(va, size);
      if (n == 0) {
        return fail(Status::invalid_argument,
                    "host: unmap(va=%#llx, size=%zu): range must consist exactly of whole mapped "
                    "chunks",
                    ull(va), size);
      }
      const std::size_t refund = unmap_refund(va, size);
      cost = tiled_cost(VmmOp::unmap, va, n);
      if (!remap_reserved(va, size)) return vm_failure(errno, "unmap", va, size);
      auto it = mappings_.find(va);
      for (std::size_t i = 0; i < n; ++i) {
        drop_mapping(it->second.chunk);
        it = mappings_.erase(it);
      }
      give_back_mappings(refund);
    }
    simulate(cost);
    return Status::ok;
  });
}

Status HostBackend::set_access(DevicePtr va, std::size_t size) {
  return guarded("set_access", [&] {
    std::size_t n;
    std::chrono::nanoseconds cost{0};
    {
      std::lock_guard lock(vm_mutex_);
      n = size == 0 ? 0 : tiling_mappings(va, size);
      if (n == 0) {
        return fail(Status::invalid_argument,
                    "host: set_access(va=%#llx, size=%zu): range must be fully mapped and consist "
                    "of whole mapped chunks",
                    ull(va), size);
      }
      if (::mprotect(to_ptr(va), size, PROT_READ | PROT_WRITE) != 0)
        return vm_failure(errno, "set_access", va, size);
      auto it = mappings_.find(va);
      for (std::size_t i = 0; i < n; ++i, ++it) it->second.accessible = true;
      cost = tiled_cost(VmmOp::set_access, va, n);
    }
    simulate(cost);
    return Status::ok;
  });
}

// --- inspection ----------------------------------------------------------------

std::size_t HostBackend::live_chunks() const {
  std::lock_guard lock(vm_mutex_);
  return chunks_.size();
}

std::size_t HostBackend::reserved_ranges() const {
  std::lock_guard lock(vm_mutex_);
  return reservations_.size();
}

std::size_t HostBackend::mapped_ranges() const {
  std::lock_guard lock(vm_mutex_);
  return mappings_.size();
}

std::size_t HostBackend::released_mapped_chunks() const {
  std::lock_guard lock(vm_mutex_);
  return released_mapped_.size();
}

std::size_t HostBackend::chunk_mappings(ChunkHandle chunk) const {
  std::lock_guard lock(vm_mutex_);
  auto it = chunks_.find(chunk);
  return it == chunks_.end() ? 0 : it->second.mappings;
}

bool HostBackend::is_accessible(DevicePtr va, std::size_t size) const {
  if (size == 0) return false;
  std::lock_guard lock(vm_mutex_);
  auto it = mappings_.upper_bound(va);
  if (it == mappings_.begin()) return false;
  --it;
  DevicePtr cur = va;
  const DevicePtr end = va + size;
  while (cur < end) {
    if (it == mappings_.end() || it->first > cur || it->first + it->second.size <= cur ||
        !it->second.accessible) {
      return false;
    }
    cur = it->first + it->second.size;
    ++it;
  }
  return true;
}

std::string HostBackend::last_error() const {
  return detail::thread_last_error_copy();
}

}  // namespace memlake

// HostBackend implementation (see host_backend.hpp). Every VM call checks its
// arguments against the tables first and touches the address space only once
// they are known to be valid, so a rejected call leaves no trace.
#include "backend/host/host_backend.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>
#include <utility>

#include "backend/backend_detail.hpp"
#include "backend/host/host_stream.hpp"
#include "memlake/errors.hpp"

namespace memlake {

using detail::fail;
using detail::is_aligned;

namespace {

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

}  // namespace

struct HostBackend::Event {
  std::shared_ptr<HostStream> stream;  // null until first recorded
  std::uint64_t seq = 0;
};

HostBackend::HostBackend(HostBackendOptions options) : options_(options) {
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0 || options_.granularity == 0 ||
      !is_aligned(options_.granularity, static_cast<std::size_t>(page))) {
    throw backend_error(detail::format(
        "host backend: granularity %zu is not a positive multiple of the page size %ld",
        options_.granularity, page));
  }
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
  for (auto& [handle, chunk] : chunks_) ::close(chunk.fd);
  reservations_.clear();
  mappings_.clear();
  chunks_.clear();
}

std::size_t HostBackend::physical_bytes() const {
  std::lock_guard lock(vm_mutex_);
  return physical_bytes_;
}

void HostBackend::simulate(VmmOp op, std::size_t chunks) const {
  if (!options_.simulate_latency) return;
  using std::chrono::nanoseconds;
  nanoseconds cost{0};
  switch (op) {
    case VmmOp::reserve:
      cost = nanoseconds(500);
      break;
    case VmmOp::unreserve:
      cost = nanoseconds(500);
      break;
    case VmmOp::create:
      cost = nanoseconds(10'000);
      break;
    case VmmOp::release:
      cost = nanoseconds(12'000);
      break;
    case VmmOp::map:
      cost = nanoseconds(700);
      break;
    case VmmOp::set_access:
      cost = nanoseconds(23'000) * static_cast<long>(chunks);
      break;
    case VmmOp::unmap:
      cost = nanoseconds(16'000) * static_cast<long>(chunks);
      break;
    case VmmOp::count:
      break;
  }
  detail::spin_for(cost);
}

// --- virtual memory ----------------------------------------------------------

std::map<DevicePtr, std::size_t>::const_iterator HostBackend::find_reservation(
    DevicePtr va, std::size_t size) const {
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

Status HostBackend::reserve(std::size_t size, DevicePtr* va) {
  const std::size_t g = options_.granularity;
  if (va == nullptr) return fail(Status::invalid_argument, "host: reserve: null output pointer");
  if (size == 0 || !is_aligned(size, g)) {
    return fail(Status::invalid_argument,
                "host: reserve(size=%zu): size must be a positive multiple of the granularity %zu",
                size, g);
  }
  if (size > std::numeric_limits<std::size_t>::max() - g) {
    return fail(Status::out_of_va, "host: reserve(size=%zu): size too large", size);
  }
  // Over-reserve by one granule and trim both ends to get an aligned range.
  const std::size_t span = size + g;
  void* p = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return fail(Status::out_of_va, "host: reserve(size=%zu): mmap failed: %s", size,
                std::strerror(errno));
  }
  const DevicePtr base = reinterpret_cast<DevicePtr>(p);
  const DevicePtr aligned = (base + g - 1) / g * g;
  const std::size_t front = aligned - base;
  const std::size_t back = span - front - size;
  if (front != 0) ::munmap(p, front);
  if (back != 0) ::munmap(to_ptr(aligned + size), back);
  {
    std::lock_guard lock(vm_mutex_);
    reservations_.emplace(aligned, size);
  }
  *va = aligned;
  simulate(VmmOp::reserve);
  return Status::ok;
}

Status HostBackend::unreserve(DevicePtr va, std::size_t size) {
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
                  "host: unreserve(va=%#llx, size=%zu): range still has a chunk mapped at %#llx; "
                  "unmap it first",
                  ull(va), size, ull(m->first));
    }
    if (::munmap(to_ptr(va), size) != 0) {
      return fail(Status::error, "host: unreserve(va=%#llx, size=%zu): munmap failed: %s", ull(va),
                  size, std::strerror(errno));
    }
    reservations_.erase(it);
  }
  simulate(VmmOp::unreserve);
  return Status::ok;
}

Status HostBackend::create_chunk(std::size_t size, ChunkHandle* chunk) {
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
    const int fd = ::memfd_create("memlake-chunk", MFD_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      return fail(err == ENOMEM ? Status::out_of_memory : Status::error,
                  "host: create_chunk(size=%zu): memfd_create failed: %s", size,
                  std::strerror(err));
    }
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      const int err = errno;
      ::close(fd);
      return fail(
          err == ENOMEM || err == ENOSPC || err == EFBIG ? Status::out_of_memory : Status::error,
          "host: create_chunk(size=%zu): ftruncate failed: %s", size, std::strerror(err));
    }
    const ChunkHandle handle = next_chunk_++;
    chunks_.emplace(handle, Chunk{fd, size, 0});
    physical_bytes_ += size;
    *chunk = handle;
  }
  simulate(VmmOp::create);
  return Status::ok;
}

// A chunk is a memfd: its export is a duplicate descriptor (inherited
// across exec, unlike the backend's own), its import a duplicate kept here.
Status HostBackend::export_chunk(ChunkHandle chunk, int* fd) {
  if (fd == nullptr)
    return fail(Status::invalid_argument, "host: export_chunk: null output pointer");
  std::lock_guard lock(vm_mutex_);
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) {
    return fail(Status::invalid_argument, "host: export_chunk(chunk=%llu): unknown chunk handle",
                ull(chunk));
  }
  const int copy = ::dup(it->second.fd);
  if (copy < 0) {
    const int err = errno;
    return fail(Status::error, "host: export_chunk(chunk=%llu): dup failed: %s", ull(chunk),
                std::strerror(err));
  }
  *fd = copy;
  return Status::ok;
}

Status HostBackend::import_chunk(int fd, std::size_t size, ChunkHandle* chunk) {
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
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) {
    const int err = errno;
    return fail(Status::error, "host: import_chunk(fd=%d): dup failed: %s", fd, std::strerror(err));
  }
  std::lock_guard lock(vm_mutex_);
  const ChunkHandle handle = next_chunk_++;
  chunks_.emplace(handle, Chunk{copy, size, 0});
  physical_bytes_ += size;
  *chunk = handle;
  return Status::ok;
}

Status HostBackend::release_chunk(ChunkHandle chunk) {
  {
    std::lock_guard lock(vm_mutex_);
    auto it = chunks_.find(chunk);
    if (it == chunks_.end()) {
      return fail(Status::invalid_argument,
                  "host: release_chunk(chunk=%llu): unknown chunk handle (never created or "
                  "already released)",
                  ull(chunk));
    }
    // Mappings hold their own reference to the file: the memory goes with the
    // last of them, as with cuMemRelease.
    ::close(it->second.fd);
    physical_bytes_ -= it->second.size;
    chunks_.erase(it);
  }
  simulate(VmmOp::release);
  return Status::ok;
}

Status HostBackend::map(DevicePtr va, std::size_t size, ChunkHandle chunk) {
  const std::size_t g = options_.granularity;
  {
    std::lock_guard lock(vm_mutex_);
    auto c = chunks_.find(chunk);
    if (c == chunks_.end()) {
      return fail(Status::invalid_argument,
                  "host: map(va=%#llx, size=%zu, chunk=%llu): unknown chunk handle", ull(va), size,
                  ull(chunk));
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
    if (find_reservation(va, size) == reservations_.end()) {
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
                  "host: map(va=%#llx, size=%zu, chunk=%llu): range overlaps an existing mapping",
                  ull(va), size, ull(chunk));
    }
    void* p = ::mmap(to_ptr(va), size, PROT_NONE, MAP_FIXED | MAP_SHARED, c->second.fd, 0);
    if (p != to_ptr(va)) {
      const int err = errno;
      if (p != MAP_FAILED) ::munmap(p, size);
      remap_reserved(va, size);
      return fail(err == ENOMEM ? Status::out_of_memory : Status::error,
                  "host: map(va=%#llx, size=%zu, chunk=%llu): mmap failed: %s", ull(va), size,
                  ull(chunk), std::strerror(err));
    }
    mappings_.emplace(va, Mapping{size, chunk, false});
    ++c->second.mappings;
  }
  simulate(VmmOp::map);
  return Status::ok;
}

Status HostBackend::unmap(DevicePtr va, std::size_t size) {
  std::size_t n;
  {
    std::lock_guard lock(vm_mutex_);
    n = size == 0 ? 0 : tiling_mappings(va, size);
    if (n == 0) {
      return fail(Status::invalid_argument,
                  "host: unmap(va=%#llx, size=%zu): range must consist exactly of whole mapped "
                  "chunks",
                  ull(va), size);
    }
    if (!remap_reserved(va, size)) {
      return fail(Status::error, "host: unmap(va=%#llx, size=%zu): mmap failed: %s", ull(va), size,
                  std::strerror(errno));
    }
    auto it = mappings_.find(va);
    for (std::size_t i = 0; i < n; ++i) {
      auto c = chunks_.find(it->second.chunk);
      if (c != chunks_.end()) --c->second.mappings;
      it = mappings_.erase(it);
    }
  }
  simulate(VmmOp::unmap, n);
  return Status::ok;
}

Status HostBackend::set_access(DevicePtr va, std::size_t size) {
  std::size_t n;
  {
    std::lock_guard lock(vm_mutex_);
    n = size == 0 ? 0 : tiling_mappings(va, size);
    if (n == 0) {
      return fail(Status::invalid_argument,
                  "host: set_access(va=%#llx, size=%zu): range must be fully mapped and consist "
                  "of whole mapped chunks",
                  ull(va), size);
    }
    if (::mprotect(to_ptr(va), size, PROT_READ | PROT_WRITE) != 0) {
      return fail(Status::error, "host: set_access(va=%#llx, size=%zu): mprotect failed: %s",
                  ull(va), size, std::strerror(errno));
    }
    auto it = mappings_.find(va);
    for (std::size_t i = 0; i < n; ++i, ++it) it->second.accessible = true;
  }
  simulate(VmmOp::set_access, n);
  return Status::ok;
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

// --- streams and events ---------------------------------------------------------

std::shared_ptr<HostStream> HostBackend::find_stream(StreamHandle stream, const char* call) {
  auto it = streams_.find(stream);
  if (it != streams_.end()) return it->second;
  if (stream == nullptr) {
    auto s = std::make_shared<HostStream>();
    streams_.emplace(nullptr, s);
    return s;
  }
  fail(Status::invalid_argument, "host: %s: unknown stream %p", call, stream);
  return nullptr;
}

Status HostBackend::stream_create(StreamHandle* stream) {
  if (stream == nullptr) {
    return fail(Status::invalid_argument, "host: stream_create: null output pointer");
  }
  try {
    auto s = std::make_shared<HostStream>();
    std::lock_guard lock(stream_mutex_);
    streams_.emplace(s.get(), s);
    *stream = s.get();
  } catch (const std::system_error& e) {
    return fail(Status::error, "host: stream_create: cannot start the stream thread: %s", e.what());
  }
  return Status::ok;
}

Status HostBackend::stream_destroy(StreamHandle stream) {
  if (stream == nullptr) {
    return fail(Status::invalid_argument,
                "host: stream_destroy: the default stream cannot be "
                "destroyed");
  }
  std::shared_ptr<HostStream> s;
  {
    std::lock_guard lock(stream_mutex_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) {
      return fail(Status::invalid_argument, "host: stream_destroy: unknown stream %p", stream);
    }
    if (it->second->on_worker_thread()) {
      return fail(Status::invalid_argument,
                  "host: stream_destroy: called from a job of stream %p itself", stream);
    }
    s = std::move(it->second);
    streams_.erase(it);
  }
  s->shutdown();
  return Status::ok;
}

Status HostBackend::event_create(EventHandle* event) {
  if (event == nullptr) {
    return fail(Status::invalid_argument, "host: event_create: null output pointer");
  }
  auto e = std::make_unique<Event>();
  std::lock_guard lock(stream_mutex_);
  *event = e.get();
  events_.emplace(e.get(), std::move(e));
  return Status::ok;
}

Status HostBackend::event_destroy(EventHandle event) {
  std::lock_guard lock(stream_mutex_);
  if (events_.erase(event) == 0) {
    return fail(Status::invalid_argument, "host: event_destroy: unknown event %p", event);
  }
  return Status::ok;
}

Status HostBackend::event_record(EventHandle event, StreamHandle stream) {
  std::lock_guard lock(stream_mutex_);
  auto e = events_.find(event);
  if (e == events_.end()) {
    return fail(Status::invalid_argument, "host: event_record: unknown event %p", event);
  }
  auto s = find_stream(stream, "event_record");
  if (!s) return Status::invalid_argument;
  e->second->stream = s;
  e->second->seq = s->tail();
  return Status::ok;
}

Status HostBackend::event_query(EventHandle event) {
  std::shared_ptr<HostStream> s;
  std::uint64_t seq;
  {
    std::lock_guard lock(stream_mutex_);
    auto e = events_.find(event);
    if (e == events_.end()) {
      return fail(Status::invalid_argument, "host: event_query: unknown event %p", event);
    }
    s = e->second->stream;
    seq = e->second->seq;
  }
  if (!s) return Status::ok;  // never recorded: complete, as in CUDA
  return s->reached(seq) ? Status::ok : Status::not_ready;
}

Status HostBackend::stream_wait_event(StreamHandle stream, EventHandle event) {
  std::shared_ptr<HostStream> s;
  std::shared_ptr<HostStream> target;
  std::uint64_t seq;
  {
    std::lock_guard lock(stream_mutex_);
    auto e = events_.find(event);
    if (e == events_.end()) {
      return fail(Status::invalid_argument, "host: stream_wait_event: unknown event %p", event);
    }
    s = find_stream(stream, "stream_wait_event");
    if (!s) return Status::invalid_argument;
    target = e->second->stream;
    seq = e->second->seq;
  }
  // The wait is on the record as it stands now; a later re-record does not
  // move it. Work already finished needs no dependency.
  if (target && !target->reached(seq)) s->enqueue_wait(std::move(target), seq);
  return Status::ok;
}

Status HostBackend::launch_host_func(StreamHandle stream, HostFn fn, void* user) {
  if (fn == nullptr) {
    return fail(Status::invalid_argument, "host: launch_host_func: null function");
  }
  std::shared_ptr<HostStream> s;
  {
    std::lock_guard lock(stream_mutex_);
    s = find_stream(stream, "launch_host_func");
    if (!s) return Status::invalid_argument;
  }
  s->enqueue(fn, user);
  return Status::ok;
}

Status HostBackend::stream_synchronize(StreamHandle stream) {
  std::shared_ptr<HostStream> s;
  {
    std::lock_guard lock(stream_mutex_);
    s = find_stream(stream, "stream_synchronize");
    if (!s) return Status::invalid_argument;
  }
  if (s->on_worker_thread()) {
    return fail(Status::invalid_argument,
                "host: stream_synchronize: called from a job of stream %p itself", stream);
  }
  s->drain();
  return Status::ok;
}

Status HostBackend::stream_is_capturing(StreamHandle stream, bool* capturing) {
  if (capturing == nullptr) {
    return fail(Status::invalid_argument, "host: stream_is_capturing: null output pointer");
  }
  if (stream != nullptr) {
    std::lock_guard lock(stream_mutex_);
    if (streams_.find(stream) == streams_.end()) {
      return fail(Status::invalid_argument, "host: stream_is_capturing: unknown stream %p", stream);
    }
  }
  *capturing = false;
  return Status::ok;
}

std::string HostBackend::last_error() const {
  return detail::thread_last_error();
}

}  // namespace memlake

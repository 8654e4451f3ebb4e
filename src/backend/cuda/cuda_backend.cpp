// CudaBackend implementation (see cuda_backend.hpp). Driver entry points are
// resolved once per process; every failure message names the failing call and
// the CUresult or cudaError_t name.
#include "backend/cuda/cuda_backend.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "backend/backend_detail.hpp"
#include "backend/process_limits.hpp"
#include "memlake/errors.hpp"

namespace memlake {

using detail::fail;
using detail::is_aligned;

namespace {

// The driver ABI this backend was written against; any driver at least this
// new serves it.
constexpr unsigned kDriverAbiVersion = 12000;

struct Driver {
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain = nullptr;
  PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity = nullptr;
  PFN_cuMemCreate_v10020 cuMemCreate = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle = nullptr;
};

Driver g_driver;
std::string g_driver_error;  // the last entry point resolve() did not find

template <class Fn>
bool resolve(const char* symbol, Fn* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion(symbol, &p, kDriverAbiVersion, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    g_driver_error =
        detail::format("cudaGetDriverEntryPointByVersion(%s, %u) failed: %s (query result %d)",
                       symbol, kDriverAbiVersion, cudaGetErrorName(e), static_cast<int>(found));
    return false;
  }
  *fn = reinterpret_cast<Fn>(p);
  return true;
}

// Resolves the driver table once; returns null (see g_driver_error) if any
// entry point is missing.
const Driver* driver() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    Driver& d = g_driver;
    ok = resolve("cuGetErrorName", &d.cuGetErrorName) && resolve("cuDeviceGet", &d.cuDeviceGet) &&
         resolve("cuDeviceGetAttribute", &d.cuDeviceGetAttribute) &&
         resolve("cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain) &&
         resolve("cuDevicePrimaryCtxRelease", &d.cuDevicePrimaryCtxRelease) &&
         resolve("cuCtxGetCurrent", &d.cuCtxGetCurrent) &&
         resolve("cuCtxSetCurrent", &d.cuCtxSetCurrent) &&
         resolve("cuMemGetAllocationGranularity", &d.cuMemGetAllocationGranularity) &&
         resolve("cuMemCreate", &d.cuMemCreate) && resolve("cuMemRelease", &d.cuMemRelease) &&
         resolve("cuMemAddressReserve", &d.cuMemAddressReserve) &&
         resolve("cuMemAddressFree", &d.cuMemAddressFree) && resolve("cuMemMap", &d.cuMemMap) &&
         resolve("cuMemUnmap", &d.cuMemUnmap) && resolve("cuMemSetAccess", &d.cuMemSetAccess) &&
         resolve("cuMemExportToShareableHandle", &d.cuMemExportToShareableHandle) &&
         resolve("cuMemImportFromShareableHandle", &d.cuMemImportFromShareableHandle);
  });
  return ok ? &g_driver : nullptr;
}

const char* cu_name(CUresult r) {
  const char* s = nullptr;
  if (g_driver.cuGetErrorName == nullptr || g_driver.cuGetErrorName(r, &s) != CUDA_SUCCESS ||
      s == nullptr) {
    return "CUDA_ERROR_UNKNOWN_CODE";
  }
  return s;
}

Status cu_status(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS:
      return Status::ok;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return Status::out_of_memory;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_INVALID_DEVICE:
      return Status::invalid_argument;
    case CUDA_ERROR_NOT_SUPPORTED:
      return Status::not_supported;
    default:
      return Status::error;
  }
}

// The driver has no codes of its own for its limits: running out of handles,
// mappings or address space all come back as CUDA_ERROR_OUT_OF_MEMORY (the
// VMM calls document no other), so the call that failed says which limit it
// was. cuMemCreate: physical memory or handles, out_of_memory (the remedy is
// the same: release unused chunks). cuMemAddressReserve: out_of_va.
// cuMemMap and cuMemSetAccess map memory that exists already: the driver's
// mapping state (page tables, its tracking of mapped ranges) ran out,
// out_of_mappings (unmapping idle ranges frees it).
Status cu_mapping_status(CUresult r) {
  return r == CUDA_ERROR_OUT_OF_MEMORY ? Status::out_of_mappings : cu_status(r);
}

// A POSIX descriptor export fails in the driver's own open/dup; errno then
// names a full descriptor table, whatever the CUresult.
Status cu_descriptor_status(CUresult r, int err) {
  if (err == EMFILE || err == ENFILE) return Status::out_of_descriptors;
  return cu_status(r);
}

Status rt_status(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return Status::ok;
    case cudaErrorNotReady:
      return Status::not_ready;
    case cudaErrorMemoryAllocation:
      return Status::out_of_memory;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevice:
      return Status::invalid_argument;
    case cudaErrorNotSupported:
      return Status::not_supported;
    default:
      return Status::error;
  }
}

// Runtime failure: message, and the runtime's sticky-free error state cleared
// so the caller's next cudaGetLastError() does not report our failure.
Status rt_fail(const char* call, cudaError_t e) {
  cudaGetLastError();
  return fail(rt_status(e), "cuda: %s failed: %s (%s)", call, cudaGetErrorName(e),
              cudaGetErrorString(e));
}

unsigned long long ull(std::uint64_t v) {
  return static_cast<unsigned long long>(v);
}

CUmemAllocationProp chunk_prop(int device, bool shareable) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes =
      shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

// The calling thread's stream capture mode is relaxed for the guard's
// lifetime (cudaThreadExchangeStreamCaptureMode, push and pop). Made after
// the backend's context is current, so the runtime binds no other.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() {
    if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
      cudaGetLastError();
      swapped_ = false;
    }
  }
  ~RelaxedCaptureMode() {
    if (swapped_) cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool swapped_ = true;
};

}  // namespace

// Makes the backend's primary context current for one request and restores
// the caller's context afterwards, so the caller's current device never
// changes. A thread with no context at all keeps ours when its runtime device
// is ours anyway (the runtime would bind the same context on its next call).
class CudaBackend::ContextGuard {
 public:
  explicit ContextGuard(const CudaBackend& b) : backend_(b) {
    CUcontext ctx = static_cast<CUcontext>(b.primary_ctx_);
    CUresult r = g_driver.cuCtxGetCurrent(&prev_);
    if (r != CUDA_SUCCESS) {
      status_ = fail(cu_status(r), "cuda: cuCtxGetCurrent failed: %s", cu_name(r));
      return;
    }
    if (prev_ == ctx) return;
    if (prev_ == nullptr && cudaGetDevice(&prev_device_) != cudaSuccess) {
      cudaGetLastError();
      prev_device_ = -1;
    }
    r = g_driver.cuCtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS) {
      status_ = fail(cu_status(r), "cuda: cuCtxSetCurrent(primary context of device %d) failed: %s",
                     b.device_, cu_name(r));
      return;
    }
    changed_ = true;
  }
  ~ContextGuard() {
    if (!changed_) return;
    if (prev_ != nullptr) {
      g_driver.cuCtxSetCurrent(prev_);
      return;
    }
    if (prev_device_ == backend_.device_) return;
    g_driver.cuCtxSetCurrent(nullptr);
    int now = -1;
    if (prev_device_ >= 0 && (cudaGetDevice(&now) != cudaSuccess || now != prev_device_)) {
      cudaSetDevice(prev_device_);
    }
    cudaGetLastError();
  }
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

  Status status() const { return status_; }

 private:
  const CudaBackend& backend_;
  CUcontext prev_ = nullptr;
  int prev_device_ = -1;
  bool changed_ = false;
  Status status_ = Status::ok;
};

#define MEMLAKE_CUDA_GUARD()         \
  ContextGuard context_guard(*this); \
  if (context_guard.status() != Status::ok) return context_guard.status()

// VMM calls, and creating or destroying streams and events, while any stream
// captures a graph: legal, but the runtime's global capture mode refuses
// calls it counts as potentially unsafe (cudaMalloc, for one) from every
// thread. They run in relaxed mode, which keeps refusing what truly
// conflicts with a capture (queries and synchronizations of captured work).
#define MEMLAKE_CUDA_VMM_GUARD() \
  MEMLAKE_CUDA_GUARD();          \
  RelaxedCaptureMode relaxed

int CudaBackend::device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

namespace {

// The devices of `mask` (all bits: every one that can reach `device` peer to
// peer) other than `device`; throws for a device that does not exist or
// cannot access `device`'s memory.
std::vector<int> resolve_peers(int device, int count, std::uint64_t mask) {
  const bool all = mask == ~std::uint64_t{0};
  std::vector<int> peers;
  for (int p = 0; p < 64; ++p) {
    if (p == device || ((mask >> p) & 1) == 0) continue;
    if (p >= count) {
      if (all) break;
      throw backend_error(detail::format(
          "cuda backend: peer_access names device %d, but there are %d device(s)", p, count));
    }
    int can = 0;
    const cudaError_t e = cudaDeviceCanAccessPeer(&can, p, device);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw backend_error(detail::format("cuda backend: cudaDeviceCanAccessPeer(%d, %d) failed: %s",
                                         p, device, cudaGetErrorName(e)));
    }
    if (can) {
      peers.push_back(p);
    } else if (!all) {
      throw backend_error(detail::format(
          "cuda backend: peer_access names device %d, which cannot access device %d peer to peer",
          p, device));
    }
  }
  return peers;
}

}  // namespace

CudaBackend::CudaBackend(CudaBackendOptions options)
    : device_(options.device), shareable_(options.shareable) {
  const int n = device_count();
  if (n == 0) {
    throw backend_error(
        "cuda backend: no CUDA device is available (no GPU, or no usable CUDA driver)");
  }
  if (device_ < 0 || device_ >= n) {
    throw backend_error(
        detail::format("cuda backend: device %d does not exist (%d device(s))", device_, n));
  }
  const Driver* d = driver();
  if (d == nullptr) throw backend_error("cuda backend: " + g_driver_error);
  peers_ = resolve_peers(device_, n, options.peer_access);

  CUdevice dev = 0;
  CUresult r = d->cuDeviceGet(&dev, device_);
  if (r != CUDA_SUCCESS) {
    throw backend_error(
        detail::format("cuda backend: cuDeviceGet(%d) failed: %s", device_, cu_name(r)));
  }
  cu_device_ = dev;
  int vmm = 0;
  r = d->cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  if (r != CUDA_SUCCESS || vmm == 0) {
    throw backend_error(
        detail::format("cuda backend: device %d does not support virtual memory management (%s)",
                       device_, r == CUDA_SUCCESS ? "attribute is 0" : cu_name(r)));
  }
  CUcontext ctx = nullptr;
  r = d->cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r != CUDA_SUCCESS) {
    throw backend_error(detail::format(
        "cuda backend: cuDevicePrimaryCtxRetain(device %d) failed: %s", device_, cu_name(r)));
  }
  primary_ctx_ = ctx;

  std::string error;
  {
    ContextGuard guard(*this);
    if (guard.status() != Status::ok) {
      error = detail::thread_last_error();
    } else {
      const CUmemAllocationProp prop = chunk_prop(device_, shareable_);
      std::size_t g = 0;
      r = d->cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      std::size_t free_bytes = 0, total_bytes = 0;
      const cudaError_t e =
          r == CUDA_SUCCESS ? cudaMemGetInfo(&free_bytes, &total_bytes) : cudaSuccess;
      if (r != CUDA_SUCCESS) {
        error = detail::format("cuMemGetAllocationGranularity failed: %s", cu_name(r));
      } else if (e != cudaSuccess) {
        cudaGetLastError();
        error = detail::format("cudaMemGetInfo failed: %s", cudaGetErrorName(e));
      } else {
        granularity_ = g;
        total_memory_ = total_bytes;
        if (options.capacity > 0) {
          capacity_ = options.capacity;
        } else if (options.capacity_fraction > 0) {
          capacity_ = static_cast<std::size_t>(options.capacity_fraction *
                                               static_cast<double>(total_bytes));
        } else {
          capacity_ = free_bytes;
        }
      }
    }
  }
  if (!error.empty()) {
    d->cuDevicePrimaryCtxRelease(dev);
    throw backend_error("cuda backend: " + error);
  }
}

CudaBackend::~CudaBackend() {
  if (primary_ctx_ != nullptr) g_driver.cuDevicePrimaryCtxRelease(cu_device_);
}

std::size_t CudaBackend::physical_bytes() const {
  std::lock_guard lock(mutex_);
  return physical_bytes_;
}

// The driver documents no bound on mappings or handles (it says
// CUDA_ERROR_OUT_OF_MEMORY when it runs out); the address space is the
// process's (unified addressing), and descriptors exist only while an
// export is handed over.
BackendLimits CudaBackend::limits() const {
  const ProcessLimits& m = process_limits();
  BackendLimits l;
  l.va_bytes = m.va_budget;
  l.descriptors = shareable_ ? m.descriptor_budget : 0;
  return l;
}

BackendUsage CudaBackend::usage() const {
  BackendUsage u;
  u.va_bytes = va_bytes_.load(std::memory_order_relaxed);
  return u;
}

std::string CudaBackend::last_error() const {
  return detail::thread_last_error_copy();
}

// --- virtual memory ----------------------------------------------------------

Status CudaBackend::reserve(std::size_t size, DevicePtr* va) {
  if (va == nullptr) return fail(Status::invalid_argument, "cuda: reserve: null output pointer");
  if (size == 0 || !is_aligned(size, granularity_)) {
    return fail(Status::invalid_argument,
                "cuda: reserve(size=%zu): size must be a positive multiple of the granularity %zu",
                size, granularity_);
  }
  MEMLAKE_CUDA_VMM_GUARD();
  CUdeviceptr p = 0;
  const CUresult r = g_driver.cuMemAddressReserve(&p, size, granularity_, 0, 0);
  if (r != CUDA_SUCCESS) {
    return fail(r == CUDA_ERROR_OUT_OF_MEMORY ? Status::out_of_va : cu_status(r),
                "cuda: cuMemAddressReserve(size=%zu) failed: %s", size, cu_name(r));
  }
  va_bytes_.fetch_add(size, std::memory_order_relaxed);
  *va = static_cast<DevicePtr>(p);
  return Status::ok;
}

Status CudaBackend::unreserve(DevicePtr va, std::size_t size) {
  MEMLAKE_CUDA_VMM_GUARD();
  const CUresult r = g_driver.cuMemAddressFree(static_cast<CUdeviceptr>(va), size);
  if (r != CUDA_SUCCESS) {
    return fail(cu_status(r), "cuda: cuMemAddressFree(va=%#llx, size=%zu) failed: %s", ull(va),
                size, cu_name(r));
  }
  va_bytes_.fetch_sub(size, std::memory_order_relaxed);
  return Status::ok;
}

Status CudaBackend::create_chunk(std::size_t size, ChunkHandle* chunk) {
  if (chunk == nullptr) {
    return fail(Status::invalid_argument, "cuda: create_chunk: null output pointer");
  }
  if (size == 0 || !is_aligned(size, granularity_)) {
    return fail(Status::invalid_argument,
                "cuda: create_chunk(size=%zu): size must be a positive multiple of the "
                "granularity %zu",
                size, granularity_);
  }
  {
    std::lock_guard lock(mutex_);
    if (size > capacity_ || physical_bytes_ > capacity_ - size) {
      return fail(Status::out_of_memory,
                  "cuda: create_chunk(size=%zu): out of memory: %zu of %zu bytes of capacity in "
                  "use",
                  size, physical_bytes_, capacity_);
    }
    physical_bytes_ += size;
  }
  CUmemGenericAllocationHandle handle = 0;
  CUresult r = CUDA_SUCCESS;
  Status guard_status;
  {
    ContextGuard guard(*this);
    RelaxedCaptureMode relaxed;
    guard_status = guard.status();
    if (guard_status == Status::ok) {
      const CUmemAllocationProp prop = chunk_prop(device_, shareable_);
      r = g_driver.cuMemCreate(&handle, size, &prop, 0);
    }
  }
  std::lock_guard lock(mutex_);
  if (guard_status != Status::ok) {
    physical_bytes_ -= size;
    return guard_status;
  }
  if (r != CUDA_SUCCESS) {
    physical_bytes_ -= size;
    return fail(cu_status(r), "cuda: cuMemCreate(size=%zu, device=%d) failed: %s", size, device_,
                cu_name(r));
  }
  try {
    chunks_.emplace(static_cast<ChunkHandle>(handle), size);
  } catch (const std::bad_alloc&) {
    // Untracked, the handle could never be released: give it back now.
    physical_bytes_ -= size;
    ContextGuard guard(*this);
    RelaxedCaptureMode relaxed;
    if (guard.status() == Status::ok) g_driver.cuMemRelease(handle);
    return fail(Status::out_of_host_memory,
                "cuda: create_chunk(size=%zu): out of host memory for the chunk table", size);
  }
  *chunk = static_cast<ChunkHandle>(handle);
  return Status::ok;
}

Status CudaBackend::export_chunk(ChunkHandle chunk, int* fd) {
  if (fd == nullptr)
    return fail(Status::invalid_argument, "cuda: export_chunk: null output pointer");
  if (!shareable_) {
    return fail(Status::not_supported,
                "cuda: export_chunk(chunk=%#llx): chunks were not created shareable (set "
                "shareable:true)",
                ull(chunk));
  }
  {
    std::lock_guard lock(mutex_);
    if (chunks_.count(chunk) == 0) {
      return fail(Status::invalid_argument, "cuda: export_chunk(chunk=%#llx): unknown chunk handle",
                  ull(chunk));
    }
  }
  MEMLAKE_CUDA_VMM_GUARD();
  int out = -1;
  errno = 0;
  const CUresult r =
      g_driver.cuMemExportToShareableHandle(&out, static_cast<CUmemGenericAllocationHandle>(chunk),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) {
    const int err = errno;
    return fail(cu_descriptor_status(r, err),
                "cuda: cuMemExportToShareableHandle(chunk=%#llx) failed: %s%s%s", ull(chunk),
                cu_name(r), err != 0 ? "; errno: " : "", err != 0 ? std::strerror(err) : "");
  }
  *fd = out;
  return Status::ok;
}

Status CudaBackend::import_chunk(int fd, std::size_t size, ChunkHandle* chunk) {
  if (chunk == nullptr)
    return fail(Status::invalid_argument, "cuda: import_chunk: null output pointer");
  if (size == 0 || size % granularity_ != 0) {
    return fail(Status::invalid_argument,
                "cuda: import_chunk(fd=%d, size=%zu): size must be a positive multiple of the "
                "granularity %zu",
                fd, size, granularity_);
  }
  MEMLAKE_CUDA_VMM_GUARD();
  CUmemGenericAllocationHandle handle = 0;
  errno = 0;
  const CUresult r = g_driver.cuMemImportFromShareableHandle(
      &handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) {
    const int err = errno;
    return fail(cu_descriptor_status(r, err),
                "cuda: cuMemImportFromShareableHandle(fd=%d) failed: %s%s%s", fd, cu_name(r),
                err != 0 ? "; errno: " : "", err != 0 ? std::strerror(err) : "");
  }
  std::lock_guard lock(mutex_);
  try {
    chunks_.emplace(static_cast<ChunkHandle>(handle), size);
  } catch (const std::bad_alloc&) {
    g_driver.cuMemRelease(handle);
    return fail(Status::out_of_host_memory,
                "cuda: import_chunk(fd=%d): out of host memory for the chunk table", fd);
  }
  physical_bytes_ += size;
  *chunk = static_cast<ChunkHandle>(handle);
  return Status::ok;
}

Status CudaBackend::release_chunk(ChunkHandle chunk) {
  // The entry leaves the table as a node, so that putting it back after a
  // refused release needs no memory.
  decltype(chunks_)::node_type entry;
  {
    std::lock_guard lock(mutex_);
    auto it = chunks_.find(chunk);
    if (it == chunks_.end()) {
      return fail(Status::invalid_argument,
                  "cuda: release_chunk(chunk=%#llx): unknown chunk handle (never created or "
                  "already released)",
                  ull(chunk));
    }
    entry = chunks_.extract(it);
  }
  const std::size_t size = entry.mapped();
  CUresult r = CUDA_SUCCESS;
  Status guard_status;
  {
    ContextGuard guard(*this);
    RelaxedCaptureMode relaxed;
    guard_status = guard.status();
    if (guard_status == Status::ok) r = g_driver.cuMemRelease(chunk);
  }
  std::lock_guard lock(mutex_);
  if (guard_status != Status::ok || r != CUDA_SUCCESS) {
    try {
      chunks_.insert(std::move(entry));  // the handle is still alive
    } catch (const std::bad_alloc&) {
    }
    if (guard_status != Status::ok) return guard_status;
    return fail(cu_status(r), "cuda: cuMemRelease(chunk=%#llx) failed: %s", ull(chunk), cu_name(r));
  }
  physical_bytes_ -= size;
  return Status::ok;
}

Status CudaBackend::map(DevicePtr va, std::size_t size, ChunkHandle chunk) {
  {
    std::lock_guard lock(mutex_);
    auto it = chunks_.find(chunk);
    if (it == chunks_.end()) {
      return fail(Status::invalid_argument,
                  "cuda: map(va=%#llx, size=%zu, chunk=%#llx): unknown chunk handle", ull(va), size,
                  ull(chunk));
    }
    if (size != it->second) {
      return fail(Status::invalid_argument,
                  "cuda: map(va=%#llx, size=%zu, chunk=%#llx): a chunk is mapped whole; its size "
                  "is %zu",
                  ull(va), size, ull(chunk), it->second);
    }
  }
  if (!is_aligned(va, granularity_)) {
    return fail(Status::invalid_argument,
                "cuda: map(va=%#llx, size=%zu, chunk=%#llx): address is not aligned to the "
                "granularity %zu",
                ull(va), size, ull(chunk), granularity_);
  }
  MEMLAKE_CUDA_VMM_GUARD();
  const CUresult r = g_driver.cuMemMap(static_cast<CUdeviceptr>(va), size, 0,
                                       static_cast<CUmemGenericAllocationHandle>(chunk), 0);
  if (r != CUDA_SUCCESS) {
    return fail(cu_mapping_status(r), "cuda: cuMemMap(va=%#llx, size=%zu, chunk=%#llx) failed: %s",
                ull(va), size, ull(chunk), cu_name(r));
  }
  return Status::ok;
}

Status CudaBackend::unmap(DevicePtr va, std::size_t size) {
  MEMLAKE_CUDA_VMM_GUARD();
  const CUresult r = g_driver.cuMemUnmap(static_cast<CUdeviceptr>(va), size);
  if (r != CUDA_SUCCESS) {
    return fail(cu_status(r), "cuda: cuMemUnmap(va=%#llx, size=%zu) failed: %s", ull(va), size,
                cu_name(r));
  }
  return Status::ok;
}

Status CudaBackend::set_access(DevicePtr va, std::size_t size) {
  MEMLAKE_CUDA_VMM_GUARD();
  // The own device and every peer in one call: one pass over the handles.
  CUmemAccessDesc desc[65];
  std::memset(desc, 0, sizeof desc);
  std::size_t n = 0;
  auto grant = [&](int device) {
    desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc[n].location.id = device;
    desc[n].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ++n;
  };
  grant(device_);
  for (int p : peers_) grant(p);
  const CUresult r = g_driver.cuMemSetAccess(static_cast<CUdeviceptr>(va), size, desc, n);
  if (r != CUDA_SUCCESS) {
    return fail(cu_mapping_status(r), "cuda: cuMemSetAccess(va=%#llx, size=%zu) failed: %s",
                ull(va), size, cu_name(r));
  }
  return Status::ok;
}

// --- streams and events ---------------------------------------------------------

namespace {
cudaStream_t to_stream(StreamHandle s) {
  return static_cast<cudaStream_t>(s);
}
cudaEvent_t to_event(EventHandle e) {
  return static_cast<cudaEvent_t>(e);
}
}  // namespace

Status CudaBackend::stream_create(StreamHandle* stream) {
  if (stream == nullptr) {
    return fail(Status::invalid_argument, "cuda: stream_create: null output pointer");
  }
  MEMLAKE_CUDA_VMM_GUARD();
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return rt_fail("cudaStreamCreateWithFlags", e);
  *stream = s;
  return Status::ok;
}

Status CudaBackend::stream_destroy(StreamHandle stream) {
  if (stream == nullptr) {
    return fail(Status::invalid_argument,
                "cuda: stream_destroy: the default stream cannot be destroyed");
  }
  MEMLAKE_CUDA_VMM_GUARD();
  const cudaError_t e = cudaStreamDestroy(to_stream(stream));
  if (e != cudaSuccess) return rt_fail("cudaStreamDestroy", e);
  return Status::ok;
}

Status CudaBackend::event_create(EventHandle* event) {
  if (event == nullptr) {
    return fail(Status::invalid_argument, "cuda: event_create: null output pointer");
  }
  MEMLAKE_CUDA_VMM_GUARD();
  cudaEvent_t ev = nullptr;
  const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return rt_fail("cudaEventCreateWithFlags", e);
  *event = ev;
  return Status::ok;
}

Status CudaBackend::event_destroy(EventHandle event) {
  if (event == nullptr) return fail(Status::invalid_argument, "cuda: event_destroy: null event");
  MEMLAKE_CUDA_VMM_GUARD();
  const cudaError_t e = cudaEventDestroy(to_event(event));
  if (e != cudaSuccess) return rt_fail("cudaEventDestroy", e);
  return Status::ok;
}

Status CudaBackend::event_record(EventHandle event, StreamHandle stream) {
  if (event == nullptr) return fail(Status::invalid_argument, "cuda: event_record: null event");
  MEMLAKE_CUDA_GUARD();
  const cudaError_t e = cudaEventRecord(to_event(event), to_stream(stream));
  if (e != cudaSuccess) return rt_fail("cudaEventRecord", e);
  return Status::ok;
}

// No context guard: an event carries its context, and this is the call the
// stream order makes most often.
Status CudaBackend::event_query(EventHandle event) {
  if (event == nullptr) return fail(Status::invalid_argument, "cuda: event_query: null event");
  const cudaError_t e = cudaEventQuery(to_event(event));
  if (e == cudaSuccess) return Status::ok;
  if (e == cudaErrorNotReady) return Status::not_ready;
  return rt_fail("cudaEventQuery", e);
}

Status CudaBackend::stream_wait_event(StreamHandle stream, EventHandle event) {
  if (event == nullptr) {
    return fail(Status::invalid_argument, "cuda: stream_wait_event: null event");
  }
  MEMLAKE_CUDA_GUARD();
  const cudaError_t e = cudaStreamWaitEvent(to_stream(stream), to_event(event), 0);
  if (e != cudaSuccess) return rt_fail("cudaStreamWaitEvent", e);
  return Status::ok;
}

Status CudaBackend::launch_host_func(StreamHandle stream, HostFn fn, void* user) {
  if (fn == nullptr) return fail(Status::invalid_argument, "cuda: launch_host_func: null function");
  MEMLAKE_CUDA_GUARD();
  const cudaError_t e = cudaLaunchHostFunc(to_stream(stream), fn, user);
  if (e != cudaSuccess) return rt_fail("cudaLaunchHostFunc", e);
  return Status::ok;
}

Status CudaBackend::stream_synchronize(StreamHandle stream) {
  MEMLAKE_CUDA_GUARD();
  const cudaError_t e = cudaStreamSynchronize(to_stream(stream));
  if (e != cudaSuccess) return rt_fail("cudaStreamSynchronize", e);
  return Status::ok;
}

Status CudaBackend::stream_is_capturing(StreamHandle stream, bool* capturing) {
  if (capturing == nullptr) {
    return fail(Status::invalid_argument, "cuda: stream_is_capturing: null output pointer");
  }
  MEMLAKE_CUDA_GUARD();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(to_stream(stream), &status);
  if (e == cudaErrorStreamCaptureImplicit) {
    // The legacy default stream while another stream captures globally.
    cudaGetLastError();
    *capturing = true;
    return Status::ok;
  }
  if (e != cudaSuccess) return rt_fail("cudaStreamIsCapturing", e);
  // An invalidated capture is still a capture: the stream must not be
  // synchronized or queried until it ends.
  *capturing = status != cudaStreamCaptureStatusNone;
  return Status::ok;
}

// --- graph capture --------------------------------------------------------------

Status CudaBackend::stream_begin_capture(StreamHandle stream) {
  MEMLAKE_CUDA_GUARD();
  const cudaError_t e = cudaStreamBeginCapture(to_stream(stream), cudaStreamCaptureModeGlobal);
  if (e != cudaSuccess) return rt_fail("cudaStreamBeginCapture", e);
  return Status::ok;
}

// The captured graph is instantiated at once and dropped: a GraphHandle is
// the executable graph.
Status CudaBackend::stream_end_capture(StreamHandle stream, GraphHandle* graph) {
  if (graph == nullptr) {
    return fail(Status::invalid_argument, "cuda: stream_end_capture: null output pointer");
  }
  *graph = nullptr;
  MEMLAKE_CUDA_GUARD();
  cudaGraph_t captured = nullptr;
  cudaError_t e = cudaStreamEndCapture(to_stream(stream), &captured);
  if (e != cudaSuccess) return rt_fail("cudaStreamEndCapture", e);
  if (captured == nullptr) {
    return fail(Status::error,
                "cuda: cudaStreamEndCapture gave no graph (the capture was "
                "invalidated)");
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, captured, 0);
  cudaGraphDestroy(captured);
  if (e != cudaSuccess) return rt_fail("cudaGraphInstantiate", e);
  *graph = exec;
  return Status::ok;
}

Status CudaBackend::graph_launch(GraphHandle graph, StreamHandle stream) {
  if (graph == nullptr) return fail(Status::invalid_argument, "cuda: graph_launch: null graph");
  MEMLAKE_CUDA_GUARD();
  const cudaError_t e = cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), to_stream(stream));
  if (e != cudaSuccess) return rt_fail("cudaGraphLaunch", e);
  return Status::ok;
}

Status CudaBackend::graph_destroy(GraphHandle graph) {
  if (graph == nullptr) return fail(Status::invalid_argument, "cuda: graph_destroy: null graph");
  MEMLAKE_CUDA_GUARD();
  const cudaError_t e = cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
  if (e != cudaSuccess) return rt_fail("cudaGraphExecDestroy", e);
  return Status::ok;
}

Status CudaBackend::stream_capture_info(StreamHandle stream, CaptureState* state,
                                        std::uint64_t* id) {
  if (state == nullptr || id == nullptr) {
    return fail(Status::invalid_argument, "cuda: stream_capture_info: null output pointer");
  }
  MEMLAKE_CUDA_GUARD();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  const cudaError_t e = cudaStreamGetCaptureInfo(to_stream(stream), &status, &capture_id);
  if (e == cudaErrorStreamCaptureImplicit) {
    // The legacy default stream while a blocking stream captures: it cannot
    // be used, as if it captured; it has no capture of its own.
    cudaGetLastError();
    *state = CaptureState::invalidated;
    *id = 0;
    return Status::ok;
  }
  if (e != cudaSuccess) return rt_fail("cudaStreamGetCaptureInfo", e);
  switch (status) {
    case cudaStreamCaptureStatusActive:
      *state = CaptureState::active;
      *id = static_cast<std::uint64_t>(capture_id);
      break;
    case cudaStreamCaptureStatusInvalidated:
      *state = CaptureState::invalidated;
      *id = 0;  // valid for an active capture only
      break;
    default:
      *state = CaptureState::none;
      *id = 0;
  }
  return Status::ok;
}

Status CudaBackend::device_synchronize() {
  MEMLAKE_CUDA_GUARD();
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return rt_fail("cudaDeviceSynchronize", e);
  return Status::ok;
}

}  // namespace memlake

// The `nvtx` option's observer (nvtx_observer.hpp): the only file that
// includes the NVTX headers.
#include "profiling/nvtx_observer.hpp"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#if MEMLAKE_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>
#endif

namespace memlake {

#if MEMLAKE_HAVE_NVTX

namespace {

// The domain and its registered strings, made on first use and kept for the
// process (NVTX has no way to unregister a string).
struct Names {
  nvtxDomainHandle_t domain = nullptr;
  nvtxStringHandle_t slow_allocation = nullptr, worker_job = nullptr, oom = nullptr,
                     reclaim = nullptr;
  nvtxStringHandle_t rung[kRungCount] = {};
  nvtxStringHandle_t job[kWorkerJobKinds] = {};

  Names() {
    domain = nvtxDomainCreateA("memlake");
    slow_allocation = nvtxDomainRegisterStringA(domain, "allocate: map or create");
    worker_job = nvtxDomainRegisterStringA(domain, "mapping worker job");
    oom = nvtxDomainRegisterStringA(domain, "out of memory");
    reclaim = nvtxDomainRegisterStringA(domain, "reclaim");
    for (int i = 0; i < kRungCount; ++i) {
      const std::string name = std::string("served by ") + rung_name(static_cast<Rung>(i));
      rung[i] = nvtxDomainRegisterStringA(domain, name.c_str());
    }
    for (int k = 0; k < kWorkerJobKinds; ++k)
      job[k] = nvtxDomainRegisterStringA(domain, worker_job_name(static_cast<WorkerJobKind>(k)));
  }
};

const Names& names() {
  static const Names n;
  return n;
}

// Slow work open on this thread (begin and end pair up on one thread); an
// end without its begin (an observer added while a job ran) is ignored.
// An allocation's range ends before its block is handed out: the rung that
// served it is marked then.
thread_local int t_open_ranges = 0;
thread_local bool t_slow_allocation = false;

constexpr std::uint32_t kColorAllocation = 0xffd62728, kColorWorker = 0xff1f77b4,
                        kColorMark = 0xffff7f0e;

nvtxEventAttributes_t attributes(nvtxStringHandle_t message, std::uint64_t payload,
                                 std::uint32_t color, int device) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = static_cast<std::uint32_t>(device) + 1;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = color;
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = payload;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = message;
  return a;
}

void mark(nvtxStringHandle_t message, std::uint64_t payload, int device) {
  const nvtxEventAttributes_t a = attributes(message, payload, kColorMark, device);
  nvtxDomainMarkEx(names().domain, &a);
}

}  // namespace

bool NvtxObserver::available() {
  return true;
}

NvtxObserver::NvtxObserver(int device) : device_(device) {
  const std::string category = "device " + std::to_string(device);
  nvtxDomainNameCategoryA(names().domain, static_cast<std::uint32_t>(device) + 1, category.c_str());
}

NvtxObserver::~NvtxObserver() {
  while (!heaps_.empty()) unregister_heap(heaps_.begin());
}

void NvtxObserver::register_heap(std::uint64_t va, std::uint64_t bytes) {
  nvtxMemVirtualRangeDesc_t range{};
  range.size = bytes;
  range.ptr = reinterpret_cast<const void*>(va);
  nvtxMemHeapDesc_t desc{};
  desc.extCompatID = NVTX_EXT_COMPATID_MEM;
  desc.structSize = sizeof desc;
  desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
  desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  desc.typeSpecificDescSize = sizeof range;
  desc.typeSpecificDesc = &range;
  // No category or message: compute-sanitizer 2025.3 refuses a heap that
  // has them, even over cudaMalloc memory (tests/nvtx/sanitizer_check.cu,
  // heap-probe).
  void* heap = nvtxMemHeapRegister(names().domain, &desc);
  // Without a tool NVTX hands back no heap: nothing listens to the memory
  // API, so its bookkeeping stops here (ranges and markers go on).
  if (heap == nullptr) {
    memory_api_ = false;
    heaps_.clear();
    live_ = {};
    return;
  }
  heaps_[va] = Heap{bytes, heap};
}

void NvtxObserver::unregister_heap(std::map<std::uint64_t, Heap>::iterator it) {
  nvtxMemHeapUnregister(names().domain, static_cast<nvtxMemHeapHandle_t>(it->second.handle));
  heaps_.erase(it);
}

namespace {

void register_regions(void* heap, const nvtxMemVirtualRangeDesc_t* regions, std::size_t n) {
  nvtxMemRegionsRegisterBatch_t batch{};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof batch;
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.heap = static_cast<nvtxMemHeapHandle_t>(heap);
  batch.regionCount = n;
  batch.regionDescElementSize = sizeof(nvtxMemVirtualRangeDesc_t);
  batch.regionDescElements = regions;
  nvtxMemRegionsRegister(names().domain, &batch);
}

}  // namespace

void NvtxObserver::register_block(void* heap, std::uint64_t ptr, std::uint64_t bytes) {
  nvtxMemVirtualRangeDesc_t d{};
  d.size = bytes;
  d.ptr = reinterpret_cast<const void*>(ptr);
  register_regions(heap, &d, 1);
}

void NvtxObserver::register_blocks(void* heap, std::uint64_t va, std::uint64_t bytes) {
  std::vector<nvtxMemVirtualRangeDesc_t> blocks;
  live_.each([&](std::uint64_t ptr, std::uint64_t size) {
    if (ptr < va || ptr >= va + bytes) return;
    nvtxMemVirtualRangeDesc_t d{};
    d.size = size;
    d.ptr = reinterpret_cast<const void*>(ptr);
    blocks.push_back(d);
  });
  std::sort(blocks.begin(), blocks.end(),
            [](const auto& a, const auto& b) { return a.ptr < b.ptr; });
  if (!blocks.empty()) register_regions(heap, blocks.data(), blocks.size());
}

std::map<std::uint64_t, NvtxObserver::Heap>::iterator NvtxObserver::heap_of(std::uint64_t ptr) {
  auto it = heaps_.upper_bound(ptr);
  if (it == heaps_.begin()) return heaps_.end();
  --it;
  return ptr < it->first + it->second.bytes ? it : heaps_.end();
}

void NvtxObserver::on_alloc(const AllocEvent& e) {
  if (memory_api_) {
    const auto ptr = reinterpret_cast<std::uint64_t>(e.ptr);
    live_.put(ptr, e.size);
    auto heap = heap_of(ptr);
    if (heap != heaps_.end()) register_block(heap->second.handle, ptr, e.size);
  }
  if (t_slow_allocation) {
    t_slow_allocation = false;
    mark(names().rung[static_cast<int>(e.rung)], e.size, device_);
  }
}

void NvtxObserver::on_free(const FreeEvent& e) {
  if (!memory_api_ || !live_.erase(reinterpret_cast<std::uint64_t>(e.ptr))) return;
  nvtxMemRegionRef_t ref{};
  ref.pointer = e.ptr;
  nvtxMemRegionsUnregisterBatch_t batch{};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof batch;
  batch.refType = NVTX_MEM_REGION_REF_TYPE_POINTER;
  batch.refCount = 1;
  batch.refElementSize = sizeof ref;
  batch.refElements = &ref;
  nvtxMemRegionsUnregister(names().domain, &batch);
}

// An extension at a heap's end (or a new range right after one) replaces
// that heap by one over both: a block may lie across the old end.
// A new range holds no block yet; a joined one keeps those it held.
void NvtxObserver::on_map(const MapEvent& e) {
  if (!memory_api_) return;
  auto after = heaps_.lower_bound(e.va);
  if (after != heaps_.begin()) {
    auto before = std::prev(after);
    if (before->first + before->second.bytes == e.va) {
      const std::uint64_t va = before->first, bytes = before->second.bytes + e.bytes;
      unregister_heap(before);
      register_heap(va, bytes);
      if (memory_api_) register_blocks(heaps_[va].handle, va, bytes);
      return;
    }
  }
  register_heap(e.va, e.bytes);
}

// Cuts [va, va + bytes) out of the heaps holding it: what is left of them
// becomes heaps of its own, with their live blocks.
void NvtxObserver::on_unmap(const MapEvent& e) {
  if (!memory_api_) return;
  const std::uint64_t end = e.va + e.bytes;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> left;
  auto it = heaps_.upper_bound(e.va);
  if (it != heaps_.begin()) --it;
  while (it != heaps_.end() && it->first < end) {
    const std::uint64_t first = it->first, last = it->first + it->second.bytes;
    if (last <= e.va) {
      ++it;
      continue;
    }
    auto next = std::next(it);
    unregister_heap(it);
    if (first < e.va) left.emplace_back(first, e.va - first);
    if (last > end) left.emplace_back(end, last - end);
    it = next;
  }
  for (auto [va, bytes] : left) {
    register_heap(va, bytes);
    if (memory_api_) register_blocks(heaps_[va].handle, va, bytes);
  }
}

void NvtxObserver::on_reclaim(std::size_t released) {
  mark(names().reclaim, released, device_);
}

void NvtxObserver::on_worker_job(const WorkerJobEvent& e) {
  mark(names().job[static_cast<int>(e.kind)], e.bytes, device_);
}

void NvtxObserver::on_oom(std::size_t bytes, void*) {
  t_slow_allocation = false;
  mark(names().oom, bytes, device_);
}

void NvtxObserver::on_slow_begin(SlowWork work, std::size_t bytes, void*) {
  const bool alloc = work == SlowWork::allocation;
  const nvtxEventAttributes_t a =
      attributes(alloc ? names().slow_allocation : names().worker_job, bytes,
                 alloc ? kColorAllocation : kColorWorker, device_);
  nvtxDomainRangePushEx(names().domain, &a);
  ++t_open_ranges;
  if (alloc) t_slow_allocation = true;
}

void NvtxObserver::on_slow_end(SlowWork) {
  if (t_open_ranges == 0) return;
  --t_open_ranges;
  nvtxDomainRangePop(names().domain);
}

#else  // no NVTX headers: the option is refused (profiling.cpp), nothing is made

bool NvtxObserver::available() {
  return false;
}
NvtxObserver::NvtxObserver(int device) : device_(device) {}
NvtxObserver::~NvtxObserver() {
  heaps_.clear();
  live_ = {};
}
void NvtxObserver::on_alloc(const AllocEvent&) {}
void NvtxObserver::on_free(const FreeEvent&) {}
void NvtxObserver::on_map(const MapEvent&) {}
void NvtxObserver::on_unmap(const MapEvent&) {}
void NvtxObserver::on_reclaim(std::size_t) {}
void NvtxObserver::on_worker_job(const WorkerJobEvent&) {}
void NvtxObserver::on_oom(std::size_t, void*) {}
void NvtxObserver::on_slow_begin(SlowWork, std::size_t, void*) {}
void NvtxObserver::on_slow_end(SlowWork) {}

#endif

}  // namespace memlake

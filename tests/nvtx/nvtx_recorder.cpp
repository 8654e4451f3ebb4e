// An NVTX injection library for the tests: NVTX loads it from
// NVTX_INJECTION64_PATH at the first NVTX call (core and memory extension
// alike) and routes the calls memlake makes here. Each call becomes one line
// appended to the file MEMLAKE_NVTX_LOG names, in the order of the calls:
//
//   domain <name>                 nvtxDomainCreateA
//   string <text>                 nvtxDomainRegisterStringA
//   category <id> <name>          nvtxDomainNameCategoryA
//   push <message> <payload>      nvtxDomainRangePushEx
//   pop                           nvtxDomainRangePop
//   mark <message> <payload>      nvtxDomainMarkEx
//   heap+ <va> <bytes> <usage> <type>     nvtxMemHeapRegister (the handle is va)
//   heap- <va>                    nvtxMemHeapUnregister
//   region+ <heap> <ptr> <bytes>  nvtxMemRegionsRegister, a line per region
//   region- <ptr>                 nvtxMemRegionsUnregister, a line per region
//
// Numbers are hexadecimal for addresses, decimal otherwise.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

std::mutex g_mutex;

void line(const char* format, ...) {
  std::lock_guard lock(g_mutex);
  const char* path = std::getenv("MEMLAKE_NVTX_LOG");
  if (path == nullptr) return;
  std::FILE* f = std::fopen(path, "a");
  if (f == nullptr) return;
  va_list args;
  va_start(args, format);
  std::vfprintf(f, format, args);
  va_end(args);
  std::fputc('\n', f);
  std::fclose(f);
}

// Registered strings and domains are handles to strings we keep.
const char* text_of(const nvtxEventAttributes_t* a) {
  if (a == nullptr) return "?";
  if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
    return reinterpret_cast<const std::string*>(a->message.registered)->c_str();
  if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) return a->message.ascii;
  return "?";
}

std::uint64_t payload_of(const nvtxEventAttributes_t* a) {
  return a != nullptr && a->payloadType == NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 ? a->payload.ullValue
                                                                            : 0;
}

nvtxDomainHandle_t domain_create(const char* name) {
  line("domain %s", name);
  return reinterpret_cast<nvtxDomainHandle_t>(new std::string(name));
}

nvtxStringHandle_t register_string(nvtxDomainHandle_t, const char* s) {
  line("string %s", s);
  return reinterpret_cast<nvtxStringHandle_t>(new std::string(s));
}

void name_category(nvtxDomainHandle_t, std::uint32_t id, const char* name) {
  line("category %u %s", id, name);
}

int push(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) {
  line("push %s %" PRIu64, text_of(a), payload_of(a));
  return 0;
}

int pop(nvtxDomainHandle_t) {
  line("pop");
  return 0;
}

void mark(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) {
  line("mark %s %" PRIu64, text_of(a), payload_of(a));
}

nvtxMemHeapHandle_t heap_register(nvtxDomainHandle_t, const nvtxMemHeapDesc_t* d) {
  const auto* range = static_cast<const nvtxMemVirtualRangeDesc_t*>(d->typeSpecificDesc);
  line("heap+ %p %zu %u %u", range->ptr, range->size, d->usage, d->type);
  return reinterpret_cast<nvtxMemHeapHandle_t>(const_cast<void*>(range->ptr));
}

void heap_unregister(nvtxDomainHandle_t, nvtxMemHeapHandle_t heap) {
  line("heap- %p", static_cast<void*>(heap));
}

void regions_register(nvtxDomainHandle_t, const nvtxMemRegionsRegisterBatch_t* b) {
  const auto* r = static_cast<const nvtxMemVirtualRangeDesc_t*>(b->regionDescElements);
  for (std::size_t i = 0; i < b->regionCount; ++i)
    line("region+ %p %p %zu", static_cast<void*>(b->heap), r[i].ptr, r[i].size);
}

void regions_unregister(nvtxDomainHandle_t, const nvtxMemRegionsUnregisterBatch_t* b) {
  for (std::size_t i = 0; i < b->refCount; ++i) line("region- %p", b->refElements[i].pointer);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks == nullptr ||
      !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size))
    return 0;
  auto set = [&](unsigned id, auto fn) {
    if (id < size) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
  };
  set(NVTX_CBID_CORE2_DomainCreateA, &domain_create);
  set(NVTX_CBID_CORE2_DomainRegisterStringA, &register_string);
  set(NVTX_CBID_CORE2_DomainNameCategoryA, &name_category);
  set(NVTX_CBID_CORE2_DomainRangePushEx, &push);
  set(NVTX_CBID_CORE2_DomainRangePop, &pop);
  set(NVTX_CBID_CORE2_DomainMarkEx, &mark);
  line("injected");
  return 1;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtxExtension(
    nvtxExtModuleInfo_t* info) {
  if (info->moduleId != NVTX_EXT_MODULEID_MEM || info->segmentsCount < 1) return 1;
  intptr_t* slots = info->segments[0].functionSlots;
  const std::size_t n = info->segments[0].slotCount;
  auto set = [&](std::size_t id, auto fn) {
    if (id < n) slots[id] = reinterpret_cast<intptr_t>(fn);
  };
  set(NVTX3EXT_CBID_nvtxMemHeapRegister, &heap_register);
  set(NVTX3EXT_CBID_nvtxMemHeapUnregister, &heap_unregister);
  set(NVTX3EXT_CBID_nvtxMemRegionsRegister, &regions_register);
  set(NVTX3EXT_CBID_nvtxMemRegionsUnregister, &regions_unregister);
  line("injected memory extension");
  return 1;
}

}  // extern "C"

// The PyTorch hooks (memlake/torch_hooks.h): the C API's table with errors
// thrown to the caller, which is PyTorch's C++ and reports them in Python.
#include <cstdio>
#include <string>

#include "c_api_table.hpp"
#include "memlake/errors.hpp"
#include "memlake/memlake.h"
#include "memlake/torch_hooks.h"

using namespace memlake;
using namespace memlake::c_api;

namespace {

// Keeps memlake_last_error() in step with what is thrown.
template <class F>
auto reporting(F&& body) {
  clear_error();
  try {
    return body();
  } catch (const std::exception& e) {
    set_error(e.what());
    throw;
  }
}

// A free never throws (PyTorch frees from destructors): its error goes to
// stderr.
void report_failed_free() {
  if (const char* e = memlake_last_error(); e[0] != '\0') std::fprintf(stderr, "%s\n", e);
}

// The device this thread last allocated on: where a free with the pointer
// alone looks first when several devices have allocators (a thread mostly
// frees what it allocated).
thread_local int t_last_device = -1;

}  // namespace

extern "C" {

void* memlake_torch_malloc(size_t size, int device, void* stream) {
  return reporting([&] {
    check_open();
    check_device("memlake_torch_malloc", device);
    t_last_device = device;
    return get_or_create(device).allocate(size, stream);
  });
}

void memlake_torch_free(void* ptr, size_t size, int device, void* stream) {
  memlake_free(ptr, size, device, stream);
  report_failed_free();
}

void memlake_torch_free_block(void* ptr) {
  guarded(0, [&] {
    check_open();
    if (ptr != nullptr) free_where_held("memlake_torch_free_block", ptr, t_last_device);
    return 0;
  });
  report_failed_free();
}

void memlake_torch_record_stream(void* ptr, void* stream) {
  reporting([&] {
    check_open();
    const int device = device_holding(ptr);
    Allocator* a = device < 0 ? nullptr : existing(device);
    if (a == nullptr) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "memlake: record_stream: %p is not a live allocation of any device", ptr);
      throw misuse(buf);
    }
    a->record_stream(ptr, stream);
  });
}

void memlake_torch_empty_cache(void) {
  reporting([&] {
    check_open();
    for (int d = 0; d < kMaxDevices; ++d)
      if (Allocator* a = existing(d)) a->empty_cache();
  });
}

void memlake_torch_set_memory_fraction(double fraction, int device) {
  reporting([&] {
    check_device("memlake_torch_set_memory_fraction", device);
    set_capacity_fraction(device, fraction);
  });
}

}  // extern "C"

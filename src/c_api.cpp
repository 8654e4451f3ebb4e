// The C API of memlake.h over memlake::Allocator. It owns the per-process
// table of allocators (one per device, 0 to 63, created on first allocation
// from Config::from_env() with `device` set) and turns every exception into
// a return value plus a per-thread message for memlake_last_error().
//
// Every call except memlake_last_error() clears the message on entry, so
// after a memlake_free() a non-empty memlake_last_error() means that free
// failed. Allocators are never destroyed at process exit: frees may still
// arrive from other libraries' static destructors. memlake_shutdown()
// destroys them; it must not race with other calls.
#include "memlake/memlake.h"

#include "c_api_table.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memlake/allocator.hpp"
#include "memlake/config.hpp"
#include "memlake/errors.hpp"
#include "memlake/stats.hpp"

namespace memlake::c_api {
namespace {

constexpr const char* kShutdownMessage = "memlake: called after memlake_shutdown()";

std::atomic<Allocator*> g_allocators[kMaxDevices];
// The one device with an allocator while there is one: a pointer's device
// without a search. kNoDevice before the first, kSeveralDevices after a
// second.
constexpr int kNoDevice = -1;
constexpr int kSeveralDevices = -2;
std::atomic<int> g_sole_device{kNoDevice};
std::atomic<bool> g_shut_down{false};
std::mutex g_table_mutex;
double g_capacity_fraction[kMaxDevices];  // set before first use; under the table lock

// A fixed buffer rather than a std::string: setting it cannot fail (an
// out-of-memory report must not need memory) and there is no thread-exit
// destructor to outlive.
thread_local char t_last_error[1024];

}  // namespace

void set_error(std::string_view message) {
  const std::size_t n = std::min(message.size(), sizeof t_last_error - 1);
  std::memcpy(t_last_error, message.data(), n);
  t_last_error[n] = '\0';
}

void clear_error() {
  t_last_error[0] = '\0';
}

const char* last_error() {
  return t_last_error;
}

void check_open() {
  if (g_shut_down.load(std::memory_order_acquire)) throw error(kShutdownMessage);
}

void check_device(const char* function, int device) {
  if (device < 0 || device >= kMaxDevices) {
    throw misuse(std::string(function) + ": bad device " + std::to_string(device) +
                 " (devices 0 to " + std::to_string(kMaxDevices - 1) + " are supported)");
  }
}

Allocator* existing(int device) {
  return g_allocators[device].load(std::memory_order_acquire);
}

Allocator& get_or_create(int device) {
  if (Allocator* a = existing(device)) return *a;
  std::lock_guard lock(g_table_mutex);
  check_open();
  if (Allocator* a = g_allocators[device].load(std::memory_order_relaxed)) return *a;
  std::unique_ptr<Allocator> created;
  try {
    Config config = Config::from_env();
    config.device = device;
    if (g_capacity_fraction[device] > 0) {  // set by the program: it wins over the environment
      config.capacity = 0;
      config.capacity_fraction = g_capacity_fraction[device];
    }
    created = std::make_unique<Allocator>(config);
  } catch (const error& e) {
    throw error("memlake: cannot create the allocator for device " + std::to_string(device) + ": " +
                e.what());
  }
  Allocator* a = created.release();
  g_allocators[device].store(a, std::memory_order_release);
  g_sole_device.store(
      g_sole_device.load(std::memory_order_relaxed) == kNoDevice ? device : kSeveralDevices,
      std::memory_order_release);
  return *a;
}

void set_capacity_fraction(int device, double fraction) {
  if (!(fraction > 0 && fraction <= 1))
    throw misuse("memory fraction " + std::to_string(fraction) + " is not in (0, 1]");
  std::lock_guard lock(g_table_mutex);
  check_open();
  if (g_allocators[device].load(std::memory_order_relaxed) != nullptr) {
    throw misuse("memlake: the memory fraction of device " + std::to_string(device) +
                 " must be set before its first allocation (or give capacity_fraction in "
                 "MEMLAKE_CONF)");
  }
  g_capacity_fraction[device] = fraction;
}

int owner_elsewhere(const void* ptr, int device) {
  for (int d = 0; d < kMaxDevices; ++d) {
    const Allocator* a = d == device ? nullptr : existing(d);
    if (a != nullptr && a->owns(ptr)) return d;
  }
  return -1;
}

int device_holding(const void* ptr) {
  const int sole = g_sole_device.load(std::memory_order_acquire);
  return sole != kSeveralDevices ? sole : owner_elsewhere(ptr, -1);
}

namespace {

std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

[[noreturn]] void no_allocator(const char* function, const void* ptr, int device) {
  throw misuse(std::string(function) + ": unknown pointer " + pointer_text(ptr) + ": nothing was " +
               "allocated on device " + std::to_string(device));
}

// Runs op(allocator of `device`) for a pointer the caller holds. A pointer of
// another device's allocator is refused with a message that says so, and
// nothing changes on either device.
template <class Op>
void on_owner(const char* function, const void* ptr, int device, Op&& op) {
  auto wrong_device = [&] {
    const int owner = owner_elsewhere(ptr, device);
    if (owner < 0) return;
    throw misuse(std::string(function) + ": " + pointer_text(ptr) + " was allocated on device " +
                 std::to_string(owner) + ", not on device " + std::to_string(device) +
                 "; nothing was changed");
  };
  Allocator* a = existing(device);
  if (a == nullptr) {
    wrong_device();
    no_allocator(function, ptr, device);
  }
  try {
    op(*a);
  } catch (const misuse&) {
    wrong_device();
    throw;
  }
}

Stats device_stats(int device) {
  const Allocator* a = existing(device);
  return a != nullptr ? a->stats() : Stats{};
}

}  // namespace

void free_where_held(const char* function, void* ptr, int first_try) {
  const int sole = g_sole_device.load(std::memory_order_acquire);
  if (sole >= 0) {
    if (existing(sole)->deallocate_on_own_stream(ptr)) return;
  } else if (sole == kSeveralDevices) {
    Allocator* hinted = first_try >= 0 && first_try < kMaxDevices ? existing(first_try) : nullptr;
    if (hinted != nullptr && hinted->deallocate_on_own_stream(ptr)) return;
    for (int d = 0; d < kMaxDevices; ++d) {
      Allocator* a = d == first_try ? nullptr : existing(d);
      if (a != nullptr && a->deallocate_on_own_stream(ptr)) return;
    }
  }
  // Not freed: describing the pointer through an allocator's deallocate
  // could free a block another thread was handed at this address meanwhile.
  throw misuse(std::string(function) + ": unknown pointer " + pointer_text(ptr) +
               ": no device holds a live block there (freed already, or not memlake's)");
}

}  // namespace memlake::c_api

using namespace memlake;
using namespace memlake::c_api;

extern "C" {

void* memlake_malloc(size_t size, int device, void* stream) {
  return guarded<void*>(nullptr, [&] {
    check_open();
    check_device("memlake_malloc", device);
    return get_or_create(device).allocate(size, stream);
  });
}

void memlake_free(void* ptr, size_t size, int device, void* stream) {
  guarded(0, [&] {
    check_open();
    check_device("memlake_free", device);
    if (ptr == nullptr) return 0;
    on_owner("memlake_free", ptr, device, [&](Allocator& a) { a.deallocate(ptr, size, stream); });
    return 0;
  });
}

int memlake_block_info(const void* ptr, memlake_pool_block* out, int* device) {
  return guarded(-1, [&] {
    check_open();
    if (out == nullptr) throw misuse("memlake_block_info: out is NULL");
    const int holder = device_holding(ptr);
    const Allocator* a = holder < 0 ? nullptr : existing(holder);
    const std::optional<BlockInfo> b = a != nullptr ? a->block_info(ptr) : std::nullopt;
    if (!b)
      throw misuse("memlake_block_info: no device holds a live block at " + pointer_text(ptr));
    *out = memlake_pool_block{b->ptr, b->size, b->stream};
    if (device != nullptr) *device = holder;
    return 0;
  });
}

int memlake_live_blocks(int device, memlake_pool_block* out, size_t capacity, size_t* count) {
  return guarded(-1, [&] {
    check_open();
    check_device("memlake_live_blocks", device);
    if (count == nullptr || (out == nullptr && capacity != 0))
      throw misuse("memlake_live_blocks: null output pointer");
    const Allocator* a = existing(device);
    const std::vector<BlockInfo> blocks =
        a != nullptr ? a->live_blocks() : std::vector<BlockInfo>{};
    for (std::size_t i = 0; i < blocks.size() && i < capacity; ++i)
      out[i] = memlake_pool_block{blocks[i].ptr, blocks[i].size, blocks[i].stream};
    *count = blocks.size();
    return 0;
  });
}

int memlake_record_stream(void* ptr, int device, void* stream) {
  return guarded(-1, [&] {
    check_open();
    check_device("memlake_record_stream", device);
    on_owner("memlake_record_stream", ptr, device,
             [&](Allocator& a) { a.record_stream(ptr, stream); });
    return 0;
  });
}

int memlake_empty_cache(int device) {
  return guarded(-1, [&] {
    check_open();
    check_device("memlake_empty_cache", device);
    if (Allocator* a = existing(device)) a->empty_cache();
    return 0;
  });
}

int memlake_get_stats_json(int device, char* buf, size_t len) {
  return guarded(-1, [&] {
    check_open();
    check_device("memlake_get_stats_json", device);
    if (buf == nullptr && len != 0)
      throw misuse("memlake_get_stats_json: buf is NULL, len is not 0");
    const std::string json = device_stats(device).to_json();
    if (json.size() > static_cast<std::size_t>(INT_MAX))
      throw error("memlake_get_stats_json: the JSON does not fit an int");
    if (len != 0) {
      const std::size_t n = std::min(len - 1, json.size());
      std::memcpy(buf, json.data(), n);
      buf[n] = '\0';
    }
    return static_cast<int>(json.size());
  });
}

void memlake_reset_peak_stats(int device) {
  guarded(0, [&] {
    check_open();
    check_device("memlake_reset_peak_stats", device);
    if (Allocator* a = existing(device)) a->reset_peak_stats();
    return 0;
  });
}

const char* memlake_last_error(void) {
  return last_error();
}

int memlake_config_check(const char* conf) {
  return guarded(-1, [&] {
    if (conf == nullptr)
      (void)Config::from_env();
    else
      (void)Config::parse(conf);
    return 0;
  });
}

void memlake_options_print(void) {
  const int rc = guarded(-1, [&] {
    check_open();
    std::string text;
    for (int d = 0; d < kMaxDevices; ++d) {
      const Allocator* a = existing(d);
      if (a == nullptr) continue;
      text += "memlake: device " + std::to_string(d) + ", backend " + a->backend_name() +
              ", capacity " + std::to_string(a->capacity()) + " bytes, granularity " +
              std::to_string(a->granularity()) + " bytes\n";
      text += a->config().describe();
    }
    if (text.empty()) {
      text = "memlake: no allocator yet; options from the environment:\n" +
             Config::from_env().describe();
    }
    std::fputs(text.c_str(), stderr);
    return 0;
  });
  if (rc != 0) std::fprintf(stderr, "%s\n", last_error());
}

void memlake_shutdown(void) {
  guarded(0, [&] {
    std::lock_guard lock(g_table_mutex);
    if (g_shut_down.exchange(true, std::memory_order_acq_rel)) throw error(kShutdownMessage);
    for (auto& slot : g_allocators) delete slot.exchange(nullptr, std::memory_order_acq_rel);
    return 0;
  });
}

}  // extern "C"

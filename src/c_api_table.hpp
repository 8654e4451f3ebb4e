// What the C entry points share (c_api.cpp, c_api_torch.cpp): the
// per-process table of allocators, one per device, and the per-thread error
// message behind memlake_last_error().
#pragma once

#include <exception>
#include <string_view>

#include "memlake/allocator.hpp"

namespace memlake::c_api {

inline constexpr int kMaxDevices = 64;

void set_error(std::string_view message);
void clear_error();
const char* last_error();

// Throws once memlake_shutdown() has run.
void check_open();
// Throws misuse naming `function` unless 0 <= device < kMaxDevices.
void check_device(const char* function, int device);
// The device's allocator if one was created, else nullptr.
Allocator* existing(int device);
// Creates the device's allocator from Config::from_env() on first use.
Allocator& get_or_create(int device);
// The capacity of the device's allocator as a fraction of its memory, like
// capacity_fraction; only before the allocator exists (throws misuse after).
void set_capacity_fraction(int device, double fraction);
// The device whose allocator holds `ptr` live, other than `device` (-1: any
// device); -1 if none.
int owner_elsewhere(const void* ptr, int device);
// The device whose allocator holds `ptr` live: with one allocator in the
// process, that allocator's device without looking (a pointer it does not
// hold is the caller's to report); else a search. -1 if none.
int device_holding(const void* ptr);
// Frees the live block at `ptr`, on the stream it was allocated on, in the
// allocator that holds it: with one allocator in the process that one, else
// `first_try`'s and then the others'. Throws misuse naming `function` when
// none holds it.
void free_where_held(const char* function, void* ptr, int first_try);

// Runs body(); an exception becomes `on_error` and the thread's message.
template <class R, class F>
R guarded(R on_error, F&& body) {
  clear_error();
  try {
    return body();
  } catch (const std::exception& e) {
    set_error(e.what());
  } catch (...) {
    set_error("memlake: unknown exception");
  }
  return on_error;
}

}  // namespace memlake::c_api

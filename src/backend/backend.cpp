// Names of statuses and VMM operations, and the shared backend helpers
// declared in backend_detail.hpp (error slot, formatting, latency spin).
#include "backend/backend.hpp"

#include <cstdarg>
#include <cstdio>
#include <thread>

#include "backend/backend_detail.hpp"

namespace memlake {

const char* status_name(Status s) {
  switch (s) {
    case Status::ok:
      return "ok";
    case Status::out_of_memory:
      return "out_of_memory";
    case Status::out_of_va:
      return "out_of_va";
    case Status::out_of_mappings:
      return "out_of_mappings";
    case Status::out_of_descriptors:
      return "out_of_descriptors";
    case Status::out_of_host_memory:
      return "out_of_host_memory";
    case Status::not_ready:
      return "not_ready";
    case Status::invalid_argument:
      return "invalid_argument";
    case Status::not_supported:
      return "not_supported";
    case Status::error:
      return "error";
  }
  return "unknown_status";
}

const char* vmm_op_name(VmmOp op) {
  switch (op) {
    case VmmOp::reserve:
      return "reserve";
    case VmmOp::unreserve:
      return "unreserve";
    case VmmOp::create:
      return "create";
    case VmmOp::release:
      return "release";
    case VmmOp::map:
      return "map";
    case VmmOp::unmap:
      return "unmap";
    case VmmOp::set_access:
      return "set_access";
    case VmmOp::export_chunk:
      return "export_chunk";
    case VmmOp::import_chunk:
      return "import_chunk";
    case VmmOp::count:
      break;
  }
  return "unknown_op";
}

// A backend captures only where it says it does.
Status Backend::stream_begin_capture(StreamHandle) {
  return detail::fail(Status::not_supported, "%s: graph capture is not supported", name());
}
Status Backend::stream_end_capture(StreamHandle, GraphHandle* graph) {
  if (graph != nullptr) *graph = nullptr;
  return detail::fail(Status::not_supported, "%s: graph capture is not supported", name());
}
Status Backend::graph_launch(GraphHandle, StreamHandle) {
  return detail::fail(Status::not_supported, "%s: graphs are not supported", name());
}
Status Backend::graph_destroy(GraphHandle) {
  return detail::fail(Status::not_supported, "%s: graphs are not supported", name());
}
Status Backend::stream_capture_info(StreamHandle stream, CaptureState* state, std::uint64_t* id) {
  if (state == nullptr || id == nullptr)
    return detail::fail(Status::invalid_argument, "%s: stream_capture_info: null output pointer",
                        name());
  *id = 0;
  bool capturing = false;
  const Status s = stream_is_capturing(stream, &capturing);
  *state = capturing ? CaptureState::active : CaptureState::none;
  return s;
}
Status Backend::device_synchronize() {
  return detail::fail(Status::not_supported, "%s: device_synchronize is not supported", name());
}

namespace detail {
namespace {

// The error slot is a fixed buffer: a failure path must not need the heap,
// since running out of it is one of the failures it reports.
constexpr std::size_t kMessageCapacity = 1024;
thread_local char t_last_error[kMessageCapacity];

void store(const char* format, std::va_list args) {
  // vsnprintf truncates and always terminates; it does not allocate.
  std::vsnprintf(t_last_error, kMessageCapacity, format, args);
}

}  // namespace

void set_last_error(const char* message) {
  std::snprintf(t_last_error, kMessageCapacity, "%s", message);
}

const char* thread_last_error() {
  return t_last_error;
}

std::string thread_last_error_copy() noexcept {
  try {
    return std::string(t_last_error);
  } catch (...) {
    return {};
  }
}

Status fail(Status status, const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  store(format, args);
  va_end(args);
  return status;
}

std::string format(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out;
  if (n > 0) {
    out.assign(static_cast<std::size_t>(n), '\0');
    std::vsnprintf(out.data(), out.size() + 1, format, args);
  }
  va_end(args);
  return out;
}

void spin_for(std::chrono::nanoseconds d) {
  using clock = std::chrono::steady_clock;
  if (d <= std::chrono::nanoseconds::zero()) return;
  const auto deadline = clock::now() + d;
  constexpr auto kSleepAbove = std::chrono::microseconds(500);
  if (d > kSleepAbove) std::this_thread::sleep_for(d - kSleepAbove / 2);
  while (clock::now() < deadline) {
  }
}

}  // namespace detail
}  // namespace memlake

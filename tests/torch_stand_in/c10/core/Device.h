// Stand-in for PyTorch's c10/core/Device.h (pluggable_allocator.cpp says
// why there is one): the device index, the device, and DataPtr, which frees
// through its deleter when it goes.
#pragma once

#include <cstdint>
#include <utility>

namespace c10 {

using DeviceIndex = int8_t;
enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };

struct Device {
  Device(DeviceType type, DeviceIndex index) : type(type), index(index) {}
  DeviceType type;
  DeviceIndex index;
};

using DeleterFnPtr = void (*)(void*);

// Owns `context` and hands it to `deleter` when it goes, as PyTorch's does.
class DataPtr {
 public:
  DataPtr(void* data, void* context, DeleterFnPtr deleter, Device device)
      : data_(data), context_(context), deleter_(deleter), device_(device) {}
  DataPtr(DataPtr&& other) noexcept
      : data_(other.data_),
        context_(std::exchange(other.context_, nullptr)),
        deleter_(other.deleter_),
        device_(other.device_) {}
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  DataPtr& operator=(DataPtr&&) = delete;
  ~DataPtr() {
    if (context_ != nullptr && deleter_ != nullptr) deleter_(context_);
  }
  void* get() const { return data_; }
  void* get_context() const { return context_; }
  DeleterFnPtr get_deleter() const { return deleter_; }
  Device device() const { return device_; }

 private:
  void* data_;
  void* context_;
  DeleterFnPtr deleter_;
  Device device_;
};

}  // namespace c10

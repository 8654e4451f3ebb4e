// Stand-in for PyTorch's c10/cuda/CUDAFunctions.h: the current device, one
// per thread as CUDA keeps it, which the host tests set.
#pragma once

#include "c10/core/Device.h"

namespace c10::cuda {

inline DeviceIndex& current_device_slot() {
  thread_local DeviceIndex device = 0;
  return device;
}
inline DeviceIndex current_device() {
  return current_device_slot();
}
inline void set_device(DeviceIndex device) {
  current_device_slot() = device;
}
// memlake's C API serves devices 0 to 63.
inline DeviceIndex device_count() {
  return 64;
}

}  // namespace c10::cuda

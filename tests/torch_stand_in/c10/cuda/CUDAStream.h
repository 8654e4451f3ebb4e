// Stand-in for PyTorch's c10/cuda/CUDAStream.h: the current stream, one per
// thread (PyTorch keeps one per device and thread), which the host tests set.
#pragma once

#include "c10/core/Device.h"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace c10::cuda {

class CUDAStream {
 public:
  explicit CUDAStream(cudaStream_t stream) : stream_(stream) {}
  cudaStream_t stream() const { return stream_; }

 private:
  cudaStream_t stream_;
};

inline cudaStream_t& current_stream_slot() {
  thread_local cudaStream_t stream = nullptr;
  return stream;
}
inline CUDAStream getCurrentCUDAStream(DeviceIndex /*device*/ = -1) {
  return CUDAStream(current_stream_slot());
}
inline void setCurrentCUDAStream(CUDAStream stream) {
  current_stream_slot() = stream.stream();
}

}  // namespace c10::cuda

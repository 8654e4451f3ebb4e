// make_backend: picks and builds the Backend a Config asks for.
#pragma once

#include <memory>

#include "backend/backend.hpp"
#include "memlake/config.hpp"

namespace memlake {

// host: HostBackend with the host_* options and capacity (default 80 GiB);
//       its chunks share one memory file unless cfg.shareable.
// cuda: CudaBackend on cfg.device; throws backend_error when the CUDA backend
//       is not compiled in or no GPU is present.
// automatic: cuda when compiled in and a GPU is present, else host.
std::unique_ptr<Backend> make_backend(const Config& cfg);

// True when this build contains the CUDA backend.
bool cuda_backend_compiled();

}  // namespace memlake

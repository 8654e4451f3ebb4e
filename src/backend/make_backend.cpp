// make_backend: the one place that maps BackendKind to a concrete backend.
#include "backend/make_backend.hpp"

#include "backend/backend_detail.hpp"
#include "backend/host/host_backend.hpp"
#include "memlake/errors.hpp"
#if MEMLAKE_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace memlake {

namespace {

constexpr std::size_t kHostDefaultCapacity = std::size_t{80} << 30;

std::unique_ptr<Backend> make_host(const Config& cfg) {
  HostBackendOptions o;
  o.device = cfg.device;
  o.granularity = cfg.host_granularity;
  o.capacity = cfg.capacity;
  if (o.capacity == 0) {
    o.capacity = cfg.capacity_fraction > 0
                     ? static_cast<std::size_t>(cfg.capacity_fraction *
                                                static_cast<double>(kHostDefaultCapacity))
                     : kHostDefaultCapacity;
  }
  o.simulate_latency = cfg.host_simulate_latency;
    o.shareable = cfg.shareable;
  o.max_mappings = cfg.host_max_mappings;
  o.max_descriptors = cfg.host_max_fds;
  o.max_va_bytes = cfg.host_max_va;
  return std::make_unique<HostBackend>(o);
}

#if MEMLAKE_HAVE_CUDA
std::unique_ptr<Backend> make_cuda(const Config& cfg) {
  CudaBackendOptions o;
  o.device = cfg.device;
  o.capacity = cfg.capacity;
  o.capacity_fraction = cfg.capacity_fraction;
  o.peer_access = cfg.peer_access.bits;
  o.shareable = cfg.shareable;
  return std::make_unique<CudaBackend>(o);
}
#endif

}  // namespace

bool cuda_backend_compiled() {
#if MEMLAKE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(const Config& cfg) {
  switch (cfg.backend) {
    case BackendKind::host:
      return make_host(cfg);
    case BackendKind::cuda: {
#if MEMLAKE_HAVE_CUDA
      const int n = CudaBackend::device_count();
      if (n == 0) throw backend_error("backend:cuda requested but no CUDA GPU is present");
      if (cfg.device < 0 || cfg.device >= n) {
        throw backend_error(detail::format(
            "backend:cuda requested but device %d does not exist (%d GPU(s) present)", cfg.device,
            n));
      }
      return make_cuda(cfg);
#else
      throw backend_error("backend:cuda requested but this build has no CUDA backend");
#endif
    }
    case BackendKind::automatic: {
#if MEMLAKE_HAVE_CUDA
      if (CudaBackend::device_count() > 0) return make_cuda(cfg);
#endif
      return make_host(cfg);
    }
  }
  throw backend_error("unknown backend kind");
}

}  // namespace memlake

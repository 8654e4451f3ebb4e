// memlake/cuda_mr.hpp compiled by the host C++ compiler (no nvcc) against
// the installed tree and CCCL: the concepts hold, and blocks of a
// host-backend allocator go through cuda_resource and read back.
#include <memlake/cuda_mr.hpp>

#include <cstddef>
#include <cstring>
#include <iostream>

static_assert(cuda::mr::resource_with<memlake::cuda_resource, cuda::mr::device_accessible>);

int main() {
  memlake::Allocator alloc(memlake::Config::parse("backend:host,capacity:64M"));
  memlake::cuda_resource mr(alloc);
  const cuda::stream_ref stream{static_cast<cudaStream_t>(alloc.create_stream())};
  constexpr std::size_t n = std::size_t{3} << 20;
  auto* p = static_cast<unsigned char*>(mr.allocate(stream, n));
  std::memset(p, 0x6B, n);
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] != 0x6B) {
      std::cerr << "byte " << i << " did not read back\n";
      return 1;
    }
  }
  mr.deallocate(stream, p, n);
  if (alloc.stats().requested_bytes.current != 0 || !(mr == memlake::cuda_resource(alloc))) {
    std::cerr << "stats: " << alloc.stats().to_json() << "\n";
    return 1;
  }
  std::cout << "memlake consumer: ok (cuda_mr.hpp with the host compiler)\n";
  return 0;
}

// memlake's C++ API from an installed tree, on the host backend: every
// public header compiles in a C++20 program; allocate, write, read back,
// free, out of memory as an exception, stats.
#include <memlake/memlake.h>
#include <memlake/stat_fields.h>
#include <memlake/torch_hooks.h>
#include <memlake/allocator.hpp>
#include <memlake/config.hpp>
#include <memlake/errors.hpp>
#include <memlake/observer.hpp>
#include <memlake/sharing.hpp>
#include <memlake/stats.hpp>

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>

int main() {
  try {
    memlake::Allocator alloc(memlake::Config::parse("backend:host,capacity:64M"));
    memlake::Stream stream = alloc.create_stream();
    constexpr std::size_t n = std::size_t{5} << 20;
    auto* p = static_cast<unsigned char*>(alloc.allocate(n, stream));
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(i * 13 + 1);
    for (std::size_t i = 0; i < n; ++i) {
      if (p[i] != static_cast<unsigned char>(i * 13 + 1)) {
        std::cerr << "byte " << i << " did not read back\n";
        return 1;
      }
    }
    bool refused = false;
    try {
      alloc.allocate(std::size_t{1} << 30, stream);
    } catch (const memlake::out_of_memory& e) {
      refused = std::string(e.what()).find("out of memory") != std::string::npos;
    }
    if (!refused) {
      std::cerr << "1 GiB from a 64 MiB allocator was not refused\n";
      return 1;
    }
    alloc.deallocate(p, n, stream);
    alloc.destroy_stream(stream);
    const memlake::Stats s = alloc.stats();
    if (s.requested_bytes.current != 0 || s.requested_bytes.peak != static_cast<std::int64_t>(n) ||
        s.allocs.current != 1 || s.ooms.current != 1) {
      std::cerr << "stats: " << s.to_json() << "\n";
      return 1;
    }
    std::cout << "memlake consumer: ok (C++, peak reserved " << s.reserved_bytes.peak
              << " bytes)\n";
    return 0;
  } catch (const memlake::error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}

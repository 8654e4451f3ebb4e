// The HostBackend platform for the shared suites: device memory is host
// memory, so bytes are written and checked in place, and device work is host
// functions (host_work.hpp).
#include <cstring>
#include <string>
#include <vector>

#include "backend/adaptors/backend_adaptor.hpp"
#include "backend/host/host_backend.hpp"
#include "host/host_work.hpp"
#include "suites/platform.hpp"

namespace memlake::test {

namespace {

class HostPlatform final : public Platform {
 public:
  std::string name() const override { return "host"; }
  std::unique_ptr<Backend> backend(std::size_t capacity) override {
    HostBackendOptions o;
    if (capacity != 0) o.capacity = capacity;
    return std::make_unique<HostBackend>(o);
  }
  void fill(void* p, std::size_t n, std::uint32_t seed) override {
    auto* bytes = static_cast<unsigned char*>(p);
    std::size_t words = n / 4;
    for (std::size_t i = 0; i < words; ++i) {
      std::uint32_t w = pattern_word(seed, i);
      std::memcpy(bytes + 4 * i, &w, 4);
    }
    for (std::size_t i = words * 4; i < n; ++i) bytes[i] = static_cast<unsigned char>(seed + i);
  }
  bool check(const void* p, std::size_t n, std::uint32_t seed) override {
    const auto* bytes = static_cast<const unsigned char*>(p);
    std::size_t words = n / 4;
    for (std::size_t i = 0; i < words; ++i) {
      std::uint32_t w;
      std::memcpy(&w, bytes + 4 * i, 4);
      if (w != pattern_word(seed, i)) return false;
    }
    for (std::size_t i = words * 4; i < n; ++i)
      if (bytes[i] != static_cast<unsigned char>(seed + i)) return false;
    return true;
  }
  void read(const void* p, void* out, std::size_t n) override { std::memcpy(out, p, n); }
  DeviceWork* work() override { return &work_; }
  std::string leftovers(const Backend& b) const override {
    const Backend* inner = &b;
    while (const auto* adaptor = dynamic_cast<const BackendAdaptor*>(inner))
      inner = &adaptor->upstream();
    const auto* host = dynamic_cast<const HostBackend*>(inner);
    if (!host) return "";
    std::string left;
    auto add = [&](std::size_t n, const char* what) {
      if (n) left += (left.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    };
    add(host->live_chunks(), "chunks");
    add(host->mapped_ranges(), "mappings");
    add(host->reserved_ranges(), "reservations");
    return left;
  }
  // Each HostStream has a thread of its own.
  bool host_functions_run_concurrently() const override { return true; }

 private:
  HostWork work_;
};

}  // namespace

std::unique_ptr<Platform> make_test_platform() {
  return std::make_unique<HostPlatform>();
}

}  // namespace memlake::test

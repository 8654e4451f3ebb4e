// The backend stacks the contract suites run over (backend_contract.hpp).
// The limiting stacks put the limit above a backend of the default capacity,
// so that the adaptor, not the backend, is what refuses.
#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/adaptors/limiting_backend.hpp"
#include "suites/backend_contract.hpp"

namespace memlake::test {

namespace {

std::unique_ptr<Backend> limiting(Platform& p, std::size_t capacity) {
  std::unique_ptr<Backend> upstream = p.backend(0);
  const std::size_t limit = capacity != 0 ? capacity : upstream->capacity();
  return std::make_unique<LimitingBackend>(std::move(upstream), limit);
}

}  // namespace

std::vector<BackendStack> backend_stacks() {
  return {
      {"plain", [](Platform& p, std::size_t capacity) { return p.backend(capacity); }},
      {"counting",
       [](Platform& p, std::size_t capacity) -> std::unique_ptr<Backend> {
         return std::make_unique<CountingBackend>(p.backend(capacity));
       }},
      {"fault",
       [](Platform& p, std::size_t capacity) -> std::unique_ptr<Backend> {
         return std::make_unique<FaultBackend>(p.backend(capacity));
       }},
      {"limiting", limiting},
      {"counting_fault_limiting",
       [](Platform& p, std::size_t capacity) -> std::unique_ptr<Backend> {
         return std::make_unique<CountingBackend>(
             std::make_unique<FaultBackend>(limiting(p, capacity)));
       }},
  };
}

std::string stack_name(const ::testing::TestParamInfo<BackendStack>& info) {
  return info.param.name;
}

}  // namespace memlake::test

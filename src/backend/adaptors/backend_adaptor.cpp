// BackendAdaptor construction (the forwarding bodies are inline in the header).
#include "backend/adaptors/backend_adaptor.hpp"

#include "memlake/errors.hpp"

namespace memlake {

BackendAdaptor::BackendAdaptor(std::unique_ptr<Backend> upstream, std::string_view tag)
    : upstream_(std::move(upstream)) {
  if (!upstream_) throw backend_error(std::string(tag) + " backend: upstream backend is null");
  name_ = std::string(tag) + "(" + upstream_->name() + ")";
}

}  // namespace memlake

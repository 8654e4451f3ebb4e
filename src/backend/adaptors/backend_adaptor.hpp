// BackendAdaptor: a Backend that owns an upstream Backend and forwards every
// call to it. Adaptors (counting, fault injection, limiting) derive from it
// and override only what they change, so they stack at construction:
//   CountingBackend(std::make_unique<FaultBackend>(std::make_unique<HostBackend>()))
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "backend/backend.hpp"

namespace memlake {

class BackendAdaptor : public Backend {
 public:
  // Throws backend_error when upstream is null. name() becomes "tag(upstream)".
  BackendAdaptor(std::unique_ptr<Backend> upstream, std::string_view tag);

  Backend& upstream() { return *upstream_; }
  const Backend& upstream() const { return *upstream_; }

  const char* name() const override { return name_.c_str(); }
  int device() const override { return upstream_->device(); }
  std::size_t granularity() const override { return upstream_->granularity(); }
  std::size_t capacity() const override { return upstream_->capacity(); }
  std::size_t physical_bytes() const override { return upstream_->physical_bytes(); }
  BackendLimits limits() const override { return upstream_->limits(); }
  BackendUsage usage() const override { return upstream_->usage(); }

  Status reserve(std::size_t size, DevicePtr* va) override { return upstream_->reserve(size, va); }
  Status unreserve(DevicePtr va, std::size_t size) override {
    return upstream_->unreserve(va, size);
  }
  Status create_chunk(std::size_t size, ChunkHandle* chunk) override {
    return upstream_->create_chunk(size, chunk);
  }
  Status release_chunk(ChunkHandle chunk) override { return upstream_->release_chunk(chunk); }
  Status map(DevicePtr va, std::size_t size, ChunkHandle chunk) override {
    return upstream_->map(va, size, chunk);
  }
  Status unmap(DevicePtr va, std::size_t size) override { return upstream_->unmap(va, size); }
  Status set_access(DevicePtr va, std::size_t size) override {
    return upstream_->set_access(va, size);
  }
  Status export_chunk(ChunkHandle chunk, int* fd) override {
    return upstream_->export_chunk(chunk, fd);
  }
  Status import_chunk(int fd, std::size_t size, ChunkHandle* chunk) override {
    return upstream_->import_chunk(fd, size, chunk);
  }

  Status stream_create(StreamHandle* stream) override { return upstream_->stream_create(stream); }
  Status stream_destroy(StreamHandle stream) override { return upstream_->stream_destroy(stream); }
  Status event_create(EventHandle* event) override { return upstream_->event_create(event); }
  Status event_destroy(EventHandle event) override { return upstream_->event_destroy(event); }
  Status event_record(EventHandle event, StreamHandle stream) override {
    return upstream_->event_record(event, stream);
  }
  Status event_query(EventHandle event) override { return upstream_->event_query(event); }
  Status stream_wait_event(StreamHandle stream, EventHandle event) override {
    return upstream_->stream_wait_event(stream, event);
  }
  Status launch_host_func(StreamHandle stream, HostFn fn, void* user) override {
    return upstream_->launch_host_func(stream, fn, user);
  }
  Status stream_synchronize(StreamHandle stream) override {
    return upstream_->stream_synchronize(stream);
  }
  Status stream_is_capturing(StreamHandle stream, bool* capturing) override {
    return upstream_->stream_is_capturing(stream, capturing);
  }
  Status stream_begin_capture(StreamHandle stream) override {
    return upstream_->stream_begin_capture(stream);
  }
  Status stream_end_capture(StreamHandle stream, GraphHandle* graph) override {
    return upstream_->stream_end_capture(stream, graph);
  }
  Status graph_launch(GraphHandle graph, StreamHandle stream) override {
    return upstream_->graph_launch(graph, stream);
  }
  Status graph_destroy(GraphHandle graph) override { return upstream_->graph_destroy(graph); }
  Status stream_capture_info(StreamHandle stream, CaptureState* state, std::uint64_t* id) override {
    return upstream_->stream_capture_info(stream, state, id);
  }
  Status device_synchronize() override { return upstream_->device_synchronize(); }

  std::string last_error() const override { return upstream_->last_error(); }

 private:
  std::unique_ptr<Backend> upstream_;
  std::string name_;
};

}  // namespace memlake

// memlake::Allocator: the public C++ allocator, a handle on AllocatorImpl.
#include "memlake/allocator.hpp"

#include "allocator/allocator_impl.hpp"
#include "backend/make_backend.hpp"
#include "profiling/profiling.hpp"

namespace memlake {

namespace {
const Timeline& timeline_of(const AllocatorImpl& impl, const char* call) {
  const Profilers* p = impl.profilers();
  if (p == nullptr || p->timeline() == nullptr) {
    throw error(std::string("memlake: ") + call + " needs the timeline option (timeline:PATH, " +
                "docs/profiling.md), which is off for device " +
                std::to_string(impl.config().device));
  }
  return *p->timeline();
}

// The config is checked before a backend is made for it.
std::unique_ptr<Backend> backend_for(const Config& c) {
  c.validate();
  return make_backend(c);
}
}  // namespace

Allocator::Allocator(const Config& config)
    : impl_(std::make_unique<AllocatorImpl>(config, backend_for(config))) {}
Allocator::Allocator(const Config& config, std::unique_ptr<Backend> backend)
    : impl_(std::make_unique<AllocatorImpl>(config, std::move(backend))) {}
Allocator::~Allocator() = default;

void* Allocator::allocate(std::size_t bytes, Stream stream) {
  return impl_->allocate(bytes, stream);
}
void Allocator::deallocate(void* ptr, std::size_t bytes, Stream stream) {
  impl_->deallocate(ptr, bytes, &stream);
}
bool Allocator::deallocate_on_own_stream(void* ptr) {
  return impl_->deallocate_if_live(ptr);
}
std::optional<BlockInfo> Allocator::block_info(const void* ptr) const {
  return impl_->block_info(ptr);
}
std::vector<BlockInfo> Allocator::live_blocks() const {
  return impl_->live_blocks();
}
void Allocator::record_stream(void* ptr, Stream stream) {
  impl_->record_stream(ptr, stream);
}
void Allocator::empty_cache() {
  impl_->empty_cache();
}
void Allocator::process_pending_frees() {
  impl_->process_pending_frees();
}
Stats Allocator::stats() const {
  return impl_->stats();
}
void Allocator::reset_peak_stats() {
  impl_->reset_peak_stats();
}
const Config& Allocator::config() const {
  return impl_->config();
}
// The backend the caller chose or got, not the counting adaptor around it.
const char* Allocator::backend_name() const {
  return impl_->counting().upstream().name();
}
int Allocator::device() const {
  return impl_->backend().device();
}
std::size_t Allocator::capacity() const {
  return impl_->lake().capacity();
}
std::size_t Allocator::largest_available() const {
  return impl_->largest_available();
}
std::size_t Allocator::granularity() const {
  return impl_->backend().granularity();
}
std::size_t Allocator::allocation_size(const void* ptr) const {
  return impl_->allocation_size(ptr);
}
bool Allocator::owns(const void* ptr) const {
  return impl_->owns(ptr);
}
void Allocator::add_observer(Observer* observer) {
  impl_->add_observer(observer);
}
void Allocator::remove_observer(Observer* observer) {
  impl_->remove_observer(observer);
}
void Allocator::dump_timeline(const std::string& path) const {
  timeline_of(*impl_, "dump_timeline").write(path);
}
std::string Allocator::timeline_json() const {
  return timeline_of(*impl_, "timeline_json").trace_json();
}
std::string Allocator::memory_snapshot_json() const {
  return timeline_of(*impl_, "memory_snapshot_json").snapshot_json();
}
Stream Allocator::create_stream() {
  return impl_->create_stream();
}
void Allocator::destroy_stream(Stream stream) {
  impl_->destroy_stream(stream);
}
std::string Allocator::check_invariants() const {
  return impl_->check_invariants();
}
Backend& Allocator::backend() {
  return impl_->backend();
}

}  // namespace memlake

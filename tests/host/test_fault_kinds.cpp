// The adaptors and the limits: FaultBackend injects every refusal kind
// (out_of_memory, out_of_va, out_of_mappings, out_of_descriptors,
// out_of_host_memory, error) on every VMM operation, by count and at random
// for a seed, without the call reaching the backend below; CountingBackend
// counts refusals by operation and kind, its own backend's and injected
// ones alike; the adaptors pass limits() and usage() through.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/adaptors/limiting_backend.hpp"
#include "backend/host/host_backend.hpp"

namespace memlake {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t kG = std::size_t{2} << 20;

constexpr VmmOp kAllOps[] = {VmmOp::reserve,    VmmOp::unreserve,    VmmOp::create,
                             VmmOp::release,    VmmOp::map,          VmmOp::unmap,
                             VmmOp::set_access, VmmOp::export_chunk, VmmOp::import_chunk};

// counting(fault(below(host))): `top` sees what the caller sees, `below`
// what reaches the HostBackend.
struct Stack {
  Stack() {
    HostBackendOptions o;
    o.shareable = true;
    auto host_ptr = std::make_unique<HostBackend>(o);
    host = host_ptr.get();
    auto below_ptr = std::make_unique<CountingBackend>(std::move(host_ptr));
    below = below_ptr.get();
    auto fault_ptr = std::make_unique<FaultBackend>(std::move(below_ptr));
    fault = fault_ptr.get();
    top = std::make_unique<CountingBackend>(std::move(fault_ptr));
  }
  HostBackend* host;
  CountingBackend* below;
  FaultBackend* fault;
  std::unique_ptr<CountingBackend> top;
};

// Whatever `op` needs to be called validly, made beforehand through the
// HostBackend itself (so no fault is spent on it), and cleaned up after.
class OneCall {
 public:
  OneCall(Stack& s, VmmOp op) : s_(s), op_(op) {
    HostBackend& h = *s.host;
    EXPECT_EQ(h.create_chunk(kG, &chunk_), Status::ok);
    EXPECT_EQ(h.reserve(kG, &va_), Status::ok);
    if (op == VmmOp::unmap || op == VmmOp::set_access) {
      EXPECT_EQ(h.map(va_, kG, chunk_), Status::ok);
      mapped_ = true;
    }
    if (op == VmmOp::import_chunk) {
      EXPECT_EQ(h.export_chunk(chunk_, &fd_), Status::ok);
    }
  }
  ~OneCall() {
    HostBackend& h = *s_.host;
    if (mapped_) {
      EXPECT_EQ(h.unmap(va_, kG), Status::ok);
    }
    if (va_ != 0) {
      EXPECT_EQ(h.unreserve(va_, kG), Status::ok);
    }
    if (chunk_ != 0) {
      EXPECT_EQ(h.release_chunk(chunk_), Status::ok);
    }
    if (made_ != 0) {
      EXPECT_EQ(h.release_chunk(made_), Status::ok);
    }
    if (made_va_ != 0) {
      EXPECT_EQ(h.unreserve(made_va_, kG), Status::ok);
    }
    if (fd_ >= 0) ::close(fd_);
    if (exported_ >= 0) ::close(exported_);
  }

  // Calls `op` through the whole stack; on success the state it made is
  // recorded for the cleanup.
  Status call() {
    Backend& b = *s_.top;
    Status st = Status::error;
    switch (op_) {
      case VmmOp::reserve:
        st = b.reserve(kG, &made_va_);
        break;
      case VmmOp::unreserve:
        st = b.unreserve(va_, kG);
        if (st == Status::ok) va_ = 0;
        break;
      case VmmOp::create:
        st = b.create_chunk(kG, &made_);
        break;
      case VmmOp::release:
        st = b.release_chunk(chunk_);
        if (st == Status::ok) chunk_ = 0;
        break;
      case VmmOp::map:
        st = b.map(va_, kG, chunk_);
        if (st == Status::ok) mapped_ = true;
        break;
      case VmmOp::unmap:
        st = b.unmap(va_, kG);
        if (st == Status::ok) mapped_ = false;
        break;
      case VmmOp::set_access:
        st = b.set_access(va_, kG);
        break;
      case VmmOp::export_chunk:
        st = b.export_chunk(chunk_, &exported_);
        break;
      case VmmOp::import_chunk:
        st = b.import_chunk(fd_, kG, &made_);
        break;
      case VmmOp::count:
        break;
    }
    return st;
  }

 private:
  Stack& s_;
  VmmOp op_;
  ChunkHandle chunk_ = 0;
  ChunkHandle made_ = 0;
  DevicePtr va_ = 0;
  DevicePtr made_va_ = 0;
  bool mapped_ = false;
  int fd_ = -1;
  int exported_ = -1;
};

TEST(FaultKinds, EveryKindOnEveryOperationByCount) {
  Stack s;
  for (VmmOp op : kAllOps) {
    for (Status kind : FaultBackend::refusal_kinds()) {
      SCOPED_TRACE(std::string(vmm_op_name(op)) + " " + status_name(kind));
      const std::uint64_t reached = s.below->calls(op);
      {
        OneCall c(s, op);
        s.fault->fail_nth(op, 1, kind);
        EXPECT_EQ(c.call(), kind);
        EXPECT_THAT(s.top->last_error(),
                    HasSubstr(std::string("injected fault in ") + vmm_op_name(op)));
        EXPECT_THAT(s.top->last_error(), HasSubstr(status_name(kind)));
        EXPECT_EQ(s.below->calls(op), reached) << "an injected fault never reaches below";
        EXPECT_EQ(s.fault->injected(op, kind), 1u);
        EXPECT_EQ(s.top->refusals(op, kind), 1u);
        EXPECT_EQ(c.call(), Status::ok) << "only the armed call fails: " << s.top->last_error();
      }
      s.fault->clear();
      s.top->reset();
    }
  }
  EXPECT_EQ(s.below->refusals(), 0u) << "the HostBackend refused nothing";
  EXPECT_EQ(s.fault->injected_total(), std::size(kAllOps) * FaultBackend::refusal_kinds().size());
  EXPECT_EQ(s.host->live_chunks(), 0u);
  EXPECT_EQ(s.host->reserved_ranges(), 0u);
}

// The outcomes of a sequence of creations and releases under random faults:
// the same for the same seed, every kind drawn, each refusal counted once by
// the fault adaptor and once by the counting adaptor above it.
std::vector<Status> random_run(std::uint64_t seed, Stack& s) {
  FaultBackend::RandomFaults f;
  f.probability = 0.3;
  f.seed = seed;
  f.ops = {VmmOp::create, VmmOp::map};
  f.statuses.assign(FaultBackend::refusal_kinds().begin(), FaultBackend::refusal_kinds().end());
  s.fault->fail_randomly(f);
  std::vector<Status> outcomes;
  DevicePtr va = 0;
  EXPECT_EQ(s.top->reserve(kG, &va), Status::ok);
  for (int i = 0; i < 600; ++i) {
    ChunkHandle c = 0;
    Status st = s.top->create_chunk(kG, &c);
    outcomes.push_back(st);
    if (st != Status::ok) continue;
    st = s.top->map(va, kG, c);
    outcomes.push_back(st);
    if (st == Status::ok) {
      EXPECT_EQ(s.top->unmap(va, kG), Status::ok);
    }
    EXPECT_EQ(s.top->release_chunk(c), Status::ok);
  }
  EXPECT_EQ(s.top->unreserve(va, kG), Status::ok);
  s.fault->clear();
  return outcomes;
}

TEST(FaultKinds, RandomFaultsAreDeterministicForASeedAndDrawEveryKind) {
  Stack a, b, c;
  const std::vector<Status> first = random_run(42, a);
  EXPECT_EQ(random_run(42, b), first);
  EXPECT_NE(random_run(43, c), first);
  std::map<Status, int> seen;
  for (Status st : first) ++seen[st];
  for (Status kind : FaultBackend::refusal_kinds()) {
    EXPECT_GT(seen[kind], 0) << status_name(kind);
    EXPECT_EQ(a.fault->injected(kind), static_cast<std::uint64_t>(seen[kind])) << status_name(kind);
    EXPECT_EQ(a.top->refusals(kind), static_cast<std::uint64_t>(seen[kind])) << status_name(kind);
  }
  EXPECT_EQ(a.fault->injected(VmmOp::release), 0u) << "only the listed operations fail";
  EXPECT_EQ(a.top->refusals(), a.fault->injected_total());
  EXPECT_EQ(a.below->refusals(), 0u);
  EXPECT_EQ(a.host->live_chunks(), 0u);
}

TEST(FaultKinds, DefaultStatusesStayForTheOldInterface) {
  Stack s;
  s.fault->fail_randomly(1.0, 1, {VmmOp::create, VmmOp::reserve});
  ChunkHandle c = 0;
  DevicePtr va = 0;
  EXPECT_EQ(s.top->create_chunk(kG, &c), Status::out_of_memory);
  EXPECT_EQ(s.top->reserve(kG, &va), Status::error);
}

TEST(CountingRefusals, CountsTheBackendsOwnRefusalsByKind) {
  HostBackendOptions o;
  o.max_mappings = 3;
  o.max_descriptors = 2;
  auto host = std::make_unique<HostBackend>(o);
  HostBackend* h = host.get();
  CountingBackend b(std::move(host));
  DevicePtr va = 0;
  ASSERT_EQ(b.reserve(4 * kG, &va), Status::ok);
  ChunkHandle c[3] = {};
  ASSERT_EQ(b.create_chunk(kG, &c[0]), Status::ok);
  ASSERT_EQ(b.create_chunk(kG, &c[1]), Status::ok);
  EXPECT_EQ(b.create_chunk(kG, &c[2]), Status::out_of_descriptors);
  ASSERT_EQ(b.map(va, kG, c[0]), Status::ok);
  EXPECT_EQ(b.map(va + 2 * kG, kG, c[1]), Status::out_of_mappings);
  EXPECT_EQ(b.refusals(VmmOp::create, Status::out_of_descriptors), 1u);
  EXPECT_EQ(b.refusals(VmmOp::map, Status::out_of_mappings), 1u);
  EXPECT_EQ(b.refusals(Status::out_of_mappings), 1u);
  EXPECT_EQ(b.refusals(), 2u);
  EXPECT_EQ(b.calls(VmmOp::map), 2u);
  EXPECT_EQ(b.limits().mappings, 3u) << "limits pass through adaptors";
  EXPECT_EQ(b.usage().mappings, h->usage().mappings);
  b.reset();
  EXPECT_EQ(b.refusals(), 0u);
  ASSERT_EQ(b.unmap(va, kG), Status::ok);
  ASSERT_EQ(b.unreserve(va, 4 * kG), Status::ok);
  ASSERT_EQ(b.release_chunk(c[0]), Status::ok);
  ASSERT_EQ(b.release_chunk(c[1]), Status::ok);
}

TEST(LimitingLimits, PassesTheUpstreamsLimitsThrough) {
  HostBackendOptions o;
  o.max_mappings = 11;
  o.max_va_bytes = 8 * kG;
  LimitingBackend b(std::make_unique<HostBackend>(o), 4 * kG);
  EXPECT_EQ(b.limits().mappings, 11u);
  EXPECT_EQ(b.limits().va_bytes, 8 * kG);
  DevicePtr va = 0;
  ASSERT_EQ(b.reserve(2 * kG, &va), Status::ok);
  EXPECT_EQ(b.usage().va_bytes, 2 * kG);
  EXPECT_EQ(b.usage().mappings, 1u);
  ASSERT_EQ(b.unreserve(va, 2 * kG), Status::ok);
}

}  // namespace
}  // namespace memlake

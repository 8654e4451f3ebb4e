// No backend call throws when the heap fails: every HostBackend call that
// grows a table or a queue is made with operator new failing after 0, 1,
// 2, ... allocations, until it succeeds. Each attempt must return ok or
// out_of_host_memory (never throw), leave the backend as it was when it
// fails, and the same call must then succeed with the heap back. The
// adaptors are held to the same.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <functional>
#include <memory>
#include <string>

#include "backend/adaptors/counting_backend.hpp"
#include "backend/adaptors/fault_backend.hpp"
#include "backend/adaptors/limiting_backend.hpp"
#include "backend/host/host_backend.hpp"
#include "heap_failure.hpp"

namespace memlake {
namespace {

using test::HeapFailure;
using ::testing::HasSubstr;

constexpr std::size_t kG = std::size_t{2} << 20;

// What a failed call must leave as it was.
struct Snapshot {
  std::size_t chunks, mapped, reserved, physical, units, descriptors, va;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const HostBackend& b) {
  const BackendUsage u = b.usage();
  return {b.live_chunks(), b.mapped_ranges(), b.reserved_ranges(), b.physical_bytes(),
          u.mappings,      u.descriptors,     u.va_bytes};
}

// A backend with a chunk, a reservation and (optionally) the chunk mapped,
// made before the heap fails.
struct Scene {
  explicit Scene(bool shareable, bool mapped) {
    HostBackendOptions o;
    o.shareable = shareable;
    b = std::make_unique<HostBackend>(o);
    EXPECT_EQ(b->create_chunk(kG, &chunk), Status::ok);
    EXPECT_EQ(b->reserve(2 * kG, &va), Status::ok);
    if (mapped) {
      EXPECT_EQ(b->map(va, kG, chunk), Status::ok);
    }
    if (shareable) {
      EXPECT_EQ(b->export_chunk(chunk, &fd), Status::ok);
    }
  }
  ~Scene() {
    if (fd >= 0) ::close(fd);
  }
  std::unique_ptr<HostBackend> b;
  ChunkHandle chunk = 0;
  DevicePtr va = 0;
  int fd = -1;  // an export of `chunk`, for import_chunk
};

// Makes `call` with the heap failing after 0, 1, 2, ... allocations. Returns
// how many it needed.
std::size_t sweep(const std::string& what, bool shareable, bool mapped,
                  const std::function<Status(Scene&)>& call) {
  for (std::size_t allow = 0; allow < 64; ++allow) {
    Scene scene(shareable, mapped);
    const Snapshot before = snapshot(*scene.b);
    Status s = Status::error;
    bool threw = false;
    {
      HeapFailure heap(allow);
      try {
        s = call(scene);
      } catch (...) {
        threw = true;
      }
    }
    EXPECT_FALSE(threw) << what << " threw with " << allow << " allocations allowed";
    if (s == Status::ok) return allow;
    EXPECT_EQ(s, Status::out_of_host_memory) << what << ": " << scene.b->last_error();
    EXPECT_THAT(scene.b->last_error(), HasSubstr("out of host memory")) << what;
    EXPECT_TRUE(snapshot(*scene.b) == before) << what << " changed the backend and failed";
    EXPECT_EQ(call(scene), Status::ok) << what << " with the heap back: " << scene.b->last_error();
  }
  ADD_FAILURE() << what << " never succeeded";
  return 0;
}

class HeapFailureHost : public ::testing::TestWithParam<bool> {};

TEST_P(HeapFailureHost, NoVirtualMemoryCallThrows) {
  const bool shareable = GetParam();
  EXPECT_GT(sweep("reserve", shareable, false,
                  [](Scene& s) {
                    DevicePtr va = 0;
                    return s.b->reserve(kG, &va);
                  }),
            0u)
      << "reserve grows a table: the heap is needed";
  EXPECT_GT(sweep("create_chunk", shareable, false,
                  [](Scene& s) {
                    ChunkHandle c = 0;
                    return s.b->create_chunk(kG, &c);
                  }),
            0u);
  EXPECT_GT(
      sweep("map", shareable, false, [](Scene& s) { return s.b->map(s.va + kG, kG, s.chunk); }),
      0u);
  // A mapped chunk's release keeps it in a table until its last unmap.
  EXPECT_GT(sweep("release_chunk of a mapped chunk", shareable, true,
                  [](Scene& s) { return s.b->release_chunk(s.chunk); }),
            0u);
  sweep("release_chunk", shareable, false, [](Scene& s) { return s.b->release_chunk(s.chunk); });
  sweep("set_access", shareable, true, [](Scene& s) { return s.b->set_access(s.va, kG); });
  sweep("unmap", shareable, true, [](Scene& s) { return s.b->unmap(s.va, kG); });
  sweep("unreserve", shareable, false, [](Scene& s) { return s.b->unreserve(s.va, 2 * kG); });
  if (shareable) {
    sweep("export_chunk", shareable, false, [](Scene& s) {
      int fd = -1;
      const Status st = s.b->export_chunk(s.chunk, &fd);
      if (fd >= 0) ::close(fd);
      return st;
    });
    EXPECT_GT(sweep("import_chunk", shareable, false,
                    [](Scene& s) {
                      ChunkHandle c = 0;
                      return s.b->import_chunk(s.fd, kG, &c);
                    }),
              0u);
  }
}

TEST_P(HeapFailureHost, NoStreamOrEventCallThrows) {
  const bool shareable = GetParam();
  sweep("stream_create", shareable, false, [](Scene& s) {
    StreamHandle st = nullptr;
    return s.b->stream_create(&st);
  });
  sweep("event_create", shareable, false, [](Scene& s) {
    EventHandle e = nullptr;
    return s.b->event_create(&e);
  });
  // The default stream is made on its first use.
  sweep("launch_host_func on the default stream", shareable, false, [](Scene& s) {
    return s.b->launch_host_func(
        nullptr, [](void*) {}, nullptr);
  });
}

TEST_P(HeapFailureHost, LastErrorDoesNotThrow) {
  Scene s(GetParam(), false);
  DevicePtr va = 0;
  ASSERT_EQ(s.b->reserve(3, &va), Status::invalid_argument);
  std::string message = "unchanged";
  bool threw = false;
  {
    HeapFailure heap;
    try {
      message = s.b->last_error();
    } catch (...) {
      threw = true;
    }
  }
  EXPECT_FALSE(threw);
  EXPECT_EQ(message, "") << "no heap for a copy: an empty message";
  EXPECT_THAT(s.b->last_error(), HasSubstr("granularity"));
}

INSTANTIATE_TEST_SUITE_P(HeapFailure, HeapFailureHost, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "OwnFiles" : "SharedFile"; });

TEST(HeapFailure, TheLimitingAdaptorGivesBackAChunkItCannotRecord) {
  auto host = std::make_unique<HostBackend>();
  HostBackend* h = host.get();
  LimitingBackend b(std::make_unique<CountingBackend>(std::move(host)), 64 * kG);
  std::size_t refused = 0;
  for (std::size_t allow = 0; allow < 16; ++allow) {
    ChunkHandle c = 0;
    Status s = Status::error;
    bool threw = false;
    {
      HeapFailure heap(allow);
      try {
        s = b.create_chunk(kG, &c);
      } catch (...) {
        threw = true;
      }
    }
    EXPECT_FALSE(threw);
    if (s == Status::ok) {
      EXPECT_EQ(b.release_chunk(c), Status::ok);
      break;
    }
    ++refused;
    EXPECT_EQ(s, Status::out_of_host_memory) << b.last_error();
    EXPECT_EQ(h->live_chunks(), 0u) << "the chunk went back";
    EXPECT_EQ(b.physical_bytes(), 0u);
  }
  EXPECT_GT(refused, 0u);
  EXPECT_EQ(h->live_chunks(), 0u);
}

}  // namespace
}  // namespace memlake

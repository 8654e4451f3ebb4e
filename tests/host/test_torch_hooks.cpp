// The PyTorch hooks (memlake/torch_hooks.h) over the host backend: errors
// arrive as exceptions with memlake's message and leave the allocator
// usable, frees never throw, record_stream finds the owning device, the
// memory fraction applies before first use only, empty_cache covers every
// device. Devices 2 and 3 of the process-wide C API table are this suite's
// (test_c_api.cpp uses 0 and 1).
#include <gtest/gtest.h>

#include <string>

#include "c_api_table.hpp"
#include "host/scoped_conf.hpp"
#include "memlake/errors.hpp"
#include "memlake/memlake.h"
#include "memlake/torch_hooks.h"

namespace {

constexpr int kDevice = 2;
constexpr int kFractionDevice = 3;
constexpr double kFraction = 0.25;

std::int64_t reserved(int device) {
  memlake_stats s{};
  s.version = MEMLAKE_STATS_VERSION;
  s.size = sizeof s;
  EXPECT_EQ(memlake_get_stats(device, &s), 0) << memlake_last_error();
  return s.reserved_bytes.current;
}

class TorchHooks : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const memlake::test::ScopedConf conf("backend:host,capacity:64M");
    // The program's fraction wins over the environment's capacity.
    memlake_torch_set_memory_fraction(kFraction, kFractionDevice);
    for (int device : {kDevice, kFractionDevice}) {
      void* p = memlake_torch_malloc(1, device, nullptr);
      memlake_torch_free(p, 1, device, nullptr);
    }
  }
};

TEST_F(TorchHooks, OutOfMemoryIsAnExceptionAndTheAllocatorStaysUsable) {
  void* held = memlake_torch_malloc(32 << 20, kDevice, nullptr);
  try {
    memlake_torch_malloc(std::size_t{48} << 20, kDevice, nullptr);
    FAIL() << "48 MiB more fit in a 64 MiB device holding 32 MiB";
  } catch (const memlake::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(memlake_last_error()), e.what());
  }
  void* p = memlake_torch_malloc(16 << 20, kDevice, nullptr);
  EXPECT_NE(p, nullptr);
  memlake_torch_free(p, 16 << 20, kDevice, nullptr);
  memlake_torch_free(held, 32 << 20, kDevice, nullptr);
  EXPECT_STREQ(memlake_last_error(), "");
}

TEST_F(TorchHooks, BadDeviceIsAnException) {
  EXPECT_THROW(memlake_torch_malloc(1, 64, nullptr), memlake::misuse);
  EXPECT_THROW(memlake_torch_malloc(1, -1, nullptr), memlake::misuse);
}

TEST_F(TorchHooks, FreeNeverThrowsAndReportsOnStderr) {
  void* p = memlake_torch_malloc(4096, kDevice, nullptr);
  memlake_torch_free(p, 4096, kDevice, nullptr);
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(memlake_torch_free(p, 4096, kDevice, nullptr));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("double free"), std::string::npos) << err;
}

TEST_F(TorchHooks, RecordStreamFindsTheOwningDevice) {
  memlake::Allocator* a = memlake::c_api::existing(kDevice);
  ASSERT_NE(a, nullptr);
  memlake::Stream side = a->create_stream();
  void* p = memlake_torch_malloc(1 << 20, kDevice, nullptr);
  memlake_torch_record_stream(p, side);
  // The call reached device 2's allocator: it knows its streams.
  int not_a_stream = 0;
  try {
    memlake_torch_record_stream(p, &not_a_stream);
    FAIL() << "record_stream with a foreign stream did not throw";
  } catch (const memlake::misuse& e) {
    EXPECT_NE(std::string(e.what()).find("unknown stream"), std::string::npos) << e.what();
  }
  memlake_torch_free(p, 1 << 20, kDevice, nullptr);
  a->destroy_stream(side);
  int local = 0;
  try {
    memlake_torch_record_stream(&local, nullptr);
    FAIL() << "record_stream of a stack address did not throw";
  } catch (const memlake::misuse& e) {
    EXPECT_NE(std::string(e.what()).find("not a live allocation of any device"), std::string::npos)
        << e.what();
  }
}

// PyTorch's deleter has the pointer alone: the free reaches the device
// that holds the block (here one of two), on the stream it was allocated on.
TEST_F(TorchHooks, FreeBlockFindsTheDeviceAndTheStreamOfTheBlock) {
  memlake::Allocator* a = memlake::c_api::existing(kFractionDevice);
  ASSERT_NE(a, nullptr);
  struct Frees : memlake::Observer {
    void on_free(const memlake::FreeEvent& e) override {
      ptr = e.ptr;
      stream = e.stream;
    }
    void* ptr = nullptr;
    memlake::Stream stream = nullptr;
  } frees;
  a->add_observer(&frees);
  memlake::Stream side = a->create_stream();
  auto* p = static_cast<unsigned char*>(memlake_torch_malloc(3 << 20, kFractionDevice, side));
  p[0] = 0x5a;
  p[(3 << 20) - 1] = 0xa5;
  EXPECT_EQ(p[0] + p[(3 << 20) - 1], 0x5a + 0xa5);
  memlake_torch_free_block(p);
  EXPECT_STREQ(memlake_last_error(), "");
  EXPECT_EQ(frees.ptr, p);
  EXPECT_EQ(frees.stream, side) << "freed on another stream than its own";
  EXPECT_FALSE(a->owns(p));
  a->remove_observer(&frees);
  a->destroy_stream(side);

  // Freed twice, or never allocated: reported, never thrown.
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(memlake_torch_free_block(p));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("unknown pointer"), std::string::npos) << err;
  EXPECT_NE(std::string(memlake_last_error()).find("unknown pointer"), std::string::npos);
  memlake_torch_free_block(nullptr);
  EXPECT_STREQ(memlake_last_error(), "");
  void* q = memlake_torch_malloc(4096, kDevice, nullptr);
  memlake_torch_free_block(q);
  EXPECT_STREQ(memlake_last_error(), "") << "the allocator stays usable";

  // A block of the device this thread did not allocate on last.
  memlake::Allocator* other = memlake::c_api::existing(kDevice);
  ASSERT_NE(other, nullptr);
  void* first = memlake_torch_malloc(1 << 20, kDevice, nullptr);
  void* last = memlake_torch_malloc(1 << 20, kFractionDevice, nullptr);
  ASSERT_TRUE(other->owns(first));
  memlake_torch_free_block(first);
  EXPECT_STREQ(memlake_last_error(), "");
  EXPECT_FALSE(other->owns(first));
  EXPECT_TRUE(a->owns(last));
  memlake_torch_free_block(last);
  EXPECT_FALSE(a->owns(last));
}

TEST_F(TorchHooks, MemoryFractionAppliesBeforeFirstUseOnly) {
  memlake::Allocator* a = memlake::c_api::existing(kFractionDevice);
  ASSERT_NE(a, nullptr);
  memlake::Allocator* limited = memlake::c_api::existing(kDevice);
  ASSERT_NE(limited, nullptr);
  EXPECT_EQ(limited->capacity(), std::size_t{64} << 20);
  // A quarter of the host backend's 80 GiB device.
  EXPECT_EQ(a->capacity(), std::size_t{20} << 30);
  try {
    memlake_torch_set_memory_fraction(0.5, kFractionDevice);
    FAIL() << "a fraction set after the first allocation was accepted";
  } catch (const memlake::misuse& e) {
    EXPECT_NE(std::string(e.what()).find("before its first allocation"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(a->capacity(), std::size_t{20} << 30);
  EXPECT_THROW(memlake_torch_set_memory_fraction(0.0, 5), memlake::misuse);
  EXPECT_THROW(memlake_torch_set_memory_fraction(1.5, 5), memlake::misuse);
  EXPECT_THROW(memlake_torch_set_memory_fraction(0.5, 64), memlake::misuse);
}

TEST_F(TorchHooks, EmptyCacheReleasesEveryDevice) {
  for (int device : {kDevice, kFractionDevice}) {
    void* p = memlake_torch_malloc(8 << 20, device, nullptr);
    memlake_torch_free(p, 8 << 20, device, nullptr);
    EXPECT_GT(reserved(device), 0) << "device " << device;
  }
  memlake_torch_empty_cache();
  for (int device : {kDevice, kFractionDevice})
    EXPECT_EQ(reserved(device), 0) << "device " << device;
}

}  // namespace

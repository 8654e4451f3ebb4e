// The graph capture part of the backend contract (src/backend/backend.hpp),
// on every platform and adaptor stack: a capturing stream records its work
// instead of running it, a graph replays it in order as often as asked, and
// what CUDA refuses during a capture (CUDA Programming Guide, "Prohibited
// and Unhandled Operations") is refused and invalidates the capture, so that
// a bug which would break a capture on a GPU breaks it on the CPU as well.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "suites/backend_contract.hpp"
#include "suites/stream_jobs.hpp"

namespace memlake::test {
namespace {

class BackendCapture : public BackendContract {
 protected:
  void SetUp() override {
    BackendContract::SetUp();
    if (IsSkipped()) return;
    b_ = make();
    ASSERT_EQ(b_->stream_create(&s_), Status::ok) << b_->last_error();
    ASSERT_EQ(b_->stream_create(&s2_), Status::ok) << b_->last_error();
  }
  void TearDown() override {
    if (!b_) return;
    // Whatever a test left capturing ends here, so that the streams go.
    GraphHandle g = nullptr;
    for (StreamHandle s : {s_, s2_}) {
      bool capturing = false;
      if (b_->stream_is_capturing(s, &capturing) == Status::ok && capturing &&
          b_->stream_end_capture(s, &g) == Status::ok)
        b_->graph_destroy(g);
    }
    EXPECT_EQ(b_->stream_destroy(s_), Status::ok) << b_->last_error();
    EXPECT_EQ(b_->stream_destroy(s2_), Status::ok) << b_->last_error();
  }
  // Ends the capture on s_ and expects it to have failed.
  void expect_invalidated() {
    GraphHandle g = reinterpret_cast<GraphHandle>(1);
    EXPECT_NE(b_->stream_end_capture(s_, &g), Status::ok);
    EXPECT_EQ(g, nullptr);
    bool capturing = true;
    ASSERT_EQ(b_->stream_is_capturing(s_, &capturing), Status::ok);
    EXPECT_FALSE(capturing) << "an ended capture, valid or not, leaves the stream";
  }
  // The stream runs work again after a failed capture.
  void expect_usable(StreamHandle s) {
    std::atomic<int> ran{0};
    jobs_.launch(*b_, s, [&] { ++ran; });
    ASSERT_EQ(b_->stream_synchronize(s), Status::ok) << b_->last_error();
    EXPECT_EQ(ran.load(), 1);
  }

  std::unique_ptr<Backend> b_;
  StreamHandle s_ = nullptr;
  StreamHandle s2_ = nullptr;
  Jobs jobs_;
};

TEST_P(BackendCapture, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  std::vector<int> order;
  ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok) << b_->last_error();
  for (int i = 0; i < 3; ++i) jobs_.launch(*b_, s_, [&, i] { order.push_back(i); });
  CaptureState state = CaptureState::none;
  std::uint64_t id = 0;
  ASSERT_EQ(b_->stream_capture_info(s_, &state, &id), Status::ok);
  EXPECT_EQ(state, CaptureState::active);
  EXPECT_NE(id, 0u);
  GraphHandle g = nullptr;
  ASSERT_EQ(b_->stream_end_capture(s_, &g), Status::ok) << b_->last_error();
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(b_->stream_synchronize(s_), Status::ok);
  EXPECT_TRUE(order.empty()) << "captured work ran at capture time";

  constexpr int kLaunches = 1000;
  for (int r = 0; r < kLaunches; ++r) ASSERT_EQ(b_->graph_launch(g, s_), Status::ok);
  ASSERT_EQ(b_->stream_synchronize(s_), Status::ok);
  ASSERT_EQ(order.size(), std::size_t{3} * kLaunches);
  for (std::size_t i = 0; i < order.size(); ++i) ASSERT_EQ(order[i], static_cast<int>(i % 3));
  EXPECT_EQ(b_->graph_destroy(g), Status::ok);
  ASSERT_EQ(b_->stream_capture_info(s_, &state, &id), Status::ok);
  EXPECT_EQ(state, CaptureState::none);
  EXPECT_EQ(id, 0u);
}

TEST_P(BackendCapture, EachCaptureHasItsOwnId) {
  std::uint64_t ids[2] = {0, 0};
  for (std::uint64_t& id : ids) {
    ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok);
    CaptureState state = CaptureState::none;
    ASSERT_EQ(b_->stream_capture_info(s_, &state, &id), Status::ok);
    jobs_.launch(*b_, s_, [] {});
    GraphHandle g = nullptr;
    ASSERT_EQ(b_->stream_end_capture(s_, &g), Status::ok) << b_->last_error();
    EXPECT_EQ(b_->graph_destroy(g), Status::ok);
  }
  EXPECT_NE(ids[0], ids[1]);
}

TEST_P(BackendCapture, TheDefaultStreamCannotBeCaptured) {
  EXPECT_NE(b_->stream_begin_capture(nullptr), Status::ok);
  EXPECT_FALSE(b_->last_error().empty());
}

TEST_P(BackendCapture, EndingWhereNoCaptureBeganFails) {
  GraphHandle g = nullptr;
  EXPECT_NE(b_->stream_end_capture(s_, &g), Status::ok);
  EXPECT_EQ(g, nullptr);
}

TEST_P(BackendCapture, SynchronizingTheCapturingStreamInvalidatesTheCapture) {
  ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok);
  jobs_.launch(*b_, s_, [] {});
  EXPECT_NE(b_->stream_synchronize(s_), Status::ok);
  CaptureState state = CaptureState::none;
  std::uint64_t id = 1;
  ASSERT_EQ(b_->stream_capture_info(s_, &state, &id), Status::ok);
  EXPECT_EQ(state, CaptureState::invalidated) << "capturing until the capture ends";
  EXPECT_EQ(id, 0u);
  expect_invalidated();
  expect_usable(s_);
}

TEST_P(BackendCapture, QueryingAnEventRecordedInTheCaptureInvalidatesIt) {
  EventHandle e = nullptr;
  ASSERT_EQ(b_->event_create(&e), Status::ok);
  ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok);
  jobs_.launch(*b_, s_, [] {});
  ASSERT_EQ(b_->event_record(e, s_), Status::ok) << b_->last_error();
  const Status q = b_->event_query(e);
  EXPECT_NE(q, Status::ok);
  EXPECT_NE(q, Status::not_ready);
  expect_invalidated();
  EXPECT_EQ(b_->event_destroy(e), Status::ok);
}

// Global mode: a query of any event, even one recorded before the capture
// on another stream, is potentially unsafe while a capture is under way.
TEST_P(BackendCapture, AnyEventQueryDuringAGlobalCaptureInvalidatesIt) {
  EventHandle e = nullptr;
  ASSERT_EQ(b_->event_create(&e), Status::ok);
  ASSERT_EQ(b_->event_record(e, s2_), Status::ok);
  ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok);
  jobs_.launch(*b_, s_, [] {});
  const Status q = b_->event_query(e);
  EXPECT_NE(q, Status::ok);
  EXPECT_NE(q, Status::not_ready);
  expect_invalidated();
  EXPECT_EQ(b_->event_query(e), Status::ok) << "legal again once no capture is under way";
  EXPECT_EQ(b_->event_destroy(e), Status::ok);
}

TEST_P(BackendCapture, WaitingOnAnEventRecordedOutsideTheCaptureInvalidatesIt) {
  EventHandle e = nullptr;
  ASSERT_EQ(b_->event_create(&e), Status::ok);
  jobs_.launch(*b_, s2_, [] {});
  ASSERT_EQ(b_->event_record(e, s2_), Status::ok);
  ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok);
  EXPECT_NE(b_->stream_wait_event(s_, e), Status::ok);
  expect_invalidated();
  ASSERT_EQ(b_->stream_synchronize(s2_), Status::ok);
  EXPECT_EQ(b_->event_destroy(e), Status::ok);
}

TEST_P(BackendCapture, DeviceSynchronizeDuringACaptureInvalidatesIt) {
  ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok);
  jobs_.launch(*b_, s_, [] {});
  EXPECT_NE(b_->device_synchronize(), Status::ok);
  expect_invalidated();
  EXPECT_EQ(b_->device_synchronize(), Status::ok) << b_->last_error();
}

// A stream joins a capture by waiting on one of its events, and rejoins
// the origin the same way; both streams' work is in the graph, in order.
TEST_P(BackendCapture, AForkedStreamJoinsAndRejoinsTheCapture) {
  EventHandle fork = nullptr, join = nullptr;
  ASSERT_EQ(b_->event_create(&fork), Status::ok);
  ASSERT_EQ(b_->event_create(&join), Status::ok);
  std::atomic<int> step{0};
  std::atomic<int> bad{0};
  ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok);
  jobs_.launch(*b_, s_, [&] { bad += step.exchange(1) != 0; });
  ASSERT_EQ(b_->event_record(fork, s_), Status::ok) << b_->last_error();
  ASSERT_EQ(b_->stream_wait_event(s2_, fork), Status::ok) << b_->last_error();
  CaptureState state = CaptureState::none;
  std::uint64_t id = 0, id2 = 0;
  ASSERT_EQ(b_->stream_capture_info(s_, &state, &id), Status::ok);
  ASSERT_EQ(b_->stream_capture_info(s2_, &state, &id2), Status::ok);
  EXPECT_EQ(state, CaptureState::active) << "the forked stream takes part in the capture";
  EXPECT_EQ(id, id2);
  bool capturing = false;
  jobs_.launch(*b_, s2_, [&] { bad += step.exchange(2) != 1; });
  ASSERT_EQ(b_->event_record(join, s2_), Status::ok);
  ASSERT_EQ(b_->stream_wait_event(s_, join), Status::ok) << b_->last_error();
  jobs_.launch(*b_, s_, [&] { bad += step.exchange(0) != 2; });
  GraphHandle g = nullptr;
  ASSERT_EQ(b_->stream_end_capture(s_, &g), Status::ok) << b_->last_error();
  ASSERT_EQ(b_->stream_is_capturing(s2_, &capturing), Status::ok);
  EXPECT_FALSE(capturing);
  for (int r = 0; r < 100; ++r) ASSERT_EQ(b_->graph_launch(g, s_), Status::ok);
  ASSERT_EQ(b_->stream_synchronize(s_), Status::ok);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(step.load(), 0);
  EXPECT_EQ(b_->graph_destroy(g), Status::ok);
  EXPECT_EQ(b_->event_destroy(fork), Status::ok);
  EXPECT_EQ(b_->event_destroy(join), Status::ok);
}

TEST_P(BackendCapture, AForkThatDoesNotRejoinFailsTheEnd) {
  EventHandle fork = nullptr;
  ASSERT_EQ(b_->event_create(&fork), Status::ok);
  ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok);
  ASSERT_EQ(b_->event_record(fork, s_), Status::ok);
  ASSERT_EQ(b_->stream_wait_event(s2_, fork), Status::ok) << b_->last_error();
  jobs_.launch(*b_, s2_, [] {});
  expect_invalidated();
  bool capturing = true;
  ASSERT_EQ(b_->stream_is_capturing(s2_, &capturing), Status::ok);
  EXPECT_FALSE(capturing);
  expect_usable(s2_);
  EXPECT_EQ(b_->event_destroy(fork), Status::ok);
}

// Mapping memory during a capture is legal: the allocator maps graph pools
// while the graph's work is being captured.
TEST_P(BackendCapture, VirtualMemoryCallsKeepTheCaptureValid) {
  const std::size_t g = b_->granularity();
  ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok);
  DevicePtr va = 0;
  ChunkHandle chunk = 0;
  ASSERT_EQ(b_->reserve(g, &va), Status::ok) << b_->last_error();
  ASSERT_EQ(b_->create_chunk(g, &chunk), Status::ok) << b_->last_error();
  ASSERT_EQ(b_->map(va, g, chunk), Status::ok) << b_->last_error();
  ASSERT_EQ(b_->set_access(va, g), Status::ok) << b_->last_error();
  jobs_.launch(*b_, s_, [] {});
  GraphHandle graph = nullptr;
  ASSERT_EQ(b_->stream_end_capture(s_, &graph), Status::ok) << b_->last_error();
  EXPECT_EQ(b_->graph_destroy(graph), Status::ok);
  fill(va, g, 7);
  EXPECT_TRUE(holds(va, g, 7));
  EXPECT_EQ(b_->unmap(va, g), Status::ok);
  EXPECT_EQ(b_->release_chunk(chunk), Status::ok);
  EXPECT_EQ(b_->unreserve(va, g), Status::ok);
}

TEST_P(BackendCapture, AGraphRunsOnAnyStreamAndOutlivesItsDestroy) {
  std::atomic<int> ran{0};
  ASSERT_EQ(b_->stream_begin_capture(s_), Status::ok);
  jobs_.launch(*b_, s_, [&] { ++ran; });
  GraphHandle g = nullptr;
  ASSERT_EQ(b_->stream_end_capture(s_, &g), Status::ok);
  Gate gate;
  ASSERT_EQ(b_->launch_host_func(s2_, Gate::job, &gate), Status::ok);
  ASSERT_EQ(b_->graph_launch(g, s2_), Status::ok);
  EXPECT_EQ(b_->graph_destroy(g), Status::ok) << "destroying a graph in flight is legal";
  gate.open();
  ASSERT_EQ(b_->stream_synchronize(s2_), Status::ok);
  EXPECT_EQ(ran.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Stacks, BackendCapture, ::testing::ValuesIn(backend_stacks()), stack_name);

}  // namespace
}  // namespace memlake::test

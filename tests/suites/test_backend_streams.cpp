// The stream and event half of the backend contract (src/backend/backend.hpp),
// on every platform and adaptor stack: work on a stream runs in order on
// another thread, an event covers the work recorded before it, a stream
// waits for an event without blocking the caller. HostStream's own rules
// (destroy drains, a destroyed stream's events complete) are tested in
// tests/host/test_host_backend.cpp.
#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "suites/backend_contract.hpp"
#include "suites/stream_jobs.hpp"

namespace memlake::test {
namespace {

// On a GPU an event completes a moment after the work before it; this waits
// (up to 10 s) for it to.
Status settled(Backend& b, EventHandle e) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  Status s = b.event_query(e);
  while (s == Status::not_ready && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    s = b.event_query(e);
  }
  return s;
}

TEST_P(BackendStreams, JobsRunInOrderOnAnotherThread) {
  auto b = make();
  StreamHandle s = nullptr;
  ASSERT_EQ(b->stream_create(&s), Status::ok) << b->last_error();
  ASSERT_NE(s, nullptr);
  std::vector<int> order;
  std::thread::id runner;
  Jobs jobs;
  for (int i = 0; i < 500; ++i) {
    jobs.launch(*b, s, [&, i] {
      order.push_back(i);
      runner = std::this_thread::get_id();
    });
  }
  ASSERT_EQ(b->stream_synchronize(s), Status::ok);
  ASSERT_EQ(order.size(), 500u);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_NE(runner, std::this_thread::get_id());
  EXPECT_EQ(b->stream_destroy(s), Status::ok);
}

TEST_P(BackendStreams, DefaultStreamIsAnOrderedQueueToo) {
  auto b = make();
  std::vector<int> order;
  Jobs jobs;
  for (int i = 0; i < 100; ++i) jobs.launch(*b, nullptr, [&, i] { order.push_back(i); });
  ASSERT_EQ(b->stream_synchronize(nullptr), Status::ok);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  bool capturing = true;
  EXPECT_EQ(b->stream_is_capturing(nullptr, &capturing), Status::ok);
  EXPECT_FALSE(capturing);
}

TEST_P(BackendStreams, EventIsPendingWhileEarlierWorkRuns) {
  auto b = make();
  StreamHandle s = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b->stream_create(&s), Status::ok);
  ASSERT_EQ(b->event_create(&e), Status::ok);
  EXPECT_EQ(b->event_query(e), Status::ok) << "never recorded counts as complete";

  Gate gate;
  ASSERT_EQ(b->launch_host_func(s, Gate::job, &gate), Status::ok);
  ASSERT_EQ(b->event_record(e, s), Status::ok);
  EXPECT_EQ(b->event_query(e), Status::not_ready);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(b->event_query(e), Status::not_ready);
  gate.open();
  ASSERT_EQ(b->stream_synchronize(s), Status::ok);
  EXPECT_EQ(b->event_query(e), Status::ok);
  EXPECT_EQ(b->event_destroy(e), Status::ok);
  EXPECT_EQ(b->stream_destroy(s), Status::ok);
}

TEST_P(BackendStreams, EventCoversOnlyWorkBeforeTheRecord) {
  auto b = make();
  StreamHandle s = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b->stream_create(&s), Status::ok);
  ASSERT_EQ(b->event_create(&e), Status::ok);
  ASSERT_EQ(b->event_record(e, s), Status::ok);
  Gate gate;
  ASSERT_EQ(b->launch_host_func(s, Gate::job, &gate), Status::ok);
  EXPECT_EQ(settled(*b, e), Status::ok) << "the gate was enqueued after the record";

  ASSERT_EQ(b->event_record(e, s), Status::ok);  // re-record: now behind the gate
  EXPECT_EQ(b->event_query(e), Status::not_ready);
  gate.open();
  ASSERT_EQ(b->stream_synchronize(s), Status::ok);
  EXPECT_EQ(b->event_query(e), Status::ok);
  EXPECT_EQ(b->event_destroy(e), Status::ok);
  EXPECT_EQ(b->stream_destroy(s), Status::ok);
}

TEST_P(BackendStreams, StreamWaitEventOrdersStreamsWithoutBlockingTheCaller) {
  auto b = make();
  StreamHandle sa = nullptr, sb = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b->stream_create(&sa), Status::ok);
  ASSERT_EQ(b->stream_create(&sb), Status::ok);
  ASSERT_EQ(b->event_create(&e), Status::ok);

  Gate gate;
  std::atomic<bool> a_done{false}, b_ran{false}, b_saw_a{false};
  Jobs jobs;
  ASSERT_EQ(b->launch_host_func(sa, Gate::job, &gate), Status::ok);
  jobs.launch(*b, sa, [&] { a_done = true; });
  ASSERT_EQ(b->event_record(e, sa), Status::ok);
  EXPECT_EQ(b->event_query(e), Status::not_ready);

  // A caller that blocked here would never return: the gate is still shut.
  auto call = std::async(std::launch::async, [&] { return b->stream_wait_event(sb, e); });
  ASSERT_EQ(call.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "stream_wait_event blocked the calling thread";
  ASSERT_EQ(call.get(), Status::ok);
  jobs.launch(*b, sb, [&] {
    b_saw_a = a_done.load();
    b_ran = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(b_ran.load()) << "stream B ran before A's event completed";
  EXPECT_EQ(b->event_query(e), Status::not_ready);

  gate.open();
  ASSERT_EQ(b->stream_synchronize(sb), Status::ok);
  EXPECT_TRUE(b_ran.load());
  EXPECT_TRUE(b_saw_a.load());
  EXPECT_EQ(b->event_query(e), Status::ok);
  EXPECT_EQ(b->event_destroy(e), Status::ok);
  EXPECT_EQ(b->stream_destroy(sa), Status::ok);
  EXPECT_EQ(b->stream_destroy(sb), Status::ok);
}

TEST_P(BackendStreams, WaitUsesTheRecordAtTheTimeOfTheCall) {
  // Stream A stays blocked behind a second gate while B must run: that needs
  // host functions of different streams to run at the same time.
  if (!platform_->host_functions_run_concurrently())
    GTEST_SKIP() << platform_->name() << " may run every stream's host functions on one thread";
  auto b = make();
  StreamHandle sa = nullptr, sb = nullptr;
  EventHandle e = nullptr;
  ASSERT_EQ(b->stream_create(&sa), Status::ok);
  ASSERT_EQ(b->stream_create(&sb), Status::ok);
  ASSERT_EQ(b->event_create(&e), Status::ok);
  Gate first, second;
  ASSERT_EQ(b->launch_host_func(sa, Gate::job, &first), Status::ok);
  ASSERT_EQ(b->event_record(e, sa), Status::ok);
  ASSERT_EQ(b->stream_wait_event(sb, e), Status::ok);
  ASSERT_EQ(b->launch_host_func(sa, Gate::job, &second), Status::ok);
  ASSERT_EQ(b->event_record(e, sa), Status::ok);  // moves the event behind `second`

  std::atomic<bool> b_ran{false};
  Jobs jobs;
  jobs.launch(*b, sb, [&] { b_ran = true; });
  first.open();
  auto sync = std::async(std::launch::async, [&] { return b->stream_synchronize(sb); });
  EXPECT_EQ(sync.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "B waited for the later record";
  second.open();
  EXPECT_EQ(sync.get(), Status::ok);
  EXPECT_TRUE(b_ran.load());
  ASSERT_EQ(b->stream_synchronize(sa), Status::ok);
  EXPECT_EQ(b->event_destroy(e), Status::ok);
  EXPECT_EQ(b->stream_destroy(sa), Status::ok);
  EXPECT_EQ(b->stream_destroy(sb), Status::ok);
}

TEST_P(BackendStreams, LaunchHostFuncPassesItsArgument) {
  auto b = make();
  StreamHandle s = nullptr;
  ASSERT_EQ(b->stream_create(&s), Status::ok);
  int value = 0;
  auto add = [](void* p) { *static_cast<int*>(p) += 5; };
  ASSERT_EQ(b->launch_host_func(s, add, &value), Status::ok);
  ASSERT_EQ(b->launch_host_func(s, add, &value), Status::ok);
  ASSERT_EQ(b->stream_synchronize(s), Status::ok);
  EXPECT_EQ(value, 10);
  EXPECT_EQ(b->stream_destroy(s), Status::ok);
}

INSTANTIATE_TEST_SUITE_P(Stack, BackendStreams, ::testing::ValuesIn(backend_stacks()), stack_name);

}  // namespace
}  // namespace memlake::test

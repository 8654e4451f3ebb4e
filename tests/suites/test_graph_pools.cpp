// Graph pools (graph/, memlake/graph.hpp), on every platform: steps captured
// with memlake::CapturedGraph replay with the addresses they were captured
// with, pool memory never reaches eager allocations, memory freed inside a
// capture is reused in graph order only, exclusive graphs share physical
// chunks and still compute the right bytes, a replay makes no allocator
// call, and misuse is reported. The work is device_work.hpp's: host
// functions on the HostBackend, kernels on a GPU.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "memlake/graph.hpp"
#include "suites/core_fixture.hpp"
#include "suites/device_work.hpp"
#include "suites/stats_delta.hpp"

namespace memlake::test {
namespace {

Words expected_mix(const Words& src, std::uint32_t key) {
  Words w(src.size());
  for (std::size_t i = 0; i < src.size(); ++i)
    w[i] = mix_word(src[i], key, static_cast<std::uint32_t>(i));
  return w;
}

// What accumulate adds to an accumulator of `acc_words` words.
Words folded(const Words& src, std::size_t acc_words) {
  Words acc(acc_words, 0);
  for (std::size_t i = 0; i < src.size(); ++i) acc[i % acc_words] += src[i];
  return acc;
}

// "" when equal, else the first word that differs (a vector of megabytes
// is not printed whole).
std::string mismatch(const Words& got, const Words& want) {
  if (got.size() != want.size())
    return "sizes " + std::to_string(got.size()) + " and " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return "word " + std::to_string(i) + " of " + std::to_string(got.size()) + ": got " +
             std::to_string(got[i]) + ", want " + std::to_string(want[i]);
  return "";
}

bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + bn && y < x + an;
}

// The buffers one captured step wrote, and what they must hold after it ran.
struct Buffer {
  std::uint32_t* ptr;
  Words expected;
};

class Graphs : public CoreTest {
 protected:
  static constexpr std::size_t kAccWords = 1024;

  void SetUp() override {
    CoreTest::SetUp();
    if (IsSkipped()) return;
    work_ = platform_->work();
    if (work_ == nullptr) GTEST_SKIP() << "no device work (kernels) on this platform";
    Config c = base_config();
    c.worker = WorkerMode::inline_jobs;
    alloc_ = make(512 * MiB, c);
    s_ = alloc_->create_stream();
    s2_ = alloc_->create_stream();
  }
  void TearDown() override {
    if (!alloc_) return;
    sync(s_);
    sync(s2_);
    alloc_->destroy_stream(s_);
    alloc_->destroy_stream(s2_);
    EXPECT_INVARIANTS(*alloc_);
  }

  Backend& b() { return alloc_->backend(); }
  void sync(Stream s) { ASSERT_EQ(b().stream_synchronize(s), Status::ok) << b().last_error(); }
  Words read(const void* p, std::size_t words) {
    Words w(words);
    platform_->read(p, w.data(), words * sizeof(std::uint32_t));
    return w;
  }
  std::uint32_t* words_on(std::size_t words, Stream s) {
    return static_cast<std::uint32_t*>(alloc_->allocate(words * sizeof(std::uint32_t), s));
  }
  void free_words(void* p, std::size_t words, Stream s) {
    alloc_->deallocate(p, words * sizeof(std::uint32_t), s);
  }
  // An eager accumulator, zeroed.
  std::uint32_t* accumulator() {
    std::uint32_t* acc = words_on(kAccWords, s_);
    work_->fill(b(), s_, acc, kAccWords, 0);
    sync(s_);
    acc_start_ = read(acc, kAccWords);
    return acc;
  }

  // A training-like step on `s`: a = fill(key), b = mix(a), c = mix(b),
  // acc += c. With `keep`, every temporary lives to the end of the step
  // (each holds its own result after a replay); otherwise a is freed before
  // c is allocated, so c may take its memory (graph order makes that safe).
  std::vector<Buffer> step(Stream s, std::size_t words, std::uint32_t key, std::uint32_t* acc,
                           bool keep) {
    std::uint32_t* a = words_on(words, s);
    work_->fill(b(), s, a, words, key);
    std::uint32_t* bb = words_on(words, s);
    work_->mix(b(), s, a, bb, words, key + 1);
    if (!keep) free_words(a, words, s);
    std::uint32_t* c = words_on(words, s);
    work_->mix(b(), s, bb, c, words, key + 2);
    work_->accumulate(b(), s, c, words, acc, kAccWords);
    free_words(c, words, s);
    free_words(bb, words, s);
    if (keep) free_words(a, words, s);
    const Words ea = expected_fill(words, key);
    const Words eb = expected_mix(ea, key + 1);
    Words ec = expected_mix(eb, key + 2);
    std::vector<Buffer> out;
    if (keep) out.push_back({a, ea});
    out.push_back({bb, eb});
    out.push_back({c, std::move(ec)});
    return out;
  }
  // `times` times what one step of `words` and `key` adds to the accumulator.
  static Words added(std::size_t words, std::uint32_t key, std::uint64_t times) {
    Words add =
        folded(expected_mix(expected_mix(expected_fill(words, key), key + 1), key + 2), kAccWords);
    for (std::uint32_t& w : add) w = static_cast<std::uint32_t>(w * times);
    return add;
  }
  // The accumulator after those steps, from its start.
  Words acc_after(std::size_t words, std::uint32_t key, std::uint64_t times) const {
    Words acc = acc_start_;
    const Words add = added(words, key, times);
    for (std::size_t j = 0; j < kAccWords; ++j) acc[j] += add[j];
    return acc;
  }
  // Every byte of every buffer holds what the step wrote.
  void expect_buffers(const std::vector<Buffer>& bufs, const char* what) {
    for (std::size_t i = 0; i < bufs.size(); ++i)
      ASSERT_EQ(mismatch(read(bufs[i].ptr, bufs[i].expected.size()), bufs[i].expected), "")
          << what << ": buffer " << i << " at " << static_cast<const void*>(bufs[i].ptr);
  }

  DeviceWork* work_ = nullptr;
  std::unique_ptr<Allocator> alloc_;
  Stream s_ = nullptr;
  Stream s2_ = nullptr;
  Words acc_start_;
};

TEST_F(Graphs, ReplaysMakeNoAllocatorCallAndKeepTheirAddressesOver1000Runs) {
  std::uint32_t* acc = accumulator();
  const PoolId pool = graph_pool_handle(*alloc_);
  constexpr std::size_t kWords = 3 * MiB / 4 + 100;
  std::vector<Buffer> bufs;
  CapturedGraph g(*alloc_, pool, s_, [&](Stream s) { bufs = step(s, kWords, 11, acc, false); });
  sync(s_);
  EXPECT_EQ(read(acc, kAccWords), acc_start_) << "captured work ran at capture time";
  const GraphPoolStats captured = graph_pool_stats(*alloc_, pool);
  EXPECT_GT(captured.reserved_bytes, 0u);
  EXPECT_EQ(captured.live_bytes, 0u) << "every temporary was freed inside the capture";
  EXPECT_EQ(captured.allocations, 3u);

  constexpr int kReplays = 1000;
  StatsDelta d(*alloc_);
  for (int r = 0; r < kReplays; ++r) g.launch(s_);
  sync(s_);
  EXPECT_EQ(d.changed(), "nothing changed") << "a replay must not call the allocator";
  EXPECT_EQ(mismatch(read(acc, kAccWords), acc_after(kWords, 11, kReplays)), "");
  // The graph's addresses are still mapped to the chunks it wrote: its
  // last buffers hold the last replay's results.
  expect_buffers(bufs, "after 1000 replays");
  const GraphPoolStats after = graph_pool_stats(*alloc_, pool);
  EXPECT_EQ(after.unmaps, 0u);
  EXPECT_EQ(after.reserved_bytes, captured.reserved_bytes);
  EXPECT_EQ(after.mapped_bytes, captured.mapped_bytes);
  RecordProperty("replays_checked", kReplays);
  free_words(acc, kAccWords, s_);
}

TEST_F(Graphs, EagerAllocationsNeverGetPoolMemory) {
  std::uint32_t* acc = accumulator();
  const PoolId pool = graph_pool_handle(*alloc_);
  constexpr std::size_t kWords = 5 * MiB / 4;
  std::vector<Buffer> bufs;
  CapturedGraph g(*alloc_, pool, s_, [&](Stream s) { bufs = step(s, kWords, 21, acc, true); });
  // The pool's memory is all free now; eager allocations of every size come
  // and go around replays, and the cache is emptied now and then.
  struct Eager {
    void* p;
    std::size_t n;
    std::uint32_t seed;
  };
  std::vector<Eager> eager;
  const std::size_t sizes[] = {512, 100 << 10, 1 * MiB, 3 * MiB, 5 * MiB, 9 * MiB};
  std::uint32_t seed = 1;
  for (int round = 0; round < 120; ++round) {
    const std::size_t n = sizes[round % 6] + 512 * (round % 3);
    void* p = alloc_->allocate(n, s2_);
    for (const Buffer& buf : bufs)
      ASSERT_FALSE(overlaps(p, n, buf.ptr, kWords * 4)) << "eager block inside the pool";
    platform_->fill(p, n, seed);
    eager.push_back({p, n, seed++});
    g.launch(s_);
    sync(s_);
    expect_buffers(bufs, "pool buffers after a replay among eager blocks");
    for (const Eager& e : eager)
      ASSERT_TRUE(platform_->check(e.p, e.n, e.seed)) << "a replay wrote into an eager block";
    if (round % 3 == 2) {
      alloc_->deallocate(eager.front().p, eager.front().n, s2_);
      eager.erase(eager.begin());
    }
    if (round % 20 == 19) {
      sync(s2_);
      alloc_->empty_cache();
    }
  }
  EXPECT_EQ(mismatch(read(acc, kAccWords), acc_after(kWords, 21, 120)), "");
  EXPECT_EQ(graph_pool_stats(*alloc_, pool).unmaps, 0u);
  for (const Eager& e : eager) alloc_->deallocate(e.p, e.n, s2_);
  free_words(acc, kAccWords, s_);
}

TEST_F(Graphs, MemoryFreedInACaptureIsReusedInGraphOrderOnly) {
  const PoolId pool = graph_pool_handle(*alloc_);
  constexpr std::size_t kBytes = 4 * MiB;
  constexpr std::size_t kWords = kBytes / 4;
  EventHandle fork = nullptr, join = nullptr;
  ASSERT_EQ(b().event_create(&fork), Status::ok);
  ASSERT_EQ(b().event_create(&join), Status::ok);
  void* a = nullptr;
  std::uint32_t* same = nullptr;
  std::uint32_t* other = nullptr;
  std::uint32_t* shared = nullptr;
  std::uint32_t* after_shared = nullptr;
  CapturedGraph g(*alloc_, pool, s_, [&](Stream s) {
    a = alloc_->allocate(kBytes, s);
    work_->fill(b(), s, static_cast<std::uint32_t*>(a), kWords, 1);
    alloc_->deallocate(a, kBytes, s);
    same = words_on(kWords, s);  // the same stream: after a in graph order
    work_->fill(b(), s, same, kWords, 2);
    // A stream forked into the capture runs beside s: it gets other memory.
    ASSERT_EQ(b().event_record(fork, s), Status::ok);
    ASSERT_EQ(b().stream_wait_event(s2_, fork), Status::ok) << b().last_error();
    other = words_on(kWords, s2_);
    work_->fill(b(), s2_, other, kWords, 3);
    // A block used on both streams is never reused.
    shared = words_on(kWords / 4, s);
    alloc_->record_stream(shared, s2_);
    free_words(shared, kWords / 4, s);
    after_shared = words_on(kWords / 4, s);
    work_->fill(b(), s, after_shared, kWords / 4, 4);
    ASSERT_EQ(b().event_record(join, s2_), Status::ok);
    ASSERT_EQ(b().stream_wait_event(s, join), Status::ok);
    free_words(other, kWords, s2_);
    free_words(same, kWords, s);
    free_words(after_shared, kWords / 4, s);
  });
  EXPECT_TRUE(overlaps(a, kBytes, same, kBytes)) << "the same stream reuses what it freed";
  EXPECT_FALSE(overlaps(a, kBytes, other, kBytes)) << "another stream of the capture got it";
  EXPECT_FALSE(overlaps(same, kBytes, other, kBytes));
  EXPECT_FALSE(overlaps(shared, kBytes / 4, after_shared, kBytes / 4))
      << "a block used on two streams was reused";
  EXPECT_EQ(graph_pool_stats(*alloc_, pool).retired_bytes, kBytes / 4);
  for (int r = 0; r < 20; ++r) g.launch(s_);
  sync(s_);
  // No two of them share physical memory: each holds its own bytes.
  EXPECT_EQ(mismatch(read(same, kWords), expected_fill(kWords, 2)), "");
  EXPECT_EQ(mismatch(read(other, kWords), expected_fill(kWords, 3)), "");
  EXPECT_EQ(mismatch(read(after_shared, kWords / 4), expected_fill(kWords / 4, 4)), "");
  EXPECT_EQ(b().event_destroy(fork), Status::ok);
  EXPECT_EQ(b().event_destroy(join), Status::ok);
}

// The buckets of a training run with dynamic sequence lengths: one graph
// each, never run at the same time. In one exclusive group they share
// physical chunks; every byte of each graph's buffers is checked after each
// of its replays, interleaved with the others' on two streams.
TEST_F(Graphs, ExclusiveGraphsShareChunksAndKeepEveryByteRight) {
  std::uint32_t* acc = accumulator();
  constexpr std::size_t kBuckets = 4;
  const std::size_t bucket_words[kBuckets] = {MiB / 2, 3 * MiB / 4 + 256, 5 * MiB / 4,
                                              2 * MiB + 1000};
  // Separate pools first, for the memory they take side by side.
  std::size_t separate = 0;
  {
    std::vector<CapturedGraph> solo;
    for (std::size_t k = 0; k < kBuckets; ++k) {
      const PoolId p = graph_pool_handle(*alloc_);
      solo.emplace_back(*alloc_, p, s_, [&](Stream s) {
        step(s, bucket_words[k], 100 + static_cast<std::uint32_t>(k), acc, true);
      });
      separate += graph_pool_stats(*alloc_, p).reserved_bytes;
    }
  }
  const ExclusiveGroupId group = new_exclusive_group(*alloc_, /*check=*/true);
  std::vector<CapturedGraph> graphs;
  std::vector<std::vector<Buffer>> bufs(kBuckets);
  std::size_t largest = 0, mapped = 0;
  for (std::size_t k = 0; k < kBuckets; ++k) {
    const PoolId p = exclusive_pool_handle(*alloc_, group);
    graphs.emplace_back(*alloc_, p, s_, [&](Stream s) {
      bufs[k] = step(s, bucket_words[k], 100 + static_cast<std::uint32_t>(k), acc, true);
    });
    const GraphPoolStats st = graph_pool_stats(*alloc_, p);
    EXPECT_EQ(st.group, group);
    largest = std::max(largest, st.reserved_bytes);
    mapped += st.mapped_bytes;
  }
  const std::size_t shared = exclusive_group_bytes(*alloc_, group);
  EXPECT_LE(static_cast<double>(shared), 1.05 * static_cast<double>(largest));
  EXPECT_LT(shared, separate);
  EXPECT_EQ(alloc_->stats().graph_pool_bytes.current, static_cast<std::int64_t>(shared));
  std::printf(
      "[ memory   ] %zu exclusive graphs: shared %.1f MiB, largest alone %.1f MiB (%.3fx), "
      "separate pools %.1f MiB, mapped %.1f MiB\n",
      kBuckets, shared / double(MiB), largest / double(MiB),
      static_cast<double>(shared) / static_cast<double>(largest), separate / double(MiB),
      mapped / double(MiB));
  RecordProperty("shared_bytes", std::to_string(shared));
  RecordProperty("largest_bytes", std::to_string(largest));
  RecordProperty("separate_bytes", std::to_string(separate));

  // Interleaved, in an order that visits every pair, on alternating streams.
  std::vector<std::uint64_t> runs(kBuckets, 0);
  constexpr int kRounds = 48;
  for (int r = 0; r < kRounds; ++r) {
    const std::size_t k =
        (static_cast<std::size_t>(r) * 7 + static_cast<std::size_t>(r) / kBuckets) % kBuckets;
    const Stream s = r % 2 ? s2_ : s_;
    graphs[k].launch(s);
    sync(s);
    ++runs[k];
    expect_buffers(bufs[k], "exclusive graph after its replay");
  }
  check_exclusive_group(*alloc_, group);
  EXPECT_EQ(alloc_->stats().graph_exclusive_overlaps.current, 0);
  // Every replay added its bucket's contribution (the separate pools' graphs
  // never ran).
  Words want = acc_start_;
  for (std::size_t k = 0; k < kBuckets; ++k) {
    const Words add = added(bucket_words[k], 100 + static_cast<std::uint32_t>(k), runs[k]);
    for (std::size_t j = 0; j < kAccWords; ++j) want[j] += add[j];
  }
  EXPECT_EQ(mismatch(read(acc, kAccWords), want), "");
  free_words(acc, kAccWords, s_);
}

// A block made in a capture and kept after it (a graph's output, a
// library's cache) is read after its graph ran, and by other graphs: the
// group's other graphs must not overwrite it. Each graph here keeps an
// output made first in its capture, so on shared chunks every pool would
// place it on the same physical bytes; bucket 0's pool also takes a second
// graph, whose capture ends after the first graph has run.
TEST_F(Graphs, BlocksKeptAfterAnExclusiveCaptureAreNotOverwrittenByTheGroup) {
  constexpr std::size_t kOut = MiB / 8;  // words: 512 KiB
  const std::size_t temp_words[] = {MiB, 3 * MiB / 2, 2 * MiB};
  const ExclusiveGroupId group = new_exclusive_group(*alloc_, /*check=*/true);
  struct Graph {
    std::unique_ptr<CapturedGraph> graph;
    PoolId pool;
    std::uint32_t* out = nullptr;
    Words expected;
  };
  std::vector<Graph> graphs;
  auto capture = [&](PoolId pool, std::size_t temp, std::uint32_t key) {
    Graph g{nullptr, pool, nullptr, expected_mix(expected_fill(kOut, key), key + 1)};
    g.graph = std::make_unique<CapturedGraph>(*alloc_, pool, s_, [&](Stream s) {
      g.out = words_on(kOut, s);
      std::uint32_t* t = words_on(temp, s);
      work_->fill(b(), s, t, temp, key);
      work_->mix(b(), s, t, g.out, kOut, key + 1);
      std::uint32_t* u = words_on(temp, s);  // more of the group's chunks, overwritten
      work_->fill(b(), s, u, temp, key + 2);
      free_words(u, temp, s);
      free_words(t, temp, s);
    });
    graphs.push_back(std::move(g));
  };
  const auto before = alloc_->stats().graph_kept_chunks.current;
  for (std::size_t k = 0; k < std::size(temp_words); ++k)
    capture(exclusive_pool_handle(*alloc_, group), temp_words[k],
            300 + 10 * static_cast<std::uint32_t>(k));
  for (const Graph& g : graphs) {
    const GraphPoolStats st = graph_pool_stats(*alloc_, g.pool);
    EXPECT_GT(st.kept_bytes, 0u) << "the kept output's chunk stays shared";
    EXPECT_LT(st.kept_bytes, st.reserved_bytes) << "temporaries' chunks were kept too";
    EXPECT_EQ(st.live_blocks, 1u);
  }
  EXPECT_GE(alloc_->stats().graph_kept_chunks.current - before,
            static_cast<std::int64_t>(graphs.size()));

  // Replays in an order that visits every pair; after each, every graph that
  // ran holds the output of its own last replay (graphs sharing a pool may
  // overwrite each other's: that is a shared pool's contract).
  std::vector<bool> ran(graphs.size() + 1, false);
  auto replay_and_check = [&](std::size_t k, Stream s) {
    graphs[k].graph->launch(s);
    sync(s);
    ran[k] = true;
    for (std::size_t j = 0; j < graphs.size(); ++j) {
      if (!ran[j] || (j != k && graphs[j].pool == graphs[k].pool)) continue;
      ASSERT_EQ(mismatch(read(graphs[j].out, kOut), graphs[j].expected), "")
          << "output of graph " << j << " after graph " << k << " ran";
    }
  };
  for (int r = 0; r < 12; ++r)
    replay_and_check(static_cast<std::size_t>(r * 2 + r / 3) % graphs.size(), r % 2 ? s2_ : s_);
  // A second graph in bucket 0's pool, captured after the first one ran:
  // its output needs a chunk of its own too, and the first graph's output
  // stays what it was.
  capture(graphs[0].pool, temp_words[0], 400);
  EXPECT_NE(graphs.back().out, graphs[0].out);
  ASSERT_EQ(mismatch(read(graphs[0].out, kOut), graphs[0].expected), "");
  for (int r = 0; r < 12; ++r)
    replay_and_check(static_cast<std::size_t>(r * 3 + 1) % graphs.size(), r % 2 ? s_ : s2_);
  check_exclusive_group(*alloc_, group);
  std::printf(
      "[ memory   ] %zu exclusive graphs keeping outputs: group %.1f MiB, kept %lld chunks\n",
      graphs.size(), exclusive_group_bytes(*alloc_, group) / double(MiB),
      static_cast<long long>(alloc_->stats().graph_kept_chunks.current - before));
  for (Graph& g : graphs) free_words(g.out, kOut, s_);
}

// Keeping a block needs new chunks, and, for a pool that earlier graphs
// use, a device synchronization: when either is impossible the capture's
// end says so, and the allocator stays usable.
TEST_F(Graphs, KeptBlocksThatCannotHaveChunksOfTheirOwnAreReported) {
  {
    Config c = base_config();
    c.worker = WorkerMode::inline_jobs;
    auto small = make(4 * MiB, c);
    const Stream s = small->create_stream();
    const ExclusiveGroupId group = new_exclusive_group(*small);
    void* kept = nullptr;
    try {
      CapturedGraph g(*small, exclusive_pool_handle(*small, group), s,
                      [&](Stream cs) { kept = small->allocate(3 * MiB, cs); });
      ADD_FAILURE() << "a kept block without memory for its chunks went unreported";
    } catch (const out_of_memory& e) {
      EXPECT_NE(std::string(e.what()).find("need chunks of their own"), std::string::npos)
          << e.what();
    }
    ASSERT_NE(kept, nullptr);
    small->deallocate(kept, 3 * MiB, s);
    small->empty_cache();
    EXPECT_EQ(small->stats().graph_pool_bytes.current, 0);
    void* p = small->allocate(4 * MiB, s);  // all of the capacity again
    small->deallocate(p, 4 * MiB, s);
    ASSERT_EQ(small->backend().stream_synchronize(s), Status::ok);
    small->destroy_stream(s);
    EXPECT_INVARIANTS(*small);
  }
  const ExclusiveGroupId group = new_exclusive_group(*alloc_);
  const PoolId pool = exclusive_pool_handle(*alloc_, group);
  const PoolId other = exclusive_pool_handle(*alloc_, group);
  auto on_s = [this](Stream s) { return s == s_; };
  auto on_s2 = [this](Stream s) { return s == s2_; };
  begin_allocate_to_pool(*alloc_, pool, on_s);
  void* first = alloc_->allocate(MiB, s_);
  end_allocate_to_pool(*alloc_, pool);
  begin_allocate_to_pool(*alloc_, pool, on_s);
  begin_allocate_to_pool(*alloc_, other, on_s2);
  void* second = alloc_->allocate(3 * MiB, s_);
  try {
    end_allocate_to_pool(*alloc_, pool);
    ADD_FAILURE() << "keeping a block with another capture under way went unreported";
  } catch (const misuse& e) {
    EXPECT_NE(std::string(e.what()).find("another capture under way"), std::string::npos)
        << e.what();
  }
  end_allocate_to_pool(*alloc_, other);
  alloc_->deallocate(second, 3 * MiB, s_);
  alloc_->deallocate(first, MiB, s_);
  release_pool(*alloc_, pool);
  release_pool(*alloc_, pool);
  release_pool(*alloc_, other);
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().graph_pools.current, 0);
}

TEST_F(Graphs, OverlappingExclusiveGraphsAreReported) {
  const ExclusiveGroupId group = new_exclusive_group(*alloc_, /*check=*/true);
  std::vector<CapturedGraph> graphs;
  for (int k = 0; k < 2; ++k) {
    graphs.emplace_back(*alloc_, exclusive_pool_handle(*alloc_, group), s_, [&](Stream s) {
      std::uint32_t* t = words_on(MiB / 4, s);
      work_->delay(b(), s, std::chrono::milliseconds(150));
      work_->fill(b(), s, t, MiB / 4, 5);
      free_words(t, MiB / 4, s);
    });
  }
  // One stream: stream order keeps them apart, raw launches or not.
  ASSERT_EQ(b().graph_launch(graphs[0].handle(), s_), Status::ok);
  ASSERT_EQ(b().graph_launch(graphs[1].handle(), s_), Status::ok);
  sync(s_);
  EXPECT_NO_THROW(check_exclusive_group(*alloc_, group));
  // Two streams, launched past the helper: they run at the same time.
  ASSERT_EQ(b().graph_launch(graphs[0].handle(), s_), Status::ok);
  ASSERT_EQ(b().graph_launch(graphs[1].handle(), s2_), Status::ok);
  sync(s_);
  sync(s2_);
  try {
    check_exclusive_group(*alloc_, group);
    ADD_FAILURE() << "the overlap went unreported";
  } catch (const misuse& e) {
    EXPECT_NE(std::string(e.what()).find("ran at the same time"), std::string::npos) << e.what();
  }
  EXPECT_EQ(alloc_->stats().graph_exclusive_overlaps.current, 1);
  // Through the helper, on two streams: ordered on the device.
  for (int r = 0; r < 4; ++r) graphs[static_cast<std::size_t>(r % 2)].launch(r % 2 ? s2_ : s_);
  sync(s_);
  sync(s2_);
  EXPECT_NO_THROW(check_exclusive_group(*alloc_, group));
}

TEST_F(Graphs, TheAllocatorMakesNoIllegalCallDuringACapture) {
  // Fences of frees on two streams, some recorded, some open: normally the
  // next allocations query their events.
  for (int i = 0; i < 80; ++i) {
    void* p = alloc_->allocate((i % 5 + 1) * MiB, i % 2 ? s2_ : s_);
    alloc_->deallocate(p, 0, i % 2 ? s2_ : s_);
  }
  const PoolId pool = graph_pool_handle(*alloc_);
  StatsDelta d(*alloc_);
  // The host backend invalidates the capture at the first event query or
  // synchronization, as CUDA does: the capture would then throw.
  EXPECT_NO_THROW(CapturedGraph(*alloc_, pool, s_, [&](Stream s) {
    for (int i = 0; i < 40; ++i) {
      void* tmp = alloc_->allocate((i % 3 + 1) * MiB, s);
      void* eager = alloc_->allocate((i % 4 + 1) * MiB, s2_);  // not capturing: the lake
      work_->fill(b(), s, static_cast<std::uint32_t*>(tmp), MiB / 4, 9);
      alloc_->deallocate(eager, 0, s2_);
      alloc_->deallocate(tmp, 0, s);
    }
  }));
  EXPECT_EQ(d(&Stats::event_queries), 0) << d.changed();
  EXPECT_EQ(d(&Stats::graph_allocs), 40) << d.changed();
  EXPECT_EQ(d(&Stats::allocs), 80) << "the totals count the pool's blocks too; " << d.changed();
  EXPECT_EQ(d(&Stats::frees), 80) << d.changed();
  EXPECT_EQ(d(&Stats::live_blocks), 0) << d.changed();
}

TEST_F(Graphs, PoolsSharedByCapturesReuseTheirMemoryAndLiveUntilTheLastRelease) {
  std::uint32_t* acc = accumulator();
  const PoolId pool = graph_pool_handle(*alloc_);
  constexpr std::size_t kWords = MiB;
  auto first = std::make_unique<CapturedGraph>(*alloc_, pool, s_,
                                               [&](Stream s) { step(s, kWords, 31, acc, false); });
  const std::size_t one = graph_pool_stats(*alloc_, pool).reserved_bytes;
  auto second = std::make_unique<CapturedGraph>(*alloc_, pool, s_,
                                                [&](Stream s) { step(s, kWords, 41, acc, false); });
  EXPECT_EQ(graph_pool_stats(*alloc_, pool).reserved_bytes, one)
      << "the second capture reuses what the first freed";
  EXPECT_EQ(graph_pool_stats(*alloc_, pool).users, 2);
  // Replayed in capture order, as a shared pool requires.
  for (int r = 0; r < 10; ++r) {
    first->launch(s_);
    second->launch(s_);
  }
  sync(s_);
  Words want = acc_after(kWords, 31, 10);
  const Words add = added(kWords, 41, 10);
  for (std::size_t j = 0; j < kAccWords; ++j) want[j] += add[j];
  EXPECT_EQ(mismatch(read(acc, kAccWords), want), "");
  first.reset();
  EXPECT_EQ(graph_pool_stats(*alloc_, pool).users, 1) << "still used by the second graph";
  EXPECT_EQ(alloc_->stats().graph_pools.current, 1);
  second.reset();
  EXPECT_EQ(alloc_->stats().graph_pools.current, 0);
  EXPECT_EQ(alloc_->stats().graph_pool_bytes.current, 0);
  // Its chunks went back: eager allocations take them, the reserve does not grow.
  const std::int64_t reserved = alloc_->stats().reserved_bytes.current;
  void* p = alloc_->allocate(one / 2, s_);
  EXPECT_EQ(alloc_->stats().reserved_bytes.current, reserved);
  alloc_->deallocate(p, one / 2, s_);
  free_words(acc, kAccWords, s_);
}

TEST_F(Graphs, APoolReleasedWithLiveBlocksGoesWithTheLast) {
  const PoolId pool = graph_pool_handle(*alloc_);
  std::uint32_t* out = nullptr;
  {
    CapturedGraph g(*alloc_, pool, s_, [&](Stream s) {
      out = words_on(MiB / 4, s);  // a graph output, kept past the graph
      work_->fill(b(), s, out, MiB / 4, 6);
    });
    g.launch(s_);
    sync(s_);
  }
  const GraphPoolStats st = graph_pool_stats(*alloc_, pool);
  EXPECT_TRUE(st.released);
  EXPECT_EQ(st.live_blocks, 1u);
  EXPECT_EQ(mismatch(read(out, MiB / 4), expected_fill(MiB / 4, 6)), "")
      << "a live block stays mapped";
  EXPECT_TRUE(alloc_->owns(out));
  EXPECT_EQ(alloc_->allocation_size(out), MiB);
  free_words(out, MiB / 4, s_);
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().graph_pools.current, 0);
  EXPECT_EQ(alloc_->stats().graph_pool_bytes.current, 0);
}

TEST_F(Graphs, ACaptureThatFailsReleasesItsPool) {
  const PoolId pool = graph_pool_handle(*alloc_);
  void* leaked = nullptr;
  Status sync = Status::ok;
  try {
    CapturedGraph g(*alloc_, pool, s_, [&](Stream s) {
      leaked = alloc_->allocate(MiB, s);
      sync = b().stream_synchronize(s);  // illegal in a capture: invalidates it
    });
    ADD_FAILURE() << "the capture did not fail";
  } catch (const backend_error& e) {
    // The host names the illegal call; CUDA reports the invalidated capture
    // when it ends.
    const std::string what = e.what();
    EXPECT_TRUE(what.find("stream_synchronize") != std::string::npos ||
                what.find("Invalidated") != std::string::npos)
        << what;
  }
  EXPECT_NE(sync, Status::ok) << "a synchronize inside a capture was allowed";
  EXPECT_TRUE(graph_pool_stats(*alloc_, pool).released);
  alloc_->deallocate(leaked, MiB, s_);
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().graph_pools.current, 0);
  EXPECT_EQ(alloc_->stats().graph_pool_bytes.current, 0);
  EXPECT_INVARIANTS(*alloc_);
}

// PyTorch's order: pool calls around a capture it runs itself, and no
// release after a capture that fails (pytorch leaks that pool).
TEST_F(Graphs, AnAbandonedCaptureReleasesItsPoolAtEndAllocate) {
  const PoolId pool = graph_pool_handle(*alloc_);
  begin_allocate_to_pool(*alloc_, pool, capture_filter(*alloc_, s_));
  ASSERT_EQ(b().stream_begin_capture(s_), Status::ok);
  void* p = alloc_->allocate(2 * MiB, s_);
  EventHandle e = nullptr;
  ASSERT_EQ(b().event_create(&e), Status::ok);
  ASSERT_EQ(b().event_record(e, s_), Status::ok);
  EXPECT_NE(b().event_query(e), Status::ok);  // a captured event: invalidates
  end_allocate_to_pool(*alloc_, pool);
  EXPECT_EQ(alloc_->stats().graph_captures_abandoned.current, 1);
  GraphHandle g = nullptr;
  EXPECT_NE(b().stream_end_capture(s_, &g), Status::ok);
  alloc_->deallocate(p, 2 * MiB, s_);
  alloc_->empty_cache();
  EXPECT_EQ(alloc_->stats().graph_pools.current, 0);
  EXPECT_EQ(alloc_->stats().graph_pool_bytes.current, 0);
  EXPECT_NO_THROW(release_pool(*alloc_, pool)) << "a late release of that use is tolerated";
  EXPECT_THROW(release_pool(*alloc_, pool), misuse);
  EXPECT_EQ(b().event_destroy(e), Status::ok);
}

struct PoolEvents final : Observer {
  std::vector<std::string> seen;
  void on_pool_begin(const PoolEvent& e) override { seen.push_back(name("begin", e)); }
  void on_pool_end(const PoolEvent& e) override { seen.push_back(name("end", e)); }
  void on_pool_release(const PoolEvent& e) override { seen.push_back(name("release", e)); }
  void on_alloc(const AllocEvent& e) override {
    seen.push_back("alloc " + std::to_string(e.bytes));
  }
  void on_free(const FreeEvent& e) override { seen.push_back("free " + std::to_string(e.bytes)); }
  static std::string name(const char* what, const PoolEvent& e) {
    return std::string(what) + " " + std::to_string(e.pool_second % 1000) + " live " +
           std::to_string(e.live_bytes) + (e.reserved_bytes > 0 ? " reserved" : "");
  }
};

TEST_F(Graphs, ObserversHearPoolBeginEndAndRelease) {
  PoolEvents events;
  alloc_->add_observer(&events);
  const PoolId pool = graph_pool_handle(*alloc_);
  {
    CapturedGraph g(*alloc_, pool, s_, [&](Stream s) {
      void* p = alloc_->allocate(3 * MiB, s);
      alloc_->deallocate(p, 3 * MiB, s);
    });
  }
  alloc_->remove_observer(&events);
  const std::string id = std::to_string(pool.second % 1000);
  const std::vector<std::string> want = {"begin " + id + " live 0", "alloc 3145728", "free 3145728",
                                         "end " + id + " live 0 reserved",
                                         "release " + id + " live 0 reserved"};
  EXPECT_EQ(events.seen, want);
}

TEST_F(Graphs, MisuseIsReportedClearly) {
  const PoolId pool = graph_pool_handle(*alloc_);
  expect_misuse([&] { release_pool(*alloc_, pool); }, "is not known");
  expect_misuse([&] { end_allocate_to_pool(*alloc_, pool); }, "end without begin");
  expect_misuse([&] { begin_allocate_to_pool(*alloc_, PoolId{}, [](Stream) { return true; }); },
                "names no pool");
  // Released while allocations go to it.
  begin_allocate_to_pool(*alloc_, pool, [this](Stream s) { return s == s2_; });
  expect_misuse([&] { release_pool(*alloc_, pool); }, "being allocated to");
  // A capturing stream no pool takes.
  ASSERT_EQ(b().stream_begin_capture(s_), Status::ok);
  expect_misuse([&] { alloc_->allocate(MiB, s_); }, "no graph pool allocates on it");
  GraphHandle g = nullptr;
  ASSERT_EQ(b().stream_end_capture(s_, &g), Status::ok) << "nothing illegal was called";
  EXPECT_EQ(b().graph_destroy(g), Status::ok);
  // A pool block freed with the wrong size.
  void* p = alloc_->allocate(MiB, s2_);
  EXPECT_EQ(graph_pool_stats(*alloc_, pool).live_blocks, 1u);
  expect_misuse([&] { alloc_->deallocate(p, 2 * MiB, s2_); }, "size mismatch");
  alloc_->deallocate(p, MiB, s2_);
  end_allocate_to_pool(*alloc_, pool);
  release_pool(*alloc_, pool);
  expect_misuse([&] { begin_allocate_to_pool(*alloc_, pool, [](Stream) { return true; }); },
                "was released");
  expect_misuse([&] { exclusive_pool_handle(*alloc_, 12345); }, "unknown exclusive group");
}

}  // namespace
}  // namespace memlake::test

// graph_step: a training-like step captured into one CUDA graph per bucket
// of sequence lengths, replayed many times from memlake graph pools.
//
// The step of bucket k (tokens_k tokens of `hidden` words each) is three
// layers with temporaries whose sizes follow the bucket, h (4x), a and o,
// the first freed before the last is made, and a gradient accumulated into
// a buffer every bucket shares, as a parameter's gradient is:
//
//   h = layer(x_k); a = layer(h); free h; o = layer(a); free a; grad += o; free o
//
// The sample runs each bucket eagerly once, then captures every bucket into
// pools of their own and, in the same run, into one exclusive group whose
// pools share physical chunks, and replays the group's graphs in a shuffled
// order on two streams. After every replay it checks the bucket's output o
// at the address it was captured with (every word), and at the end the
// gradient (every word, against the sum the host computes); it counts the
// allocator's calls over the replays (none is expected). It prints the
// memory of separate pools, of the shared chunks and, on CUDA, of
// cudaMallocAsync's graph memory nodes for the same steps. Exit status 0
// when every check held, 1 when one failed, 77 for --backend cuda without
// a GPU.
//
//   graph_step --backend host --buckets 4 --tokens 128 --hidden 1024 --replays 1000
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "memlake/allocator.hpp"
#include "memlake/graph.hpp"
#include "step_work.hpp"

namespace {

using graph_step::word;
using Words = std::vector<std::uint32_t>;
constexpr double kMiB = 1 << 20;

struct Options {
  std::string backend = "host";
  int buckets = 4;
  std::size_t tokens = 64;  // bucket k has (k + 1) * tokens
  std::size_t hidden = 256;
  int replays = 1000;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "graph_step: %s\n"
               "usage: graph_step [--backend host|cuda] [--buckets N] [--tokens T] [--hidden H]\n"
               "                  [--replays R]\n",
               why);
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value for " + std::string(a)).c_str());
      return argv[++i];
    };
    if (a == "--backend") {
      o.backend = value();
      if (o.backend != "host" && o.backend != "cuda") usage("--backend is host or cuda");
    } else if (a == "--buckets") {
      o.buckets = std::atoi(value());
    } else if (a == "--tokens") {
      o.tokens = std::strtoull(value(), nullptr, 10);
    } else if (a == "--hidden") {
      o.hidden = std::strtoull(value(), nullptr, 10);
    } else if (a == "--replays") {
      o.replays = std::atoi(value());
    } else {
      usage(("unknown argument " + std::string(a)).c_str());
    }
  }
  if (o.buckets < 1 || o.tokens == 0 || o.hidden == 0 || o.replays < 0)
    usage("buckets, tokens and hidden must be positive");
  return o;
}

// What the step of a bucket computes, on the host.
struct Expected {
  Words out;   // o
  Words grad;  // what one step adds to the gradient
};

Words layer(const Words& src, std::size_t words, std::uint32_t key) {
  Words dst(words);
  for (std::size_t i = 0; i < words; ++i)
    dst[i] = word(src[i % src.size()] ^ key, static_cast<std::uint32_t>(i));
  return dst;
}

Expected expected(const Words& x, std::size_t hidden, std::uint32_t key) {
  const std::size_t n = x.size();
  const Words a = layer(layer(x, 4 * n, key), n, key + 1);
  Expected e{layer(a, n, key + 2), Words(hidden, 0)};
  for (std::size_t i = 0; i < n; ++i) e.grad[i % hidden] += e.out[i];
  return e;
}

class Run {
 public:
  Run(const Options& o, memlake::Allocator& alloc, graph_step::Work& work)
      : o_(o), alloc_(alloc), work_(work) {}

  int main();

 private:
  std::size_t words(int k) const { return o_.tokens * static_cast<std::size_t>(k + 1) * o_.hidden; }
  std::uint32_t key(int k) const { return static_cast<std::uint32_t>(3 * k + 1); }
  std::uint32_t* take(std::size_t n, memlake::Stream s) {
    return static_cast<std::uint32_t*>(alloc_.allocate(n * 4, s));
  }
  void give(void* p, std::size_t n, memlake::Stream s) { alloc_.deallocate(p, n * 4, s); }
  void sync(memlake::Stream s) {
    if (alloc_.backend().stream_synchronize(s) != memlake::Status::ok)
      throw std::runtime_error("stream_synchronize: " + alloc_.backend().last_error());
  }
  Words read(const void* p, std::size_t n) {
    Words w(n);
    work_.read(p, w.data(), n * 4);
    return w;
  }
  // The step of bucket k on s; returns where o was placed.
  std::uint32_t* step(int k, memlake::Stream s) {
    const std::size_t n = words(k);
    std::uint32_t* h = take(4 * n, s);
    work_.layer(s, inputs_[static_cast<std::size_t>(k)], n, h, 4 * n, key(k));
    std::uint32_t* a = take(n, s);
    work_.layer(s, h, 4 * n, a, n, key(k) + 1);
    give(h, 4 * n, s);
    std::uint32_t* o = take(n, s);
    work_.layer(s, a, n, o, n, key(k) + 2);
    give(a, n, s);
    work_.accumulate(s, o, n, grad_, o_.hidden);
    give(o, n, s);
    return o;
  }
  bool check(const char* what, const Words& got, const Words& want) {
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        std::printf("FAILED: %s: word %zu of %zu is %u, expected %u\n", what, i, got.size(), got[i],
                    want[i]);
        ++failures_;
        return false;
      }
    }
    return true;
  }
  void add_step(Words& grad, int k) {
    const Words& add = expected_[static_cast<std::size_t>(k)].grad;
    for (std::size_t j = 0; j < grad.size(); ++j) grad[j] += add[j];
  }

  const Options& o_;
  memlake::Allocator& alloc_;
  graph_step::Work& work_;
  std::vector<std::uint32_t*> inputs_;
  std::vector<Expected> expected_;
  std::uint32_t* grad_ = nullptr;
  int failures_ = 0;
};

int Run::main() {
  const memlake::Stream s = alloc_.create_stream();
  const memlake::Stream s2 = alloc_.create_stream();
  const auto buckets = static_cast<std::size_t>(o_.buckets);

  // Inputs (static, one per bucket) and the shared gradient, made eagerly by
  // layers over a one-word seed buffer.
  std::uint32_t* seed = take(1, s);
  work_.layer(s, seed, 1, seed, 1, 0);  // seed[0] = word(seed[0], 0), whatever it held
  sync(s);
  const Words seed_word = read(seed, 1);
  for (int k = 0; k < o_.buckets; ++k) {
    inputs_.push_back(take(words(k), s));
    work_.layer(s, seed, 1, inputs_.back(), words(k), static_cast<std::uint32_t>(100 + k));
    expected_.push_back(expected(layer(seed_word, words(k), static_cast<std::uint32_t>(100 + k)),
                                 o_.hidden, key(k)));
  }
  grad_ = take(o_.hidden, s);
  work_.layer(s, seed, 1, grad_, o_.hidden, 7);
  sync(s);
  Words grad = read(grad_, o_.hidden);

  // 1. Eagerly, once per bucket: the reference the graphs must match.
  for (int k = 0; k < o_.buckets; ++k) {
    step(k, s);
    add_step(grad, k);
  }
  sync(s);
  check("eager steps: gradient", read(grad_, o_.hidden), grad);
  const std::int64_t eager_reserved = alloc_.stats().reserved_bytes.peak;

  // 2. One pool per bucket.
  std::size_t separate = 0;
  std::vector<std::size_t> alone(buckets);
  {
    std::vector<memlake::CapturedGraph> graphs;
    for (int k = 0; k < o_.buckets; ++k) {
      const memlake::PoolId pool = memlake::graph_pool_handle(alloc_);
      graphs.emplace_back(alloc_, pool, s, [&](memlake::Stream cs) { step(k, cs); });
      alone[static_cast<std::size_t>(k)] = memlake::graph_pool_stats(alloc_, pool).reserved_bytes;
      separate += alone[static_cast<std::size_t>(k)];
    }
    for (int k = 0; k < o_.buckets; ++k) {
      graphs[static_cast<std::size_t>(k)].launch(s);
      add_step(grad, k);
    }
    sync(s);
    check("separate pools: gradient", read(grad_, o_.hidden), grad);
  }

  // 3. One exclusive group: the buckets' pools share physical chunks.
  const memlake::ExclusiveGroupId group = memlake::new_exclusive_group(alloc_, /*check=*/true);
  std::vector<memlake::CapturedGraph> graphs;
  std::vector<std::uint32_t*> outs;
  std::size_t largest = 0;
  for (int k = 0; k < o_.buckets; ++k) {
    const memlake::PoolId pool = memlake::exclusive_pool_handle(alloc_, group);
    graphs.emplace_back(alloc_, pool, s, [&](memlake::Stream cs) { outs.push_back(step(k, cs)); });
    largest = std::max(largest, memlake::graph_pool_stats(alloc_, pool).reserved_bytes);
  }
  const std::size_t shared = memlake::exclusive_group_bytes(alloc_, group);

  // Replays in a shuffled order on two streams, each ordered after the
  // previous one by the group; every output word checked after each.
  const memlake::Stats before = alloc_.stats();
  std::uint64_t lcg = 12345;
  int checked = 0;
  for (int r = 0; r < o_.replays; ++r) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    const int k = static_cast<int>((lcg >> 33) % buckets);
    const memlake::Stream on = r % 2 ? s2 : s;
    graphs[static_cast<std::size_t>(k)].launch(on);
    add_step(grad, k);
    sync(on);
    if (!check("replay: output at its captured address",
               read(outs[static_cast<std::size_t>(k)], words(k)),
               expected_[static_cast<std::size_t>(k)].out))
      break;
    ++checked;
  }
  const memlake::Stats after = alloc_.stats();
  check("replays: gradient", read(grad_, o_.hidden), grad);
  const std::int64_t calls = (after.allocs.current - before.allocs.current) +
                             (after.frees.current - before.frees.current) +
                             (after.graph_allocs.current - before.graph_allocs.current) +
                             (after.vmm_calls.current - before.vmm_calls.current);
  if (calls != 0) {
    std::printf("FAILED: %lld allocator or VMM calls during the replays\n",
                static_cast<long long>(calls));
    ++failures_;
  }
  try {
    memlake::check_exclusive_group(alloc_, group);
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    ++failures_;
  }

  std::printf("graph_step on %s: %d buckets of %zu..%zu tokens x %zu words\n",
              alloc_.backend_name(), o_.buckets, o_.tokens, o_.tokens * buckets, o_.hidden);
  for (std::size_t k = 0; k < buckets; ++k)
    std::printf("  bucket %zu: pool of its own %8.1f MiB\n", k, alone[k] / kMiB);
  std::printf("  eager steps, memlake reserved peak  %8.1f MiB\n", eager_reserved / kMiB);
  std::printf("  separate pools                      %8.1f MiB\n", separate / kMiB);
  std::printf(
      "  exclusive group, shared chunks      %8.1f MiB (largest pool %.1f MiB: %.3fx; "
      "%.3fx of separate)\n",
      shared / kMiB, largest / kMiB, static_cast<double>(shared) / largest,
      static_cast<double>(shared) / separate);
#if defined(MEMLAKE_SAMPLE_KERNELS)
  if (o_.backend == "cuda") {
    std::vector<std::size_t> tokens;
    for (std::size_t k = 0; k < buckets; ++k) tokens.push_back(o_.tokens * (k + 1));
    const std::size_t nodes = graph_step::graph_memory_nodes_reserved(tokens, o_.hidden);
    std::printf("  cudaMallocAsync graph memory nodes  %8.1f MiB\n", nodes / kMiB);
  }
#endif
  if (o_.backend != "cuda") std::printf("  cudaMallocAsync graph memory nodes  (CUDA only)\n");
  std::printf("  replays %d, outputs checked %d, allocator calls during replays %lld\n", o_.replays,
              checked, static_cast<long long>(calls));
  if (static_cast<double>(shared) > 1.05 * static_cast<double>(largest)) {
    std::printf("FAILED: the group takes more than 1.05x its largest pool\n");
    ++failures_;
  }

  graphs.clear();
  for (std::size_t k = 0; k < buckets; ++k) give(inputs_[k], words(static_cast<int>(k)), s);
  give(grad_, o_.hidden, s);
  give(seed, 1, s);
  sync(s);
  sync(s2);
  alloc_.destroy_stream(s);
  alloc_.destroy_stream(s2);
  const std::string invariants = alloc_.check_invariants();
  if (!invariants.empty()) {
    std::printf("FAILED: invariants: %s\n", invariants.c_str());
    ++failures_;
  }
  std::printf("%s\n", failures_ == 0 ? "every check held" : "CHECKS FAILED");
  return failures_ == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  try {
    memlake::Config config = memlake::Config::parse("backend:" + o.backend);
    if (o.backend == "host") config.capacity = std::size_t{4} << 30;
    std::unique_ptr<memlake::Allocator> alloc;
    try {
      alloc = std::make_unique<memlake::Allocator>(config);
    } catch (const memlake::backend_error& e) {
      std::printf("graph_step: no %s backend here (%s)\n", o.backend.c_str(), e.what());
      return 77;
    }
    std::unique_ptr<graph_step::Work> work;
#if defined(MEMLAKE_SAMPLE_KERNELS)
    if (o.backend == "cuda") work = graph_step::cuda_work();
#endif
    if (o.backend == "host") work = graph_step::host_work(alloc->backend());
    if (!work) {
      std::printf("graph_step: built without nvcc, so without kernels for --backend cuda\n");
      return 77;
    }
    return Run(o, *alloc, *work).main();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graph_step: %s\n", e.what());
    return 1;
  }
}

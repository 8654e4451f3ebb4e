// The graph pools of one allocator: routing, lifetime, launches and stats
// (see graph_pools.hpp).
#include "graph/graph_pools.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "backend/backend_detail.hpp"
#include "common/stat_update.hpp"
#include "memlake/errors.hpp"

namespace memlake::graph {

namespace {

// Ids memlake makes: {0, n} like torch.cuda.graph_pool_handle(), counted
// from far above where PyTorch's own counter could reach.
constexpr std::uint64_t kIdBase = std::uint64_t{1} << 62;

std::string name(PoolId id) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "(%llu, %llu)", static_cast<unsigned long long>(id.first),
                static_cast<unsigned long long>(id.second));
  return buf;
}

std::string mib(std::size_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

GraphPools::GraphPools(Backend& backend, lake::ChunkPool& chunks, lake::Lake& lake,
                       StreamOrder& order, Stats& stats, ObserverList& observers,
                       const lake::LakeOptions& options, MisuseAction on_misuse)
    : backend_(backend),
      chunks_(chunks),
      lake_(lake),
      order_(order),
      stats_(stats),
      observers_(observers),
      options_(options),
      on_misuse_(on_misuse),
      client_(chunks.attach(this, /*hears_changes=*/false)) {}

// Pools still here at the allocator's end go without a synchronization: the
// caller is done with the device memory of this allocator.
GraphPools::~GraphPools() {
  pools_.clear();
  groups_.clear();
  chunks_.detach(client_);
}

void GraphPools::misuse(const std::string& message) const {
  ++stats_.misuse_errors.current;
  if (on_misuse_ == MisuseAction::abort) {
    std::fprintf(stderr, "memlake: fatal misuse: %s\n", message.c_str());
    std::abort();
  }
  throw memlake::misuse("memlake: " + message);
}

void GraphPools::notify(void (Observer::*event)(const PoolEvent&), const GraphPool& p) const {
  if (MEMLAKE_LIKELY(observers_.empty())) return;
  const GraphPoolStats s = p.stats();
  const PoolEvent e{p.id().first, p.id().second, s.group, s.reserved_bytes, s.live_bytes};
  observers_.each([&](Observer& o) { (o.*event)(e); });
}

// --- chunks -------------------------------------------------------------------------

// A new chunk, made against the allocator's capacity; when that is taken,
// the lake gives back what it caches first, as its own ladder would.
Status GraphPools::take_new(std::size_t size, lake::ChunkId* id, ChunkHandle* handle) {
  lake::ChunkId c = chunks_.create(size);
  if (c == lake::kNone) {
    order_.record_open_fences();
    lake_.fences_completed(order_.completed());
    lake_.reclaim();
    c = chunks_.create(size);
  }
  if (c == lake::kNone) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "graph pool: no new chunk of %zu bytes: %zu of %zu bytes of capacity are "
                  "reserved, and the lake had nothing to give back",
                  size, chunks_.reserved_bytes(), chunks_.capacity());
    return detail::fail(Status::out_of_memory, "%s", buf);
  }
  chunks_.take(c, client_);
  *id = c;
  *handle = chunks_[c].handle;
  gauge(stats_.graph_pool_bytes, static_cast<std::int64_t>(size));
  return Status::ok;
}

void GraphPools::give_back(lake::ChunkId id) {
  gauge(stats_.graph_pool_bytes, -static_cast<std::int64_t>(chunks_.size(id)));
  chunks_.give_back(id);
}

// --- ids and groups -------------------------------------------------------------

PoolId GraphPools::new_pool_id(ExclusiveGroupId group) {
  if (group != 0 && groups_.count(group) == 0)
    misuse("exclusive_pool_handle: unknown exclusive group " + std::to_string(group));
  const PoolId id{0, kIdBase + ++next_id_};
  declared_.emplace(id, group);
  return id;
}

ExclusiveGroupId GraphPools::new_group(bool check) {
  const ExclusiveGroupId id = kIdBase + ++next_id_;
  std::shared_ptr<OverlapCheck> c;
  if (check) {
    c = std::make_shared<OverlapCheck>();
    checks_.push_back(c);
  }
  groups_.emplace(id, std::make_shared<ExclusiveGroup>(id, source(), backend_, std::move(c)));
  return id;
}

std::shared_ptr<ExclusiveGroup> GraphPools::group_for(PoolId id) {
  auto d = declared_.find(id);
  if (d != declared_.end() && d->second != 0) return groups_.at(d->second);
  return std::make_shared<ExclusiveGroup>(0, source(), backend_, nullptr);
}

GraphPool& GraphPools::pool(PoolId id, const char* call) {
  auto it = pools_.find(id);
  if (it == pools_.end())
    misuse(std::string(call) + ": graph pool " + name(id) +
           " is not known (never allocated to, or released already)");
  return *it->second;
}

// --- routing --------------------------------------------------------------------

void GraphPools::set_routing() {
  order_.set_captures_underway(!routes_.empty());
}

void GraphPools::begin_allocate(PoolId id, StreamFilter filter) {
  if (id == PoolId{}) misuse("begin_allocate_to_pool: pool (0, 0) names no pool");
  if (!filter) misuse("begin_allocate_to_pool: no stream filter given");
  // Before the capture begins: the last moment a synchronization is legal.
  release_pending();
  routes_.reserve(routes_.size() + 1);
  if (gone_.count(id))
    misuse("begin_allocate_to_pool: graph pool " + name(id) +
           " was released; a new capture needs a new pool id");
  auto it = pools_.find(id);
  if (it == pools_.end()) {
    auto p = std::make_unique<GraphPool>(id, group_for(id), backend_, options_, chunks_.capacity());
    it = pools_.emplace(id, std::move(p)).first;
    declared_.erase(id);
    gauge(stats_.graph_pools, 1);
  } else if (it->second->released || it->second->users == 0) {
    misuse("begin_allocate_to_pool: graph pool " + name(id) +
           " was released; a new capture needs a new pool id");
  }
  GraphPool& p = *it->second;
  ++p.users;
  ++p.allocating;
  ++p.captures;
  routes_.push_back(Route{id, &p, std::move(filter), {}});
  set_routing();
  // The streams' open fences are recorded now (with routing on, no event is
  // queried meanwhile), so that memory freed on the stream about to capture
  // can still be given to other streams during the capture.
  order_.record_open_fences();
  notify(&Observer::on_pool_begin, p);
}

void GraphPools::end_allocate(PoolId id) {
  auto r = std::find_if(routes_.begin(), routes_.end(), [&](const Route& x) { return x.id == id; });
  if (r == routes_.end())
    misuse("end_allocate_to_pool: no allocation to graph pool " + name(id) +
           " is under way (end without begin_allocate_to_pool)");
  GraphPool& p = *r->pool;
  // A capture invalidated by now ends without a graph: nothing will release
  // its use of the pool (PyTorch does not), so it is released here.
  bool failed = false;
  for (StreamHandle s : r->streams) {
    CaptureState state = CaptureState::none;
    std::uint64_t capture = 0;
    if (backend_.stream_capture_info(s, &state, &capture) == Status::ok &&
        state == CaptureState::invalidated)
      failed = true;
  }
  routes_.erase(r);
  --p.allocating;
  set_routing();
  notify(&Observer::on_pool_end, p);
  if (failed) {
    ++stats_.graph_captures_abandoned.current;
    ++abandoned_[id];
    if (--p.users == 0) retire(id);
    return;
  }
  if (p.group().id != 0) keep_captured_blocks(p);
}

// A block still live when its capture ends (a graph's output, a library's
// cache) is read after the graph ran, or by other graphs and eager work:
// on chunks the group shares, the group's other graphs would overwrite it.
// So its chunks are replaced by chunks of the pool's own, at the same
// addresses. The graph has not run yet (its capture only just ended), so
// nothing of value is in them; earlier graphs of the same pool may run on
// those addresses, so with any the device is synchronized first, which a
// capture under way elsewhere forbids.
void GraphPools::keep_captured_blocks(GraphPool& p) {
  std::vector<std::pair<DevicePtr, const Block*>> kept;
  for (const auto& [ptr, b] : blocks_)
    if (b.pool == &p && p.shares_chunks_under(ptr, b.size, b.stream)) kept.emplace_back(ptr, &b);
  if (kept.empty()) return;
  std::size_t bytes = 0;
  for (const auto& [ptr, b] : kept) bytes += b->size;
  if (p.captures > 1) {
    if (!routes_.empty())
      misuse("end_allocate_to_pool: exclusive graph pool " + name(p.id()) + " keeps " +
             std::to_string(kept.size()) + " block(s) (" + mib(bytes) +
             ") made in this capture, which need chunks of their own, and earlier graphs of "
             "this pool may be running on those addresses; giving them chunks needs a device "
             "synchronization, which another capture under way forbids. End the other capture "
             "first, or free what this capture made before it ends");
    if (backend_.device_synchronize() != Status::ok)
      throw backend_error("memlake: end_allocate_to_pool: device_synchronize failed: " +
                          backend_.last_error());
  }
  std::size_t chunks = 0;
  for (const auto& [ptr, b] : kept) {
    if (p.keep(ptr, b->size, b->stream, &chunks) == Status::ok) continue;
    const std::string why = backend_.last_error();
    stats_.graph_kept_chunks.current += static_cast<std::int64_t>(chunks);
    throw out_of_memory("memlake: end_allocate_to_pool: exclusive graph pool " + name(p.id()) +
                            " keeps " + std::to_string(kept.size()) + " block(s) (" + mib(bytes) +
                            ") after its capture, which need chunks of their own (the group's "
                            "other graphs overwrite shared ones), and none could be made: " +
                            why,
                        b->size);
  }
  stats_.graph_kept_chunks.current += static_cast<std::int64_t>(chunks);
}

void* GraphPools::allocate(std::size_t bytes, StreamHandle stream) {
  for (Route& r : routes_) {
    if (!r.filter(stream)) continue;
    GraphPool& p = *r.pool;
    if (std::find(r.streams.begin(), r.streams.end(), stream) == r.streams.end())
      r.streams.push_back(stream);
    blocks_.reserve(blocks_.size() + 1);
    const lake::Placed placed = p.allocate(bytes, stream);
    if (!placed) {
      ++stats_.ooms.current;
      if (MEMLAKE_UNLIKELY(!observers_.empty()))
        observers_.each([&](Observer& o) { o.on_oom(bytes, stream); });
      const GraphPoolStats s = p.stats();
      throw out_of_memory("memlake: out of memory in graph pool " + name(p.id()) + ": requested " +
                              std::to_string(bytes) + " bytes; the pool holds " +
                              mib(s.reserved_bytes) + ", live " + mib(s.live_bytes) +
                              ", capacity " + mib(chunks_.capacity()) + "; " + p.last_refusal(),
                          bytes);
    }
    return enter(p, placed, bytes, stream);
  }
  CaptureState state = CaptureState::none;
  std::uint64_t capture = 0;
  if (backend_.stream_capture_info(stream, &state, &capture) == Status::ok &&
      state != CaptureState::none) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "allocation of %zu bytes on stream %p, which is capturing a CUDA graph, but no "
                  "graph pool allocates on it: its memory could be handed out again while the "
                  "graph replays into it (begin_allocate_to_pool with a filter that takes this "
                  "stream; CapturedGraph and torch.cuda.graph do)",
                  bytes, stream);
    misuse(buf);
  }
  return nullptr;
}

void* GraphPools::enter(GraphPool& p, const lake::Placed& placed, std::size_t bytes,
                        StreamHandle stream) {
  blocks_.emplace(placed.ptr, Block{&p, placed.size, bytes, stream, false});
  ++stats_.graph_allocs.current;
  gauge(stats_.graph_pool_live_bytes, static_cast<std::int64_t>(placed.size));
  count_block(stats_, 1, placed.size, bytes);  // graph_* are the pools' part of the totals
  refresh_mapped();
  void* ptr = reinterpret_cast<void*>(placed.ptr);
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) {
      o.on_alloc({ptr, bytes, placed.size, stream, placed.rung, 0});
    });
  return ptr;
}

bool GraphPools::deallocate(DevicePtr ptr, std::size_t bytes, const StreamHandle* on) {
  auto it = blocks_.find(ptr);
  if (it == blocks_.end()) return false;
  const Block b = it->second;
  const StreamHandle stream = on != nullptr ? *on : b.stream;
  if (bytes != 0 && bytes != b.requested) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "size mismatch freeing graph pool block %#zx: %zu bytes given, the block has %zu",
                  static_cast<std::size_t>(ptr), bytes, b.requested);
    misuse(buf);
  }
  blocks_.erase(it);
  b.pool->free(ptr, b.size, b.stream, stream, b.shared);
  gauge(stats_.graph_pool_live_bytes, -static_cast<std::int64_t>(b.size));
  count_block(stats_, -1, b.size, b.requested);
  if (MEMLAKE_UNLIKELY(!observers_.empty()))
    observers_.each([&](Observer& o) {
      o.on_free({reinterpret_cast<void*>(ptr), b.requested, stream});
    });
  // The last block of a released pool: its memory goes at the next
  // synchronization point (free never waits for the device).
  if (b.pool->released && b.pool->live_blocks() == 0) pending_.push_back(b.pool->id());
  return true;
}

bool GraphPools::record_stream(DevicePtr ptr, StreamHandle stream) {
  auto it = blocks_.find(ptr);
  if (it == blocks_.end()) return false;
  if (stream != it->second.stream) it->second.shared = true;
  return true;
}

BlockInfo GraphPools::info(DevicePtr ptr, const Block& b) {
  return BlockInfo{reinterpret_cast<void*>(ptr), b.requested, b.stream};
}

std::optional<BlockInfo> GraphPools::block_info(DevicePtr ptr) const {
  auto it = blocks_.find(ptr);
  if (it == blocks_.end()) return std::nullopt;
  return info(ptr, it->second);
}

std::vector<BlockInfo> GraphPools::all_live_blocks() const {
  std::vector<BlockInfo> out;
  out.reserve(blocks_.size());
  for (const auto& [ptr, b] : blocks_) out.push_back(info(ptr, b));
  return out;
}

// --- checkpoints ------------------------------------------------------------------

std::vector<PoolBlock> GraphPools::live_blocks(PoolId id) {
  GraphPool& p = pool(id, "pool_blocks");
  std::vector<PoolBlock> out;
  out.reserve(p.live_blocks());
  for (const auto& [ptr, b] : blocks_)
    if (b.pool == &p) out.push_back(info(ptr, b));
  std::sort(out.begin(), out.end(),
            [](const PoolBlock& x, const PoolBlock& y) { return x.ptr < y.ptr; });
  return out;
}

std::size_t GraphPools::place_back(GraphPool& p, const std::vector<PoolBlock>& blocks) {
  blocks_.reserve(blocks_.size() + blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const PoolBlock& b = blocks[i];
    const auto ptr = reinterpret_cast<DevicePtr>(b.ptr);
    const lake::Placed placed =
        blocks_.count(ptr) ? lake::Placed{} : p.allocate_at(ptr, b.size, b.stream);
    if (!placed) return i;
    enter(p, placed, b.size, b.stream);
  }
  return blocks.size();
}

// What was live goes first (freed on its own stream, so its memory is the
// pool's again at once), then the checkpoint's blocks go back where they
// were. Either every block goes back or, on the first that cannot, the ones
// placed are freed and what was live is placed back: the pool is as it was.
std::vector<void*> GraphPools::restore(PoolId id, const std::vector<PoolBlock>& blocks,
                                       std::size_t most_freed) {
  GraphPool& p = pool(id, "restore_pool");
  if (p.released)
    misuse("restore_pool: graph pool " + name(id) +
           " was released; its memory goes with its last block");
  if (p.group().id != 0)
    misuse("restore_pool: graph pool " + name(id) +
           " belongs to an exclusive group, whose chunks its other graphs overwrite: "
           "checkpoints are for pools of their own");
  const std::vector<PoolBlock> live = live_blocks(id);
  if (live.size() > most_freed)
    misuse("restore_pool: room for " + std::to_string(most_freed) +
           " freed pointers, and graph pool " + name(id) + " has " + std::to_string(live.size()) +
           " live blocks");
  for (const PoolBlock& b : live)
    if (blocks_.at(reinterpret_cast<DevicePtr>(b.ptr)).shared) {
      char buf[240];
      std::snprintf(buf, sizeof buf,
                    "restore_pool: block %p of graph pool %s was used on another stream "
                    "(record_stream): its memory is held until the pool is released, so the "
                    "pool cannot be put back",
                    b.ptr, name(id).c_str());
      misuse(buf);
    }
  for (const PoolBlock& b : live) deallocate(reinterpret_cast<DevicePtr>(b.ptr), 0, &b.stream);
  const std::size_t placed = place_back(p, blocks);
  if (placed == blocks.size()) {
    std::vector<void*> freed;
    freed.reserve(live.size());
    for (const PoolBlock& b : live) freed.push_back(b.ptr);
    return freed;
  }
  for (std::size_t i = 0; i < placed; ++i)
    deallocate(reinterpret_cast<DevicePtr>(blocks[i].ptr), 0, &blocks[i].stream);
  if (place_back(p, live) != live.size())
    throw std::logic_error("memlake: restore_pool: the live blocks of graph pool " + name(id) +
                           " could not be placed back");
  const PoolBlock& b = blocks[placed];
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "restore_pool: block %p (%zu bytes, stream %p) cannot go back to graph pool %s: "
                "its bytes are not free in the pool's memory of that stream once its live blocks "
                "are freed (another block of the list holds them, or they were never the "
                "pool's); the pool is as it was",
                b.ptr, b.size, b.stream, name(id).c_str());
  misuse(buf);
}

// --- release ----------------------------------------------------------------------

void GraphPools::release(PoolId id) {
  auto it = pools_.find(id);
  if (it == pools_.end() || it->second->users == 0) {
    // A failed capture released this use already.
    auto a = abandoned_.find(id);
    if (a != abandoned_.end()) {
      if (--a->second == 0) abandoned_.erase(a);
      return;
    }
  }
  if (gone_.count(id)) misuse("release_pool: graph pool " + name(id) + " was released already");
  GraphPool& p = pool(id, "release_pool");
  if (p.users == 0) misuse("release_pool: graph pool " + name(id) + " was released already");
  if (p.allocating > 0)
    misuse("release_pool: graph pool " + name(id) +
           " is being allocated to (between begin_ and end_allocate_to_pool); end that first");
  if (p.group().check) check_overlaps(p.group());
  if (--p.users == 0) retire(id);
  release_pending();
}

void GraphPools::retire(PoolId id) {
  GraphPool& p = *pools_.at(id);
  p.released = true;
  notify(&Observer::on_pool_release, p);
  if (p.live_blocks() == 0) pending_.push_back(id);
}

void GraphPools::release_pending() {
  if (pending_.empty() || !routes_.empty()) return;
  // A graph destroyed a moment ago may still run on the pool's memory.
  if (backend_.device_synchronize() != Status::ok)
    throw backend_error("memlake: releasing graph pools: device_synchronize failed: " +
                        backend_.last_error());
  std::vector<PoolId> ready;
  ready.swap(pending_);
  for (PoolId id : ready)
    if (pools_.count(id)) destroy(id);
}

void GraphPools::destroy(PoolId id) {
  auto it = pools_.find(id);
  it->second->users = 0;
  gone_.insert(id);
  pools_.erase(it);
  gauge(stats_.graph_pools, -1);
  refresh_mapped();
}

void GraphPools::refresh_mapped() {
  std::size_t mapped = 0;
  for (const auto& [id, p] : pools_) mapped += p->mapped_bytes();
  gauge(stats_.graph_pool_mapped_bytes,
        static_cast<std::int64_t>(mapped) - static_cast<std::int64_t>(mapped_));
  mapped_ = mapped;
}

// --- exclusive groups -----------------------------------------------------------

void GraphPools::check_overlaps(ExclusiveGroup& group) {
  if (!group.check) return;
  std::string what;
  const std::uint64_t fresh = group.check->take_unreported(&what);
  if (fresh == 0) return;
  stats_.graph_exclusive_overlaps.current += static_cast<std::int64_t>(fresh);
  misuse("graphs of exclusive group " + std::to_string(group.id) + " ran at the same time (" +
         std::to_string(fresh) + " time(s) since the last check; " + what +
         "): the pools of a group share physical memory, so these graphs computed on each "
         "other's buffers. Launch them with CapturedGraph::launch or launch_exclusive, which "
         "order them on the GPU");
}

void GraphPools::check_group(ExclusiveGroupId id) {
  auto g = groups_.find(id);
  if (g == groups_.end()) misuse("check_exclusive_group: unknown group " + std::to_string(id));
  check_overlaps(*g->second);
}

void GraphPools::launch(PoolId id, GraphHandle graph, StreamHandle stream) {
  GraphPool& p = pool(id, "launch_exclusive");
  ExclusiveGroup& g = p.group();
  if (g.id == 0) {
    if (backend_.graph_launch(graph, stream) != Status::ok)
      throw backend_error("memlake: graph_launch failed: " + backend_.last_error());
    return;
  }
  check_overlaps(g);
  g.launch(graph, stream);
}

OverlapCheck::Marker* GraphPools::marker(PoolId id) {
  GraphPool& p = pool(id, "capture");
  return p.group().check ? p.group().check->marker(id) : nullptr;
}

// --- stats ------------------------------------------------------------------------

GraphPoolStats GraphPools::pool_stats(PoolId id) const {
  auto it = pools_.find(id);
  if (it == pools_.end()) return GraphPoolStats{};
  return it->second->stats();
}

std::size_t GraphPools::group_bytes(ExclusiveGroupId id) const {
  auto g = groups_.find(id);
  return g == groups_.end() ? 0 : g->second->share.bytes();
}

std::string GraphPools::check_invariants() const {
  std::string err;
  std::size_t live = 0, physical = 0;
  for (const auto& [ptr, b] : blocks_) live += b.size;
  for (const auto& [id, p] : pools_) {
    err += p->check_invariants();
    if (p->group().id == 0) physical += p->group().share.bytes();
    err += p->group().share.check_invariants();
  }
  for (const auto& [id, g] : groups_) physical += g->share.bytes();
  if (static_cast<std::int64_t>(live) != stats_.graph_pool_live_bytes.current)
    err += "graph pool live bytes disagree with the stats; ";
  if (static_cast<std::int64_t>(physical) != stats_.graph_pool_bytes.current)
    err += "graph pool bytes disagree with the stats; ";
  return err;
}

}  // namespace memlake::graph

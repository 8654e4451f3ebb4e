// Process sharing on the HostBackend: a block's chunks exported as file
// descriptors are mapped by another process (this binary again), which sees
// the exporter's bytes and whose writes the exporter sees; an import keeps
// the memory after the exporter released it; misuse and bad descriptors are
// reported.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backend/host/host_backend.hpp"
#include "memlake/allocator.hpp"
#include "memlake/errors.hpp"
#include "memlake/sharing.hpp"
#include "spawn_self.hpp"

namespace memlake {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

Config shareable_host() {
  Config c = Config::parse("backend:host,capacity:256M,max_chunk:2M,worker:off");
  c.shareable = true;
  return c;
}

// "size,offset,expect,write,fd:size,fd:size,..."
std::string describe(const SharedBlock& b, int expect, int write) {
  std::string s;
  auto add = [&](std::size_t v, char after) {
    s += std::to_string(v);
    s += after;
  };
  add(b.size, ',');
  add(b.offset, ',');
  add(static_cast<std::size_t>(expect), ',');
  add(static_cast<std::size_t>(write), ',');
  for (const SharedBlock::Chunk& c : b.chunks) {
    add(static_cast<std::size_t>(c.fd), ':');
    add(c.size, ',');
  }
  s.pop_back();
  return s;
}

SharedBlock parse(const std::string& text, int* expect, int* write) {
  SharedBlock b;
  std::size_t pos = 0;
  auto next = [&] {
    const std::size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma - pos);
    pos = comma == std::string::npos ? text.size() : comma + 1;
    return item;
  };
  b.size = std::stoull(next());
  b.offset = std::stoull(next());
  *expect = std::stoi(next());
  *write = std::stoi(next());
  while (pos < text.size()) {
    const std::string item = next();
    const std::size_t colon = item.find(':');
    b.chunks.push_back({std::stoi(item.substr(0, colon)), std::stoull(item.substr(colon + 1))});
  }
  return b;
}

// Runs only as the other process: maps the block, checks every byte, writes
// its own.
TEST(Sharing, ImporterProcess) {
  const char* text = std::getenv("MEMLAKE_TEST_SHARED");
  if (!text) GTEST_SKIP() << "runs only as the importing process";
  int expect = 0, write = 0;
  const SharedBlock b = parse(text, &expect, &write);
  ImportedBlock imported(b, shareable_host());
  ASSERT_EQ(imported.size(), b.size);
  const auto* p = static_cast<const unsigned char*>(imported.data());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < b.size; ++i) wrong += p[i] != expect;
  ASSERT_EQ(wrong, 0u);
  std::memset(imported.data(), write, b.size);
}

void share_with_another_process(Allocator& a, unsigned char* p, std::size_t n, int before,
                                int after) {
  SharedBlock s = a.share(p);
  EXPECT_EQ(s.size, n);
  for (const SharedBlock::Chunk& c : s.chunks) test::keep_across_exec(c.fd);
  EXPECT_EQ(test::run_self("Sharing.ImporterProcess",
                           {"MEMLAKE_TEST_SHARED=" + describe(s, before, after)}),
            0);
  s.close_descriptors();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += p[i] != after;
  EXPECT_EQ(wrong, 0u) << "the other process's writes are not visible here";
}

TEST(Sharing, ABlockIsMappedInAnotherProcessWithItsBytes) {
  Allocator a(shareable_host());
  // Two chunks from offset 0, then a small block in the second chunk's tail.
  const std::size_t n1 = 3 * MiB - 4096, n2 = 512 * 1024;
  auto* p1 = static_cast<unsigned char*>(a.allocate(n1));
  auto* p2 = static_cast<unsigned char*>(a.allocate(n2));
  ASSERT_EQ(p2, p1 + n1) << "the small block shares the tail chunk";
  std::memset(p1, 0x41, n1);
  std::memset(p2, 0x42, n2);
  const SharedBlock tail = a.share(p2);
  EXPECT_EQ(tail.chunks.size(), 1u);
  EXPECT_EQ(tail.offset, 1 * MiB - 4096);
  SharedBlock(tail).close_descriptors();

  share_with_another_process(a, p1, n1, 0x41, 0x51);
  share_with_another_process(a, p2, n2, 0x42, 0x52);
  EXPECT_EQ(p1[n1 - 1], 0x51);
  EXPECT_EQ(p2[0], 0x52) << "each import touched its own block only";
  a.deallocate(p1, n1);
  a.deallocate(p2, n2);
  EXPECT_EQ(a.check_invariants(), "");
}

// An import keeps the memory alive on its own: the exporter frees the block
// and releases every chunk, and the bytes are still there.
TEST(Sharing, AnImportOutlivesTheExportersChunks) {
  auto host = std::make_unique<HostBackend>(HostBackendOptions{});
  HostBackend* h = host.get();
  Allocator a(shareable_host(), std::move(host));
  const std::size_t n = 6 * MiB;
  auto* p = static_cast<unsigned char*>(a.allocate(n));
  std::memset(p, 0x3C, n);
  SharedBlock s = a.share(p);
  ImportedBlock imported(s, shareable_host());
  s.close_descriptors();
  a.deallocate(p, n);
  a.empty_cache();
  EXPECT_EQ(h->live_chunks(), 0u);
  const auto* q = static_cast<const unsigned char*>(imported.data());
  EXPECT_EQ(q[0], 0x3C);
  EXPECT_EQ(q[n - 1], 0x3C);
}

TEST(Sharing, MisuseAndBadDescriptorsAreReported) {
  Allocator plain(Config::parse("backend:host,capacity:64M,worker:off"));
  void* p = plain.allocate(MiB);
  try {
    plain.share(p);
    ADD_FAILURE() << "share without shareable:true";
  } catch (const misuse& e) {
    EXPECT_NE(std::string(e.what()).find("shareable:true"), std::string::npos) << e.what();
  }
  plain.deallocate(p, MiB);

  Allocator a(shareable_host());
  int local = 0;
  EXPECT_THROW(a.share(&local), misuse);
  void* q = a.allocate(MiB);
  SharedBlock s = a.share(q);
  s.close_descriptors();
  for (SharedBlock::Chunk& c : s.chunks) c.fd = 1000000;  // not an open descriptor
  try {
    ImportedBlock bad(s, shareable_host());
    ADD_FAILURE() << "a closed descriptor was imported";
  } catch (const backend_error& e) {
    EXPECT_NE(std::string(e.what()).find("import failed"), std::string::npos) << e.what();
  }
  SharedBlock empty;
  EXPECT_THROW(ImportedBlock(empty, shareable_host()), misuse);
  a.deallocate(q, MiB);
}

}  // namespace
}  // namespace memlake

// Machine limits and the process-wide ledgers (see process_limits.hpp). Files
// are read with open/read into stack buffers: the count of mappings is
// wanted precisely when the heap may be unable to grow.
#include "backend/process_limits.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace memlake {

namespace {

constexpr std::size_t kDefaultMaxMapCount = 65530;  // the kernel's DEFAULT_MAX_MAP_COUNT
constexpr std::size_t kDefaultNofile = 1024;
// x86-64 and AArch64 with 4-level page tables: 47 bits of user addresses.
constexpr std::size_t kUserAddressSpace = std::size_t{1} << 47;

// Calls `line(text, length)` for every line of `path`; false when the file
// cannot be opened.
template <typename Line>
bool each_line(const char* path, Line line) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  char pending[256];  // the start of a line cut by the buffer's end (long lines are cut)
  std::size_t held = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const char* p = buf;
    const char* end = buf + n;
    while (p < end) {
      const char* nl =
          static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
      const std::size_t len = static_cast<std::size_t>((nl ? nl : end) - p);
      const std::size_t take = std::min(len, sizeof pending - 1 - held);
      std::memcpy(pending + held, p, take);
      held += take;
      if (!nl) break;
      pending[held] = '\0';
      line(pending, held);
      held = 0;
      p = nl + 1;
    }
  }
  if (held != 0) {
    pending[held] = '\0';
    line(pending, held);
  }
  ::close(fd);
  return true;
}

std::size_t read_number(const char* path, std::size_t fallback) {
  std::size_t value = fallback;
  each_line(path, [&](const char* text, std::size_t) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (end != text) value = static_cast<std::size_t>(v);
  });
  return value;
}

std::size_t open_descriptors() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  std::size_t n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n > 0 ? n - 1 : 0;  // the directory's own descriptor
}

std::size_t virtual_bytes_in_use() {
  std::size_t kib = 0;
  each_line("/proc/self/status", [&](const char* text, std::size_t) {
    if (std::strncmp(text, "VmSize:", 7) == 0) kib = std::strtoull(text + 7, nullptr, 10);
  });
  return kib * 1024;
}

std::size_t soft_limit(int resource, std::size_t unlimited, std::size_t fallback) {
  rlimit r{};
  if (::getrlimit(resource, &r) != 0) return fallback;
  if (r.rlim_cur == RLIM_INFINITY) return unlimited;
  return static_cast<std::size_t>(r.rlim_cur);
}

// What is left of `limit` after `in_use` and a headroom of an eighth of the
// limit (at least `min_headroom`) for the rest of the process.
std::size_t budget(std::size_t limit, std::size_t in_use, std::size_t min_headroom) {
  const std::size_t headroom = std::max(min_headroom, limit / 8);
  return limit > in_use + headroom ? limit - in_use - headroom : 0;
}

ProcessLimits read_limits() {
  ProcessLimits m;
  m.max_map_count = read_number("/proc/sys/vm/max_map_count", kDefaultMaxMapCount);
  m.maps_in_use = process_maps_in_use();
  m.mapping_budget = budget(m.max_map_count, m.maps_in_use, 1024);
  m.nofile_limit = soft_limit(RLIMIT_NOFILE, ~std::size_t{0}, kDefaultNofile);
  m.descriptors_in_use = open_descriptors();
  m.descriptor_budget = budget(m.nofile_limit, m.descriptors_in_use, 64);
  // Without RLIMIT_AS the address space is the bound, and mmap says when it
  // is gone (sanitizers' shadow alone can take most of it, so no share of it
  // is set aside here).
  const std::size_t as = soft_limit(RLIMIT_AS, 0, 0);
  m.address_space = as != 0 ? as : kUserAddressSpace;
  m.va_budget =
      as != 0 ? budget(as, virtual_bytes_in_use(), std::size_t{1} << 30) : ~std::size_t{0};
  return m;
}

}  // namespace

const ProcessLimits& process_limits() {
  static const ProcessLimits limits = read_limits();
  return limits;
}

std::size_t process_maps_in_use() {
  std::size_t n = 0;
  each_line("/proc/self/maps", [&](const char*, std::size_t) { ++n; });
  return n;
}

bool ProcessLedger::claim(std::size_t n, std::size_t budget) {
  std::size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (n > budget || used > budget - n) return false;
  } while (!used_.compare_exchange_weak(used, used + n, std::memory_order_relaxed));
  return true;
}

ProcessLedger& host_mapping_ledger() {
  static ProcessLedger ledger;
  return ledger;
}

ProcessLedger& host_descriptor_ledger() {
  static ProcessLedger ledger;
  return ledger;
}

ProcessLedger& host_va_ledger() {
  static ProcessLedger ledger;
  return ledger;
}

}  // namespace memlake

// The statistics of the C API: memlake_get_stats(), memlake_get_stat_values(),
// memlake_largest_available() and the list of names,
// kinds and help texts, all made from MEMLAKE_STAT_FIELDS.
#include "c_api_stats.hpp"

#include <string>

#include "c_api_table.hpp"
#include "memlake/errors.hpp"

namespace memlake::c_api {

namespace {

struct FieldText {
  const char* name;
  const char* kind;
  const char* help;
};

constexpr FieldText kFields[] = {
#define MEMLAKE_FIELD_TEXT(name, kind, help) {#name, #kind, help},
    MEMLAKE_STAT_FIELDS(MEMLAKE_FIELD_TEXT)
#undef MEMLAKE_FIELD_TEXT
};
constexpr int kFieldCount = static_cast<int>(sizeof kFields / sizeof kFields[0]);
static_assert(kFieldCount == MEMLAKE_STAT_COUNT);

const FieldText* field(int index) {
  return index >= 0 && index < kFieldCount ? &kFields[index] : nullptr;
}

void check_stats_struct(const memlake_stats* out) {
  if (out == nullptr) throw misuse("memlake_get_stats: out is NULL");
  if (out->version != MEMLAKE_STATS_VERSION) {
    throw misuse("memlake_get_stats: stats version " + std::to_string(out->version) +
                 " is not supported (this library has version " +
                 std::to_string(MEMLAKE_STATS_VERSION) + ")");
  }
  if (out->size < sizeof(memlake_stats)) {
    throw misuse("memlake_get_stats: size " + std::to_string(out->size) +
                 " is smaller than memlake_stats version " + std::to_string(MEMLAKE_STATS_VERSION) +
                 " (" + std::to_string(sizeof(memlake_stats)) + " bytes)");
  }
}

}  // namespace

void fill_c_stats(const Stats& stats, memlake_stats* out) {
#define MEMLAKE_FILL_C_STAT(name, kind, help) \
  out->name.current = stats.name.current;     \
  out->name.peak = stats.name.peak;
  MEMLAKE_STAT_FIELDS(MEMLAKE_FILL_C_STAT)
#undef MEMLAKE_FILL_C_STAT
}

}  // namespace memlake::c_api

using namespace memlake;
using namespace memlake::c_api;

extern "C" {

int memlake_get_stats(int device, memlake_stats* out) {
  return guarded(-1, [&] {
    check_open();
    check_device("memlake_get_stats", device);
    check_stats_struct(out);
    const Allocator* a = existing(device);
    fill_c_stats(a != nullptr ? a->stats() : Stats{}, out);
    return 0;
  });
}

int memlake_get_stat_values(int device, memlake_stat_value* out, int count) {
  return guarded(-1, [&] {
    check_open();
    check_device("memlake_get_stat_values", device);
    if (count < 0) throw misuse("memlake_get_stat_values: count is negative");
    if (out == nullptr && count > 0) throw misuse("memlake_get_stat_values: out is NULL");
    const Allocator* a = existing(device);
    const Stats s = a != nullptr ? a->stats() : Stats{};
    int i = 0;
#define MEMLAKE_STAT_VALUE(name, kind, help)             \
  if (i < count) out[i] = {s.name.current, s.name.peak}; \
  ++i;
    MEMLAKE_STAT_FIELDS(MEMLAKE_STAT_VALUE)
#undef MEMLAKE_STAT_VALUE
    return count < kFieldCount ? count : kFieldCount;
  });
}

int memlake_largest_available(int device, size_t* out) {
  return guarded(-1, [&] {
    check_open();
    check_device("memlake_largest_available", device);
    if (out == nullptr) throw misuse("memlake_largest_available: out is NULL");
    *out = get_or_create(device).largest_available();
    return 0;
  });
}

int memlake_stat_count(void) {
  return kFieldCount;
}

const char* memlake_stat_name(int index) {
  const FieldText* f = field(index);
  return f != nullptr ? f->name : nullptr;
}

const char* memlake_stat_kind(int index) {
  const FieldText* f = field(index);
  return f != nullptr ? f->kind : nullptr;
}

const char* memlake_stat_help(int index) {
  const FieldText* f = field(index);
  return f != nullptr ? f->help : nullptr;
}

}  // extern "C"

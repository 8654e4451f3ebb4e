// The statistics of the C API: memlake_get_stats() and the list of names,
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

/* memlake.h compiled as C: the layout of memlake_stats as a C compiler sees
 * it, for test_c_stats.cpp to compare with what the C++ compiler sees. */
#include <stddef.h>

#include "memlake/memlake.h"

size_t memlake_test_c_stats_size(void);
size_t memlake_test_c_stats_offset(int index);

size_t memlake_test_c_stats_size(void) {
  return sizeof(memlake_stats);
}

/* The offset of statistic `index` (MEMLAKE_STAT_FIELDS order) in
 * memlake_stats; (size_t)-1 past the end. */
size_t memlake_test_c_stats_offset(int index) {
  static const size_t offsets[] = {
#define MEMLAKE_TEST_C_OFFSET(name, kind, help) offsetof(memlake_stats, name),
      MEMLAKE_STAT_FIELDS(MEMLAKE_TEST_C_OFFSET)
#undef MEMLAKE_TEST_C_OFFSET
  };
  if (index < 0 || index >= (int)(sizeof offsets / sizeof offsets[0])) return (size_t)-1;
  return offsets[index];
}

/* memlake's C API from an installed tree, on the host backend: allocate,
 * write, read back, check the stats, free. */
#define _POSIX_C_SOURCE 200809L
#include <memlake/memlake.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int stats_of(int device, memlake_stats* s) {
  memset(s, 0, sizeof *s);
  s->version = MEMLAKE_STATS_VERSION;
  s->size = sizeof *s;
  if (memlake_get_stats(device, s) != 0) {
    fprintf(stderr, "memlake_get_stats: %s\n", memlake_last_error());
    return -1;
  }
  return 0;
}

int main(void) {
  const size_t n = (size_t)3 << 20;
  unsigned char* p;
  memlake_stats s;
  size_t i;

  /* Before the first call: the device's allocator is made from it. */
  setenv("MEMLAKE_CONF", "backend:host,capacity:64M", 1);
  p = memlake_malloc(n, 0, NULL);
  if (p == NULL) {
    fprintf(stderr, "memlake_malloc: %s\n", memlake_last_error());
    return 1;
  }
  for (i = 0; i < n; ++i) p[i] = (unsigned char)(i * 7 + 3);
  for (i = 0; i < n; ++i) {
    if (p[i] != (unsigned char)(i * 7 + 3)) {
      fprintf(stderr, "byte %zu reads back %u\n", i, (unsigned)p[i]);
      return 1;
    }
  }
  if (stats_of(0, &s) != 0) return 1;
  if (s.requested_bytes.current != (int64_t)n || s.allocs.current != 1 ||
      s.reserved_bytes.current < (int64_t)n) {
    fprintf(stderr, "stats: requested %lld, allocs %lld, reserved %lld\n",
            (long long)s.requested_bytes.current, (long long)s.allocs.current,
            (long long)s.reserved_bytes.current);
    return 1;
  }
  if (memlake_malloc((size_t)1 << 30, 0, NULL) != NULL ||
      strstr(memlake_last_error(), "out of memory") == NULL) {
    fprintf(stderr, "1 GiB from a 64 MiB allocator: '%s'\n", memlake_last_error());
    return 1;
  }
  memlake_free(p, n, 0, NULL);
  if (memlake_last_error()[0] != '\0') {
    fprintf(stderr, "memlake_free: %s\n", memlake_last_error());
    return 1;
  }
  if (stats_of(0, &s) != 0) return 1;
  if (s.requested_bytes.current != 0 || s.requested_bytes.peak != (int64_t)n ||
      s.frees.current != 1) {
    fprintf(stderr, "stats after free: requested %lld (peak %lld), frees %lld\n",
            (long long)s.requested_bytes.current, (long long)s.requested_bytes.peak,
            (long long)s.frees.current);
    return 1;
  }
  if (memlake_stat_count() != MEMLAKE_STAT_COUNT ||
      strcmp(memlake_stat_name(MEMLAKE_STAT_requested_bytes), "requested_bytes") != 0) {
    fprintf(stderr, "the library's stat list differs from the header's\n");
    return 1;
  }
  printf("memlake consumer: ok (C, %d stats, peak reserved %lld bytes)\n", memlake_stat_count(),
         (long long)s.reserved_bytes.peak);
  return 0;
}

/* libFuzzer target for the policy parser and the lookup built on it (clang -fsanitize=fuzzer,
 * address,undefined). Each input is tried twice: as a whole file, and with a correct checksum line
 * appended, so the fuzzer gets past the CRC and explores the grammar. Every accepted policy is
 * queried for several systems and sizes; a lookup must return a range that contains the size and
 * names a real algorithm/protocol. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../view.h"

static void exercise(const char* data, size_t len) {
  dccl_policy_t* p;
  char err[256];
  if (dccl_policy_parse(data, len, &p, err, sizeof(err)) != 0) {
    if (!memchr(err, '\0', sizeof(err)) || err[0] == '\0') abort(); /* a reason is always given */
    return;
  }
  static const size_t sys[][2] = {{1, 1}, {8, 1}, {16, 2}, {64, 8}, {3, 3}};
  static const uint64_t sizes[] = {0, 7, 8, 4096, 65535, 65536, 1 << 20, 1ULL << 34, UINT64_MAX};
  dccl_view_t* views = calloc(p->nslices, sizeof(dccl_view_t));
  if (!views) abort();
  for (size_t s = 0; s < sizeof(sys) / sizeof(sys[0]); s++) {
    dccl_views_build(p, sys[s][0], sys[s][1], views);
    for (uint32_t v = 0; v < p->nslices; v++)
      for (int coll = -1; coll <= 5; coll++)
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
          const dccl_range_t* r = dccl_view_lookup(&views[v], coll, sizes[i]);
          if (!r) continue;
          if (sizes[i] < r->lo || sizes[i] > r->hi || r->coll != coll) abort();
          if (r->knobs.algorithm == DCCL_DEFER) continue;
          for (int k = 0; k < DCCL_NUM_KNOBS; k++) { /* every knob in its column's range, or kept */
            long long value = dccl_knobs_get(&r->knobs, k);
            if (value == DCCL_KEEP ? !dccl_knob_columns[k].keepable
                                   : value < dccl_knob_columns[k].lo || value > dccl_knob_columns[k].hi)
              abort();
          }
        }
  }
  free(views);
  dccl_policy_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  exercise((const char*)data, size);
  if (size > (1u << 20)) return 0;
  char* buf = malloc(size + 48);
  if (!buf) return 0;
  memcpy(buf, data, size);
  size_t n = size;
  if (n == 0 || buf[n - 1] != '\n') buf[n++] = '\n';
  n += (size_t)snprintf(buf + n, 48, DCCL_CHECKSUM_PREFIX "%08x\n", dccl_crc32(buf, n));
  exercise(buf, n);
  free(buf);
  return 0;
}

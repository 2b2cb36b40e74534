/* libFuzzer target for the policy parser and the lookup built on it (clang -fsanitize=fuzzer,
 * address,undefined). Each input is tried twice: as a whole file, and with a correct checksum line
 * appended, so the fuzzer gets past the CRC and explores the grammar. Every accepted policy is
 * queried for several systems and sizes; a lookup must return a range that contains the size and
 * names a real algorithm/protocol. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../policy.h"

static void exercise(const char* data, size_t len) {
  dccl_policy_t* p;
  char err[256];
  if (dccl_policy_parse(data, len, &p, err, sizeof(err)) != 0) {
    if (!memchr(err, '\0', sizeof(err)) || err[0] == '\0') abort(); /* a reason is always given */
    return;
  }
  static const size_t sys[][2] = {{1, 1}, {8, 1}, {16, 2}, {64, 8}, {3, 3}};
  static const char* const ctx[] = {NULL, "straggler=long", "c2c=high", "x=y"};
  static const uint64_t sizes[] = {0, 7, 8, 4096, 65535, 65536, 1 << 20, 1ULL << 34, UINT64_MAX};
  for (size_t s = 0; s < sizeof(sys) / sizeof(sys[0]); s++) {
    dccl_view_t v;
    int used;
    if (dccl_view_build(p, ctx[s % 4], sys[s][0], sys[s][1], &v, &used) != 0) abort();
    for (int coll = -1; coll <= 5; coll++)
      for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (int pipe = -1; pipe <= 2; pipe++)
          for (int reg = -1; reg <= 1; reg++) {
            const dccl_range_t* r = dccl_view_lookup(&v, coll, sizes[i], pipe, reg);
            if (!r) continue;
            if (sizes[i] < r->lo || sizes[i] > r->hi || r->coll != coll) abort();
            if (r->algo != DCCL_DEFER && (r->algo < 0 || r->algo > 6 || r->proto < 0 ||
                                          r->proto > 2 || r->channels > DCCL_MAX_CHANNELS))
              abort();
          }
    dccl_view_free(&v);
  }
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
  n += (size_t)snprintf(buf + n, 48, "checksum crc32 %08x\n", dccl_crc32(buf, n));
  exercise(buf, n);
  free(buf);
  return 0;
}

/* The DynamICCL policy file as the plugin holds it after parsing. The format itself is specified in
 * dynamiccl/plugin/policy_file.py and its facts in dynamiccl/plugin/policy_format.py (from which
 * policy_format.h is generated), so both parsers accept exactly the same files.
 *
 * Memory layout, chosen for a lookup that costs a few nanoseconds: every rule becomes a size range
 * in one flat array; ranges with the same key (slice, collective, nNodes, nRanks) form a group,
 * sorted by size so a binary search finds the range; the searched lower bounds are also kept
 * packed on their own (8 per cache line instead of under 3). Lookups are in view.h. */
#ifndef DYNAMICCL_POLICY_H
#define DYNAMICCL_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "policy_format.h"

#pragma GCC visibility push(hidden)

#define DCCL_ANY (-1)          /* "*" in a rule: any nNodes / nRanks */
#define DCCL_DEFER DCCL_KEEP   /* algorithm of a "defer to NCCL" rule: NCCL keeps its own */

typedef struct {
  uint64_t lo, hi;      /* inclusive byte range */
  dccl_knobs_t knobs;   /* the decision (policy_format.h); knobs.algorithm DCCL_DEFER: defer */
  uint8_t coll;
  int32_t nodes, ranks; /* copied from the group: decision logs and the v2 exact-system check */
} dccl_range_t;

typedef struct {
  int32_t coll, nodes, ranks;  /* DCCL_ANY where the file says "*" */
  uint32_t first, count;       /* into dccl_policy_t.ranges */
} dccl_group_t;

typedef struct {
  char straggler[DCCL_MAX_BUCKET + 1];
  char c2c[DCCL_MAX_BUCKET + 1];
  uint32_t first_group, ngroups;
} dccl_slice_t;

typedef struct dccl_policy {
  char name[DCCL_MAX_HEADER_VALUE + 1];
  char nccl[DCCL_MAX_HEADER_VALUE + 1];
  char hash[DCCL_HASH_HEX_LEN + 1]; /* SHA-256 of the whole file: its identity across ranks */
  unsigned features;                /* DCCL_FEATURE_* bits of the exported system */
  uint32_t nranges, ngroups, nslices;
  dccl_range_t* ranges;
  uint64_t* los;         /* ranges[i].lo, packed: the binary search reads only these */
  dccl_group_t* groups;
  dccl_slice_t* slices;
  unsigned char* logged; /* per range: decision-log bits, updated with atomics */
} dccl_policy_t;

/* Parses a whole file image. Returns 0 and a policy, or -1 and a one-line reason in err. */
int dccl_policy_parse(const char* data, size_t len, dccl_policy_t** out, char* err, size_t errlen);
/* Reads a regular file (never blocks on FIFOs, refuses more than DCCL_MAX_FILE_BYTES). */
int dccl_read_file(const char* path, char** data, size_t* len, char* err, size_t errlen);
void dccl_policy_free(dccl_policy_t* policy);
uint32_t dccl_crc32(const void* data, size_t len);
/* The slice with these buckets, or -1. */
int dccl_policy_find_slice(const dccl_policy_t* policy, const char* straggler, const char* c2c);

#pragma GCC visibility pop

#endif

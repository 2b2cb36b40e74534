/* The DynamICCL policy file (format version 1) as the plugin sees it: a validating parser and the
 * per-communicator lookup structure. The format itself is specified in dynamiccl/policy_file.py;
 * both parsers accept exactly the same files.
 *
 * Memory layout, chosen for a lookup that costs a few nanoseconds: every rule becomes a size range
 * in one flat array; ranges with the same key (slice, collective, nNodes, nRanks, numPipeOps,
 * regBuff) form a group, sorted by size so a binary search finds the range. A communicator's view
 * resolves, once at init, which group answers for each (collective, numPipeOps, regBuff). */
#ifndef DYNAMICCL_POLICY_H
#define DYNAMICCL_POLICY_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define DCCL_FORMAT_MAGIC "DYNAMICCL-POLICY"
#define DCCL_FORMAT_VERSION 1
#define DCCL_MAX_FILE_BYTES (64u << 20)
#define DCCL_MAX_LINE 4096
#define DCCL_MAX_RULES 1000000u
#define DCCL_MAX_SLICES 64
#define DCCL_MAX_HEADER_VALUE 200
#define DCCL_MAX_BUCKET 31
#define DCCL_MAX_CHANNELS 64
#define DCCL_MIN_CHUNK 2048u
#define DCCL_MAX_CHUNK (1u << 30)
#define DCCL_ANY (-1)        /* "*" in a rule: any nNodes / nRanks / numPipeOps / regBuff */
#define DCCL_DEFER (-1)      /* algorithm of a "defer to NCCL" rule */
#define DCCL_NUM_COLLS_IN_FILE 5 /* broadcast, reduce, allgather, reducescatter, allreduce */

typedef struct {
  uint64_t lo, hi;     /* inclusive byte range */
  uint64_t chunk;      /* 0: leave NCCL's chunk size */
  int8_t algo;         /* NCCL algorithm id, or DCCL_DEFER */
  int8_t proto;        /* NCCL protocol id (-1 when deferring) */
  uint8_t channels;    /* 0: leave NCCL's channel count */
  uint8_t coll;
  int32_t nodes, ranks; /* copied from the group, for decision logs */
} dccl_range_t;

typedef struct {
  int32_t coll, nodes, ranks, pipe, reg; /* DCCL_ANY where the file says "*" */
  uint32_t first, count;                 /* into dccl_policy_t.ranges */
} dccl_group_t;

typedef struct {
  char straggler[DCCL_MAX_BUCKET + 1];
  char c2c[DCCL_MAX_BUCKET + 1];
  uint32_t first_group, ngroups;
} dccl_slice_t;

typedef struct dccl_policy {
  char name[DCCL_MAX_HEADER_VALUE + 1];
  char nccl[DCCL_MAX_HEADER_VALUE + 1];
  uint32_t nranges, ngroups, nslices;
  dccl_range_t* ranges;
  dccl_group_t* groups;
  dccl_slice_t* slices;
  unsigned char* logged; /* per range: decision-log bits, updated with atomics */
  int refs;              /* owned by tuner.c under its lock */
  char* path;
  uint64_t file_id[4];   /* dev, inode, size, mtime: identifies the parsed file */
} dccl_policy_t;

/* Parses a whole file image. Returns 0 and a policy, or -1 and a one-line reason in err. */
int dccl_policy_parse(const char* data, size_t len, dccl_policy_t** out, char* err, size_t errlen);
/* Reads a regular file (never blocks on FIFOs, refuses more than DCCL_MAX_FILE_BYTES). */
int dccl_read_file(const char* path, char** data, size_t* len, uint64_t file_id[4], char* err,
                   size_t errlen);
void dccl_policy_free(dccl_policy_t* policy);
uint32_t dccl_crc32(const void* data, size_t len);

typedef struct {
  int32_t pipe, reg;
  uint32_t group;
} dccl_cand_t;

/* What one communicator consults: the groups that answer for its nRanks/nNodes in its slice. */
typedef struct {
  const dccl_policy_t* policy;
  const dccl_slice_t* slice;
  dccl_cand_t* cands;
  uint32_t cand_first[DCCL_NUM_COLLS_IN_FILE], cand_count[DCCL_NUM_COLLS_IN_FILE];
  /* The common case, resolved at init: one group answers every call of the collective. */
  const dccl_range_t* fast[DCCL_NUM_COLLS_IN_FILE];
  uint32_t fast_count[DCCL_NUM_COLLS_IN_FILE];
  uint32_t nrules; /* ranges reachable from this view */
} dccl_view_t;

/* context: DYNAMICCL_CONTEXT text ("straggler=B,c2c=B") or NULL for the default slice.
 * *context_used is set to 0 when a given context matched no slice (the default is used). */
int dccl_view_build(const dccl_policy_t* policy, const char* context, size_t nRanks, size_t nNodes,
                    dccl_view_t* view, int* context_used);
void dccl_view_free(dccl_view_t* view);
const dccl_range_t* dccl_view_lookup_slow(const dccl_view_t* view, int coll, uint64_t nbytes,
                                          int pipe, int reg);

/* The range holding nbytes among n sorted, disjoint ranges, or NULL. The search has no
 * data-dependent branch (the compiler emits conditional moves): sizes arrive in no predictable
 * order, and a mispredicted branch per step would cost more than the whole lookup. */
static inline const dccl_range_t* dccl_find_range(const dccl_range_t* r, uint32_t n,
                                                  uint64_t nbytes) {
  if (n == 0 || r[0].lo > nbytes) return NULL;
  while (n > 1) {
    uint32_t half = n / 2;
    r = r[half].lo <= nbytes ? r + half : r;
    n -= half;
  }
  return nbytes <= r->hi ? r : NULL;
}

/* The rule for this call, or NULL ("defer"). pipe/reg < 0 mean "not known". */
static inline const dccl_range_t* dccl_view_lookup(const dccl_view_t* view, int coll,
                                                   uint64_t nbytes, int pipe, int reg) {
  if ((unsigned)coll >= DCCL_NUM_COLLS_IN_FILE) return NULL;
  if (view->fast[coll]) return dccl_find_range(view->fast[coll], view->fast_count[coll], nbytes);
  return dccl_view_lookup_slow(view, coll, nbytes, pipe, reg);
}

extern const char* const dccl_coll_names[5];
extern const char* const dccl_algo_names[7];
extern const char* const dccl_proto_names[3];

#pragma GCC visibility pop

#endif

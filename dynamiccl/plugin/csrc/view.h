/* A communicator's view of a parsed policy (policy.h): for each slice, which group answers each
 * collective for its nRanks/nNodes, and the O(log n) lookup getCollInfo uses. Built once in init,
 * read-only after, so any number of threads may query it. */
#ifndef DYNAMICCL_VIEW_H
#define DYNAMICCL_VIEW_H

#include "policy.h"

#pragma GCC visibility push(hidden)

/* One slice as one communicator sees it. */
typedef struct {
  const dccl_slice_t* slice;
  const dccl_range_t* first[DCCL_NUM_COLLS]; /* the answering group's ranges (NULL: none) */
  const uint64_t* los[DCCL_NUM_COLLS];       /* and their lower bounds */
  uint32_t count[DCCL_NUM_COLLS];
  uint32_t nrules; /* ranges reachable from this view */
} dccl_view_t;

/* Builds views[i] for every slice i of the policy (views has policy->nslices entries). */
void dccl_views_build(const dccl_policy_t* policy, size_t nRanks, size_t nNodes, dccl_view_t* views);

/* The range holding nbytes among n sorted, disjoint ranges r whose lower bounds are lo, or NULL.
 * The search has no data-dependent branch (the compiler emits conditional moves): sizes arrive in
 * no predictable order, and a mispredicted branch per step would cost more than the whole
 * lookup. At most DCCL_MAX_GROUP_RANGES ranges: ten steps over 8 KiB of bounds. */
static inline const dccl_range_t* dccl_find_range(const dccl_range_t* r, const uint64_t* lo,
                                                  uint32_t n, uint64_t nbytes) {
  if (n == 0 || lo[0] > nbytes) return NULL;
  const uint64_t* at = lo;
  while (n > 1) {
    uint32_t half = n / 2;
    at = at[half] <= nbytes ? at + half : at;
    n -= half;
  }
  r += at - lo;
  return nbytes <= r->hi ? r : NULL;
}

/* The rule for this call, or NULL ("defer"). */
static inline const dccl_range_t* dccl_view_lookup(const dccl_view_t* view, int coll,
                                                   uint64_t nbytes) {
  if ((unsigned)coll >= DCCL_NUM_COLLS) return NULL;
  return dccl_find_range(view->first[coll], view->los[coll], view->count[coll], nbytes);
}

/* Parses a context spec "straggler=B c2c=B" (space or comma separated; a missing part means
 * "none"). Returns 0, or -1 for malformed text. */
int dccl_parse_context(const char* spec, char straggler[DCCL_MAX_BUCKET + 1],
                       char c2c[DCCL_MAX_BUCKET + 1]);

#pragma GCC visibility pop

#endif

/* A communicator's view of a parsed policy: which groups answer for its nRanks/nNodes in the
 * selected slice, and the O(log n) lookup getCollInfo uses. Built once in init, read-only after,
 * so any number of threads may query it. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "policy.h"

typedef struct {
  int32_t coll, pipe, reg, score;
  uint32_t group;
} match_t;

static int cmp_match(const void* a, const void* b) {
  const match_t* x = a;
  const match_t* y = b;
  const int32_t kx[4] = {x->coll, x->pipe, x->reg, -x->score};
  const int32_t ky[4] = {y->coll, y->pipe, y->reg, -y->score};
  for (int i = 0; i < 4; i++)
    if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
  return 0;
}

static const dccl_slice_t* find_slice(const dccl_policy_t* p, const char* straggler,
                                      const char* c2c) {
  for (uint32_t i = 0; i < p->nslices; i++)
    if (!strcmp(p->slices[i].straggler, straggler) && !strcmp(p->slices[i].c2c, c2c))
      return &p->slices[i];
  return NULL;
}

/* DYNAMICCL_CONTEXT = "straggler=B,c2c=B" (either part may be left out: it means "none"). */
static const dccl_slice_t* context_slice(const dccl_policy_t* p, const char* context) {
  char buf[2 * (DCCL_MAX_BUCKET + 16)];
  char straggler[DCCL_MAX_BUCKET + 1] = "none";
  char c2c[DCCL_MAX_BUCKET + 1] = "none";
  if (strlen(context) >= sizeof(buf)) return NULL;
  strcpy(buf, context);
  char* save = NULL;
  for (char* part = strtok_r(buf, ", ", &save); part; part = strtok_r(NULL, ", ", &save)) {
    char* eq = strchr(part, '=');
    if (!eq || strlen(eq + 1) == 0 || strlen(eq + 1) > DCCL_MAX_BUCKET) return NULL;
    *eq = '\0';
    if (!strcmp(part, "straggler")) strcpy(straggler, eq + 1);
    else if (!strcmp(part, "c2c")) strcpy(c2c, eq + 1);
    else return NULL;
  }
  return find_slice(p, straggler, c2c);
}

int dccl_view_build(const dccl_policy_t* policy, const char* context, size_t nRanks, size_t nNodes,
                    dccl_view_t* view, int* context_used) {
  memset(view, 0, sizeof(*view));
  *context_used = 1;
  const dccl_slice_t* slice = NULL;
  if (context && *context) {
    slice = context_slice(policy, context);
    *context_used = slice != NULL;
  }
  if (!slice) slice = find_slice(policy, "none", "none");
  if (!slice) return -1;
  /* A size_t beyond int32 matches only "*" (exact values in a file are int32). */
  int64_t ranks = nRanks > INT32_MAX ? -2 : (int64_t)nRanks;
  int64_t nodes = nNodes > INT32_MAX ? -2 : (int64_t)nNodes;
  match_t* m = malloc((slice->ngroups ? slice->ngroups : 1) * sizeof(match_t));
  if (!m) return -1;
  uint32_t nm = 0;
  for (uint32_t i = slice->first_group; i < slice->first_group + slice->ngroups; i++) {
    const dccl_group_t* g = &policy->groups[i];
    int node_ok = g->nodes == DCCL_ANY || g->nodes == nodes;
    int rank_ok = g->ranks == DCCL_ANY || g->ranks == ranks;
    if (!node_ok || !rank_ok) continue;
    /* Most specific wins: an exact node count outranks an exact rank count, which outranks "*". */
    int32_t score = 2 * (g->nodes != DCCL_ANY) + (g->ranks != DCCL_ANY);
    m[nm++] = (match_t){g->coll, g->pipe, g->reg, score, i};
  }
  if (nm) qsort(m, nm, sizeof(match_t), cmp_match);
  view->cands = malloc((nm ? nm : 1) * sizeof(dccl_cand_t));
  if (!view->cands) {
    free(m);
    return -1;
  }
  uint32_t nc = 0;
  for (uint32_t i = 0; i < nm; i++) {
    if (i && m[i].coll == m[i - 1].coll && m[i].pipe == m[i - 1].pipe && m[i].reg == m[i - 1].reg)
      continue; /* a less specific group for a key already answered */
    if (view->cand_count[m[i].coll] == 0) view->cand_first[m[i].coll] = nc;
    view->cand_count[m[i].coll]++;
    view->cands[nc++] = (dccl_cand_t){m[i].pipe, m[i].reg, m[i].group};
    view->nrules += policy->groups[m[i].group].count;
  }
  free(m);
  for (int coll = 0; coll < DCCL_NUM_COLLS_IN_FILE; coll++) {
    const dccl_cand_t* c = view->cands + view->cand_first[coll];
    if (view->cand_count[coll] != 1 || c->pipe != DCCL_ANY || c->reg != DCCL_ANY) continue;
    const dccl_group_t* g = &policy->groups[c->group];
    view->fast[coll] = policy->ranges + g->first;
    view->fast_count[coll] = g->count;
  }
  view->policy = policy;
  view->slice = slice;
  return 0;
}

void dccl_view_free(dccl_view_t* view) {
  free(view->cands);
  memset(view, 0, sizeof(*view));
}

static const dccl_cand_t* find_cand(const dccl_cand_t* c, uint32_t n, int32_t pipe, int32_t reg) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (c[mid].pipe < pipe || (c[mid].pipe == pipe && c[mid].reg < reg)) lo = mid + 1;
    else hi = mid;
  }
  return (lo < n && c[lo].pipe == pipe && c[lo].reg == reg) ? &c[lo] : NULL;
}

const dccl_range_t* dccl_view_lookup_slow(const dccl_view_t* view, int coll, uint64_t nbytes,
                                          int pipe, int reg) {
  uint32_t n = view->cand_count[coll];
  const dccl_cand_t* c = view->cands + view->cand_first[coll];
  const dccl_cand_t* hit = NULL;
  int32_t p = pipe >= 1 ? pipe : DCCL_ANY;
  int32_t r = (reg == 0 || reg == 1) ? reg : DCCL_ANY;
  const int32_t keys[4][2] = {{p, r}, {p, DCCL_ANY}, {DCCL_ANY, r}, {DCCL_ANY, DCCL_ANY}};
  for (int k = 0; k < 4 && !hit; k++) hit = find_cand(c, n, keys[k][0], keys[k][1]);
  if (!hit) return NULL;
  const dccl_group_t* g = &view->policy->groups[hit->group];
  return dccl_find_range(view->policy->ranges + g->first, g->count, nbytes);
}

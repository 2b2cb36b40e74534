/* A communicator's views of a parsed policy (see view.h). */
#define _POSIX_C_SOURCE 200809L
#include "view.h"

#include <string.h>

void dccl_views_build(const dccl_policy_t* policy, size_t nRanks, size_t nNodes, dccl_view_t* views) {
  /* A size_t beyond int32 matches only "*" (exact values in a file are int32). */
  int64_t ranks = nRanks > INT32_MAX ? -2 : (int64_t)nRanks;
  int64_t nodes = nNodes > INT32_MAX ? -2 : (int64_t)nNodes;
  for (uint32_t s = 0; s < policy->nslices; s++) {
    const dccl_slice_t* slice = &policy->slices[s];
    dccl_view_t* v = &views[s];
    int best[DCCL_NUM_COLLS];
    memset(v, 0, sizeof(*v));
    v->slice = slice;
    for (int c = 0; c < DCCL_NUM_COLLS; c++) best[c] = -1;
    for (uint32_t i = slice->first_group; i < slice->first_group + slice->ngroups; i++) {
      const dccl_group_t* g = &policy->groups[i];
      if ((g->nodes != DCCL_ANY && g->nodes != nodes) || (g->ranks != DCCL_ANY && g->ranks != ranks))
        continue;
      /* Most specific wins: an exact node count outranks an exact rank count, which outranks "*".
       * Groups are unique per (nodes, ranks), so scores never tie. */
      int score = 2 * (g->nodes != DCCL_ANY) + (g->ranks != DCCL_ANY);
      if (score <= best[g->coll]) continue;
      if (v->first[g->coll]) v->nrules -= v->count[g->coll];
      best[g->coll] = score;
      v->first[g->coll] = policy->ranges + g->first;
      v->los[g->coll] = policy->los + g->first;
      v->count[g->coll] = g->count;
      v->nrules += g->count;
    }
  }
}

static int is_bucket(const char* s, size_t n) {
  if (n == 0 || n > DCCL_MAX_BUCKET) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_')) return 0;
  return 1;
}

int dccl_parse_context(const char* spec, char straggler[DCCL_MAX_BUCKET + 1],
                       char c2c[DCCL_MAX_BUCKET + 1]) {
  static const char k_straggler[] = DCCL_CONTEXT_KEY_STRAGGLER "=";
  static const char k_c2c[] = DCCL_CONTEXT_KEY_C2C "=";
  if (!spec || strnlen(spec, DCCL_MAX_CONTEXT_SPEC + 1) > DCCL_MAX_CONTEXT_SPEC) return -1;
  strcpy(straggler, DCCL_DEFAULT_BUCKET);
  strcpy(c2c, DCCL_DEFAULT_BUCKET);
  int seen = 0;
  for (const char* p = spec;;) {
    p += strspn(p, " ,");
    if (!*p) return 0;
    size_t n = strcspn(p, " ,");
    char* dst;
    size_t key;
    if (strncmp(p, k_straggler, sizeof(k_straggler) - 1) == 0 && !(seen & 1)) {
      dst = straggler, key = sizeof(k_straggler) - 1, seen |= 1;
    } else if (strncmp(p, k_c2c, sizeof(k_c2c) - 1) == 0 && !(seen & 2)) {
      dst = c2c, key = sizeof(k_c2c) - 1, seen |= 2;
    } else {
      return -1; /* unknown or repeated key, or no '=' */
    }
    if (n < key || !is_bucket(p + key, n - key)) return -1;
    memcpy(dst, p + key, n - key);
    dst[n - key] = '\0';
    p += n;
  }
}

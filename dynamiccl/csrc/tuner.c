/* DynamICCL's NCCL tuner plugin: reads the policy file named by DYNAMICCL_POLICY and steers each
 * collective NCCL asks about. Loaded by stock NCCL through NCCL_TUNER_PLUGIN.
 *
 * Rules this file keeps (reasons in shared/reference/nccl_abi.md §1):
 *  - every entry point returns ncclSuccess: an error fails the user's communicator or collective;
 *  - a problem with the policy file is one WARN, then the plugin steps aside for that communicator;
 *  - a cost-table entry is written (0.0, "force") only if NCCL marked it usable (>= 0), so neither
 *    NCCL <= 2.30 (negative = disabled) nor 2.31+ (negative = preferred) can be misled;
 *  - decisions depend only on the call's arguments, nRanks/nNodes and the file, never on clocks,
 *    ranks or randomness, so every rank decides alike;
 *  - NCCL_ALGO / NCCL_PROTO set by the user win: the plugin then does nothing.
 *
 * Environment: DYNAMICCL_POLICY (policy file; unset = do nothing), DYNAMICCL_LOG_DECISIONS=1 (log
 * each distinct decision once), DYNAMICCL_CONTEXT (reserved for run-time context such as
 * "straggler=long,c2c=high": selects a slice at init; unset = the "no straggler, no overlap"
 * slice). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_tuner_abi.h"
#include "policy.h"

#define DCCL_EXPORT __attribute__((visibility("default")))
#define MAX_TABLE_ALGOS 32 /* sanity bounds on NCCL's runtime numAlgo / numProto */
#define MAX_TABLE_PROTOS 8
enum { LOGGED_APPLIED = 1, LOGGED_UNUSABLE = 2, LOGGED_DEFER = 4 };

typedef struct {
  dccl_policy_t* policy;
  dccl_view_t view;
  ncclDebugLogger_t log;
  int log_decisions;
  unsigned char gap_logged[DCCL_NUM_COLLS_IN_FILE];
} dccl_comm_t;

static void dccl_log(ncclDebugLogger_t log, int level, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void dccl_log(ncclDebugLogger_t log, int level, int line, const char* fmt, ...) {
  char msg[640];
  if (!log) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  log(level, DCCL_LOG_SUBSYS_TUNING, __FILE__, line, "%s", msg);
}
#define LOG_INFO(log, ...) dccl_log(log, DCCL_LOG_INFO, __LINE__, __VA_ARGS__)
#define LOG_WARN(log, ...) dccl_log(log, DCCL_LOG_WARN, __LINE__, __VA_ARGS__)

/* ---- one parsed policy shared by all communicators of the process --------------------------- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static dccl_policy_t* g_policy;  /* the newest loaded file, while a communicator uses it */
static char g_last_failure[640]; /* so an unusable file is warned about once, not per comm */

static dccl_policy_t* acquire_policy(const char* path, ncclDebugLogger_t log) {
  char err[400] = "";
  char* data = NULL;
  size_t len = 0;
  uint64_t id[4];
  dccl_policy_t* p = NULL;
  pthread_mutex_lock(&g_lock);
  if (dccl_read_file(path, &data, &len, id, err, sizeof(err)) == 0) {
    if (g_policy && strcmp(g_policy->path, path) == 0 && memcmp(g_policy->file_id, id, sizeof(id)) == 0) {
      p = g_policy; /* same file, unchanged: share the parsed copy */
      p->refs++;
    } else if (dccl_policy_parse(data, len, &p, err, sizeof(err)) == 0) {
      p->path = strdup(path);
      if (!p->path) {
        dccl_policy_free(p);
        p = NULL;
        snprintf(err, sizeof(err), "out of memory");
      } else {
        memcpy(p->file_id, id, sizeof(id));
        p->refs = 1;
        g_policy = p;
      }
    }
    free(data);
  }
  char failure[sizeof(g_last_failure)];
  int first_report = 0;
  if (!p) {
    snprintf(failure, sizeof(failure), "%s: %s", path, err);
    first_report = strcmp(failure, g_last_failure) != 0;
    memcpy(g_last_failure, failure, sizeof(failure));
  } else {
    g_last_failure[0] = '\0';
  }
  pthread_mutex_unlock(&g_lock);
  if (!p && first_report)
    LOG_WARN(log, "DynamICCL: not using policy file %s: %s. NCCL's own choices stand.", path, err);
  else if (!p)
    LOG_INFO(log, "DynamICCL: policy file %s is still unusable (%s); stepping aside", path, err);
  return p;
}

static void release_policy(dccl_policy_t* p) {
  pthread_mutex_lock(&g_lock);
  if (--p->refs == 0) {
    if (g_policy == p) g_policy = NULL;
    dccl_policy_free(p);
  }
  pthread_mutex_unlock(&g_lock);
}

/* ---- init / finalize ------------------------------------------------------------------------ */

static int env_set(const char* name) {
  const char* v = getenv(name);
  return v && *v;
}

static void init_common(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** context) {
  if (!context) return;
  *context = NULL;
  const char* path = getenv("DYNAMICCL_POLICY");
  if (!path || !*path) return; /* no policy: NCCL decides everything */
  if (env_set("NCCL_ALGO") || env_set("NCCL_PROTO")) {
    LOG_INFO(log, "DynamICCL: NCCL_ALGO/NCCL_PROTO are set; respecting them, the policy is not used");
    return;
  }
  dccl_comm_t* c = calloc(1, sizeof(*c));
  if (!c) return;
  c->log = log;
  c->policy = acquire_policy(path, log);
  if (!c->policy) {
    free(c);
    return;
  }
  const char* ctx_text = getenv("DYNAMICCL_CONTEXT");
  int context_used = 1;
  if (dccl_view_build(c->policy, ctx_text, nRanks, nNodes, &c->view, &context_used) != 0) {
    LOG_WARN(log, "DynamICCL: out of memory preparing policy %s; NCCL's own choices stand",
             c->policy->name);
    release_policy(c->policy);
    free(c);
    return;
  }
  if (!context_used)
    LOG_INFO(log, "DynamICCL: DYNAMICCL_CONTEXT=%s matches no slice of the policy; using the "
             "default slice", ctx_text);
  const char* ld = getenv("DYNAMICCL_LOG_DECISIONS");
  c->log_decisions = ld && strcmp(ld, "1") == 0;
  LOG_INFO(log, "DynamICCL: policy %s, %u rules, for nRanks %zu / nNodes %zu (slice straggler=%s "
           "c2c=%s, trained for NCCL %s, file %s)", c->policy->name, c->view.nrules, nRanks,
           nNodes, c->view.slice->straggler, c->view.slice->c2c, c->policy->nccl, c->policy->path);
  *context = c;
}

static ncclResult_t init_v2(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** context) {
  init_common(nRanks, nNodes, log, context);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t init_v5(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                            ncclDebugLogger_t log, dccl_nvl_domain_info_t* nvlDomainInfo,
                            dccl_tuner_constants_t* constants) {
  (void)commId; /* rank-independent but communicator-specific: decisions must not depend on it */
  (void)nvlDomainInfo;
  (void)constants; /* NCCL's cost model is left as NCCL built it */
  init_common(nRanks, nNodes, log, context);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t finalize(void* context) {
  dccl_comm_t* c = context;
  if (!c) return DCCL_NCCL_SUCCESS;
  dccl_view_free(&c->view);
  release_policy(c->policy);
  free(c);
  return DCCL_NCCL_SUCCESS;
}

/* ---- decision logging (DYNAMICCL_LOG_DECISIONS=1) ------------------------------------------- */

static const char* dim(int32_t v, char* buf) {
  if (v == DCCL_ANY) return "*";
  snprintf(buf, 12, "%d", v);
  return buf;
}

static void note(dccl_comm_t* c, const dccl_range_t* r, int bit) {
  char nodes[12], ranks[12], channels[24];
  unsigned char* flag = &c->policy->logged[r - c->policy->ranges];
  if (__atomic_fetch_or(flag, (unsigned char)bit, __ATOMIC_RELAXED) & bit) return;
  const char* coll = dccl_coll_names[r->coll];
  if (bit == LOGGED_DEFER) {
    LOG_INFO(c->log, "DynamICCL decision: %s %llu-%llu B, nNodes %s nRanks %s: defer to NCCL", coll,
             (unsigned long long)r->lo, (unsigned long long)r->hi, dim(r->nodes, nodes),
             dim(r->ranks, ranks));
    return;
  }
  if (r->channels) snprintf(channels, sizeof(channels), "%d channels", r->channels);
  else snprintf(channels, sizeof(channels), "NCCL's channels");
  LOG_INFO(c->log, "DynamICCL decision: %s %llu-%llu B, nNodes %s nRanks %s: %s/%s, %s%s", coll,
           (unsigned long long)r->lo, (unsigned long long)r->hi, dim(r->nodes, nodes),
           dim(r->ranks, ranks), dccl_algo_names[r->algo], dccl_proto_names[r->proto], channels,
           bit == LOGGED_UNUSABLE ? " -- not usable here, NCCL's choice stands" : "");
}

static void note_gap(dccl_comm_t* c, int coll, size_t nBytes) {
  if ((unsigned)coll >= DCCL_NUM_COLLS_IN_FILE) return;
  if (__atomic_exchange_n(&c->gap_logged[coll], 1, __ATOMIC_RELAXED)) return;
  LOG_INFO(c->log, "DynamICCL decision: %s %zu B: no rule covers it, NCCL decides (logged once "
           "per collective)", dccl_coll_names[coll], nBytes);
}

/* ---- the per-collective hooks --------------------------------------------------------------- */

static void apply(void* context, int coll, size_t nBytes, int pipe, int reg, float** table,
                  int numAlgo, int numProto, int* nChannels) {
  dccl_comm_t* c = context;
  if (!c || !table) return;
  const dccl_range_t* r = dccl_view_lookup(&c->view, coll, nBytes, pipe, reg);
  if (!r || r->algo == DCCL_DEFER) {
    if (c->log_decisions) r ? note(c, r, LOGGED_DEFER) : note_gap(c, coll, nBytes);
    return;
  }
  /* The table is one contiguous float[numAlgo][numProto] (declared float**, it is not). */
  float* entry = NULL;
  if (numAlgo <= MAX_TABLE_ALGOS && numProto <= MAX_TABLE_PROTOS && r->algo < numAlgo &&
      r->proto < numProto)
    entry = (float*)table + (size_t)r->algo * (size_t)numProto + (size_t)r->proto;
  if (!entry || !(*entry >= 0.0f)) { /* unusable here (or NaN): NCCL's choice stands */
    if (c->log_decisions) note(c, r, LOGGED_UNUSABLE);
    return;
  }
  *entry = 0.0f;
  if (r->channels && nChannels) *nChannels = r->channels;
  if (c->log_decisions) note(c, r, LOGGED_APPLIED);
}

static ncclResult_t coll_v2(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport,
                            int nvlsSupport, int numPipeOps, int* algorithm, int* protocol,
                            int* nChannels) {
  dccl_comm_t* c = context;
  if (!c || !algorithm || !protocol) return DCCL_NCCL_SUCCESS;
  const dccl_range_t* r = dccl_view_lookup(&c->view, collType, nBytes, numPipeOps, -1);
  if (!r || r->algo == DCCL_DEFER) {
    if (c->log_decisions) r ? note(c, r, LOGGED_DEFER) : note_gap(c, collType, nBytes);
    return DCCL_NCCL_SUCCESS;
  }
  /* v2 has no cost table: only NCCL 2.21 loads it (six algorithms, no PAT); CollNet and NVLS
   * only where NCCL says this call supports them. */
  int a = r->algo;
  int usable = a < DCCL_ALGO_PAT &&
               !((a == DCCL_ALGO_COLLNET_DIRECT || a == DCCL_ALGO_COLLNET_CHAIN) && collNetSupport != 1) &&
               !((a == DCCL_ALGO_NVLS || a == DCCL_ALGO_NVLS_TREE) && nvlsSupport != 1);
  if (!usable) {
    if (c->log_decisions) note(c, r, LOGGED_UNUSABLE);
    return DCCL_NCCL_SUCCESS;
  }
  *algorithm = a;
  *protocol = r->proto;
  if (r->channels && nChannels) *nChannels = r->channels;
  if (c->log_decisions) note(c, r, LOGGED_APPLIED);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t coll_v3(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                            float** table, int numAlgo, int numProto, int* nChannels) {
  apply(context, collType, nBytes, numPipeOps, -1, table, numAlgo, numProto, nChannels);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t coll_v4(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                            float** table, int numAlgo, int numProto, int regBuff, int* nChannels) {
  apply(context, collType, nBytes, numPipeOps, regBuff, table, numAlgo, numProto, nChannels);
  return DCCL_NCCL_SUCCESS;
}

/* NCCL asks per work piece (for Ring/Tree/NVLS/PAT nBytes is one channel's piece), after it chose
 * the algorithm: the rule for (collType, nBytes) answers only if it chose that same pair. */
static ncclResult_t chunk_v6(void* context, ncclFunc_t collType, size_t nBytes, int algorithm,
                             int protocol, int nChannels, size_t* chunkSize) {
  (void)nChannels;
  const dccl_comm_t* c = context;
  if (!c || !chunkSize) return DCCL_NCCL_SUCCESS;
  const dccl_range_t* r = dccl_view_lookup(&c->view, collType, nBytes, -1, -1);
  if (r && r->algo != DCCL_DEFER && r->chunk && r->algo == algorithm && r->proto == protocol)
    *chunkSize = (size_t)r->chunk;
  return DCCL_NCCL_SUCCESS;
}

/* ---- the only exported symbols -------------------------------------------------------------- */

#define PLUGIN_NAME "DynamICCL"
DCCL_EXPORT const dccl_tuner_v6_t ncclTunerPlugin_v6 = {PLUGIN_NAME, init_v5, coll_v4, finalize,
                                                        chunk_v6};
DCCL_EXPORT const dccl_tuner_v5_t ncclTunerPlugin_v5 = {PLUGIN_NAME, init_v5, coll_v4, finalize};
DCCL_EXPORT const dccl_tuner_v4_t ncclTunerPlugin_v4 = {PLUGIN_NAME, init_v2, coll_v4, finalize};
DCCL_EXPORT const dccl_tuner_v3_t ncclTunerPlugin_v3 = {PLUGIN_NAME, init_v2, coll_v3, finalize};
DCCL_EXPORT const dccl_tuner_v2_t ncclTunerPlugin_v2 = {PLUGIN_NAME, init_v2, coll_v2, finalize};

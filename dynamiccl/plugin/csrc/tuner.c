/* DynamICCL's NCCL tuner plugin: reads the policy file named by DYNAMICCL_POLICY (once per
 * process) and steers each collective NCCL asks about. Loaded by stock NCCL through
 * NCCL_TUNER_PLUGIN.
 *
 * Rules this file keeps (reasons: how NCCL 2.30.7 loads and calls a tuner, src/plugin/tuner.cc and
 * src/enqueue.cc):
 *  - every entry point returns ncclSuccess: an error fails the user's communicator or collective;
 *  - a problem with the policy file is one WARN, then the plugin steps aside for the process, as it
 *    does under an NCCL outside the policy's version window or when the file's SHA-256 is not the
 *    one DYNAMICCL_POLICY_SHA256 expects (fleet.c);
 *  - a cost-table entry is written (0.0, "force") only if NCCL marked it usable (>= 0), so neither
 *    NCCL <= 2.30 (negative = disabled) nor 2.31+ (negative = preferred) can be misled;
 *  - through the v2 ABI (NCCL 2.21, no cost table, nothing checked by NCCL) only what NCCL 2.21
 *    could run and the policy's recorded system allows is forced (force_v2_ok);
 *  - decisions depend only on the call's arguments, nRanks/nNodes, the file and the run-time
 *    context/pins the job sets identically on every rank, never on clocks, ranks or randomness;
 *  - NCCL_ALGO / NCCL_PROTO set by the user win: the plugin then does nothing (and says so at WARN).
 *
 * Environment: DYNAMICCL_POLICY (policy file; unset = do nothing), DYNAMICCL_POLICY_SHA256 (the
 * file's expected SHA-256), DYNAMICCL_LOG_DECISIONS=1 (log each distinct decision once),
 * DYNAMICCL_CONTEXT (the context slice at init, e.g. "straggler=long c2c=high";
 * dynamiccl_set_context changes it at run time).
 *
 * Run-time entry points (exported next to the ncclTunerPlugin_vN structs, for dynamiccl.runtime
 * through ctypes; all thread-safe, none ever crashes on bad input):
 *   int dynamiccl_set_context(const char* slice_spec);
 *       "straggler=B c2c=B": the slice every communicator of the process uses from now on.
 *       0 a slice of the loaded policy matched, 1 none matched (the current slice stays),
 *       -1 bad input (NULL, longer than DCCL_MAX_CONTEXT_SPEC, malformed; or a 257th distinct
 *       context in one process: contexts are interned, never freed).
 *   int dynamiccl_policy_hash(char* out, size_t len);
 *       SHA-256 of the policy file the process uses, 64 lowercase hex digits + NUL (the hash logged
 *       at init and printed by `dynamiccl show`). 0 ok, -1 no policy in use (none named, or NCCL
 *       decides: see the WARN) or len < 65.
 *   const char* dynamiccl_plugin_version(void);   the package version the plugin was built from.
 *   int dynamiccl_pin(int collective, uint64_t min_bytes, uint64_t max_bytes, int algorithm,
 *                     int protocol, int channels);
 *       calls of that collective with nBytes in [min_bytes, max_bytes) use this choice where
 *       NCCL's cost table allows it (else NCCL decides), in every communicator, before any policy
 *       rule; channels 0 keeps NCCL's. algorithm -1 unpins [min_bytes, max_bytes). 0 ok, -1 bad
 *       input or more than DCCL_MAX_PINS pinned ranges.
 *   int dynamiccl_pin_knobs(int collective, uint64_t min_bytes, uint64_t max_bytes,
 *                           const long long* knobs, int nknobs);
 *       the same with every knob of the policy format (policy_format.h's dccl_knob_columns, in
 *       that order; DCCL_KEEP = -1 keeps NCCL's value), nknobs == DCCL_NUM_KNOBS (a caller built
 *       for another knob table is refused); knobs NULL unpins.
 *   int dynamiccl_pin_counts(uint64_t* forced, uint64_t* refused);
 *       how many calls a pin covered since the process started: forced, and left to NCCL because
 *       its cost table disabled the pinned cell (a measurement of a pinned choice checks that its
 *       calls were forced, not NCCL's own). A call NCCL never asked about (one rank, or NCCL_ALGO /
 *       NCCL_PROTO set) counts in neither. Always 0. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "fleet.h"
#include "log.h"
#include "nccl_tuner_abi.h"
#include "policy.h"
#include "process.h"
#include "view.h"

#define DCCL_EXPORT __attribute__((visibility("default")))
#define MAX_TABLE_ALGOS 32 /* sanity bounds on NCCL's runtime numAlgo / numProto */
#define MAX_TABLE_PROTOS 8
enum { LOGGED_APPLIED = 1, LOGGED_UNUSABLE = 2, LOGGED_DEFER = 4 };

/* The chunk size getCollInfo decided for a collective, for getChunkSize to apply: NCCL asks for
 * the chunk of each channel's piece, not of the call (src/enqueue.cc @2.30.7: getCollInfo for every
 * task of a group in ncclPrepareTasks, then getChunkSize per piece while the plan is built, in the
 * same order on every rank). So the decision is carried from one to the other per communicator:
 * the chunk of this collective's calls decided since NCCL last asked for chunks, applied to a piece
 * of the same algorithm and protocol; calls of one group decided differently keep NCCL's chunk. */
typedef struct {
  int8_t algorithm, protocol; /* what was decided (DCCL_KEEP: nothing pinned) */
  int8_t mixed;               /* calls since the last chunking decided different chunks */
  int8_t set;
  int32_t chunk_bytes;        /* DCCL_KEEP: NCCL's own */
} dccl_pending_chunk_t;

typedef struct {
  dccl_policy_t* policy; /* NULL: no policy (pins only) */
  dccl_view_t* views;  /* one per slice of the policy */
  uint32_t default_view;
  uint64_t active;     /* (context word << 32) | view index, refreshed when the word changes */
  ncclDebugLogger_t log;
  int log_decisions;
  unsigned char gap_logged[DCCL_NUM_COLLS];
  int32_t chunk_logged[DCCL_NUM_COLLS]; /* the chunk last logged per collective (0: none yet) */
  int chunking;        /* getChunkSize ran since the last getCollInfo: the next one starts afresh */
  dccl_pending_chunk_t pending[DCCL_NUM_COLLS];
} dccl_comm_t;

/* ---- init / finalize ------------------------------------------------------------------------ */

/* The view a context word selects; a slice this policy lacks means the default slice. */
static uint32_t view_for_word(const dccl_comm_t* c, uint32_t word) {
  const char *straggler, *c2c;
  dccl_context_buckets(word, &straggler, &c2c);
  int i = dccl_policy_find_slice(c->policy, straggler, c2c);
  return i >= 0 ? (uint32_t)i : c->default_view;
}

static uint32_t initial_view(dccl_comm_t* c, uint32_t word) {
  if (word) return view_for_word(c, word);
  const char* text = getenv(DCCL_ENV_CONTEXT);
  if (!text || !*text) return c->default_view;
  char straggler[DCCL_MAX_BUCKET + 1], c2c[DCCL_MAX_BUCKET + 1];
  int i = dccl_parse_context(text, straggler, c2c) == 0
              ? dccl_policy_find_slice(c->policy, straggler, c2c) : -1;
  if (i < 0)
    DCCL_INFO(c->log, "DynamICCL: " DCCL_ENV_CONTEXT "=%.100s matches no slice of the policy; "
              "using the default slice", text);
  return i >= 0 ? (uint32_t)i : c->default_view;
}

/* nccl_caller: the return address of the exported init, inside NCCL (its version is read there). */
static void init_common(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** context,
                        const void* nccl_caller) {
  if (!context) return;
  *context = NULL;
  if (dccl_nccl_forces_choice(log)) {
    dccl_note_user_override();
    return;
  }
  const char* path = getenv(DCCL_ENV_POLICY);
  if (!path || !*path) { /* no policy: NCCL decides everything (pins aside) */
    dccl_note_net_plugin(0, log);
    return;
  }
  dccl_policy_t* policy = dccl_acquire_policy(path, nccl_caller, log);
  if (!policy) return;
  dccl_comm_t* c = calloc(1, sizeof(*c));
  if (c) c->views = calloc(policy->nslices, sizeof(dccl_view_t));
  if (!c || !c->views) {
    DCCL_WARN(log, "DynamICCL: out of memory preparing policy %s; NCCL's own choices stand",
              policy->name);
    free(c);
    return;
  }
  c->log = log;
  c->policy = policy;
  dccl_views_build(c->policy, nRanks, nNodes, c->views);
  c->default_view = (uint32_t)dccl_policy_find_slice(c->policy, DCCL_DEFAULT_BUCKET,
                                                     DCCL_DEFAULT_BUCKET);
  uint32_t word = dccl_context_word();
  uint32_t view = initial_view(c, word);
  c->active = (uint64_t)word << 32 | view;
  const char* ld = getenv(DCCL_ENV_LOG_DECISIONS);
  c->log_decisions = ld && strcmp(ld, "1") == 0;
  DCCL_INFO(log, "DynamICCL: policy %s (sha256 %s), %u rules, for nRanks %zu / nNodes %zu (slice "
            "straggler=%s c2c=%s, trained for NCCL %s)", c->policy->name, c->policy->hash,
            c->views[view].nrules, nRanks, nNodes, c->views[view].slice->straggler,
            c->views[view].slice->c2c, c->policy->nccl);
  *context = c;
}

/* init_common, and a communicator without a policy still gets a context: a pin's chunk size is
 * carried per communicator from getCollInfo to getChunkSize. */
static void init_comm(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** context,
                      const void* caller) {
  init_common(nRanks, nNodes, log, context, caller);
  if (!context || *context || dccl_nccl_forces_choice(log)) return;
  dccl_comm_t* c = calloc(1, sizeof(*c));
  if (!c) return;
  c->log = log;
  const char* ld = getenv(DCCL_ENV_LOG_DECISIONS);
  c->log_decisions = ld && strcmp(ld, "1") == 0;
  *context = c;
}

static ncclResult_t init_v2(size_t nRanks, size_t nNodes, ncclDebugLogger_t log, void** context) {
  init_comm(nRanks, nNodes, log, context, __builtin_return_address(0));
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t init_v5(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                            ncclDebugLogger_t log, dccl_nvl_domain_info_t* nvlDomainInfo,
                            dccl_tuner_constants_t* constants) {
  (void)commId; /* rank-independent but communicator-specific: decisions must not depend on it */
  (void)nvlDomainInfo;
  (void)constants; /* NCCL's cost model is left as NCCL built it */
  init_comm(nRanks, nNodes, log, context, __builtin_return_address(0));
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t finalize(void* context) {
  dccl_comm_t* c = context;
  if (!c) return DCCL_NCCL_SUCCESS;
  free(c->views); /* the policy is the process's (process.h) */
  free(c);
  return DCCL_NCCL_SUCCESS;
}

/* ---- per call ------------------------------------------------------------------------------- */

/* The view for the process's current context: two relaxed-cost loads while it is unchanged. */
static const dccl_view_t* active_view(dccl_comm_t* c) {
  uint32_t word = dccl_context_word();
  uint64_t active = __atomic_load_n(&c->active, __ATOMIC_RELAXED);
  if ((uint32_t)(active >> 32) != word) {
    active = (uint64_t)word << 32 | view_for_word(c, word);
    __atomic_store_n(&c->active, active, __ATOMIC_RELAXED); /* racing writers store the same */
  }
  return &c->views[(uint32_t)active];
}

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
    DCCL_INFO(c->log, "DynamICCL decision: %s %llu-%llu B, nNodes %s nRanks %s: defer to NCCL",
              coll, (unsigned long long)r->lo, (unsigned long long)r->hi, dim(r->nodes, nodes),
              dim(r->ranks, ranks));
    return;
  }
  if (r->knobs.channels != DCCL_KEEP)
    snprintf(channels, sizeof(channels), "%d channels", r->knobs.channels);
  else
    snprintf(channels, sizeof(channels), "NCCL's channels");
  DCCL_INFO(c->log, "DynamICCL decision: %s %llu-%llu B, nNodes %s nRanks %s: %s/%s, %s%s", coll,
            (unsigned long long)r->lo, (unsigned long long)r->hi, dim(r->nodes, nodes),
            dim(r->ranks, ranks), dccl_algo_names[r->knobs.algorithm],
            dccl_proto_names[r->knobs.protocol], channels, bit == LOGGED_UNUSABLE ? " -- not usable here, NCCL's choice stands" : "");
}

static void note_gap(dccl_comm_t* c, int coll, size_t nBytes) {
  if ((unsigned)coll >= DCCL_NUM_COLLS) return;
  if (__atomic_exchange_n(&c->gap_logged[coll], 1, __ATOMIC_RELAXED)) return;
  DCCL_INFO(c->log, "DynamICCL decision: %s %zu B: no rule covers it, NCCL decides (logged once "
            "per collective)", dccl_coll_names[coll], nBytes);
}

/* The policy's rule for this call (NULL: none). */
static const dccl_range_t* policy_rule(dccl_comm_t* c, int coll, size_t nBytes) {
  const dccl_range_t* r = dccl_view_lookup(active_view(c), coll, nBytes);
  if ((!r || r->knobs.algorithm == DCCL_DEFER) && c->log_decisions)
    r ? note(c, r, LOGGED_DEFER) : note_gap(c, coll, nBytes);
  return r && r->knobs.algorithm != DCCL_DEFER ? r : NULL;
}

/* Forces r in the cost table if NCCL marked its entry usable; returns whether it did. */
static int force_in_table(const dccl_range_t* r, float** table, int numAlgo, int numProto,
                          int* nChannels) {
  /* The table is one contiguous float[numAlgo][numProto] (declared float**, it is not). */
  if (!table || numAlgo > MAX_TABLE_ALGOS || numProto > MAX_TABLE_PROTOS || r->knobs.algorithm >= numAlgo ||
      r->knobs.protocol >= numProto)
    return 0;
  float* entry = (float*)table + (size_t)r->knobs.algorithm * (size_t)numProto + (size_t)r->knobs.protocol;
  if (!(*entry >= 0.0f)) return 0; /* unusable here (or NaN): NCCL's choice stands */
  *entry = 0.0f;
  if (r->knobs.channels != DCCL_KEEP && nChannels) *nChannels = r->knobs.channels;
  return 1;
}

/* Records the chunk decided for a call of coll (r NULL: NCCL's own) for getChunkSize. Cheap and
 * free of data-dependent branches once a group is mixed: it runs on every getCollInfo. */
static void note_chunk(dccl_comm_t* c, int coll, const dccl_range_t* r) {
  if (!c || (unsigned)coll >= DCCL_NUM_COLLS) return;
  if (c->chunking) { /* NCCL chunked the last group: this call starts the next */
    memset(c->pending, 0, sizeof(c->pending));
    c->chunking = 0;
  }
  dccl_pending_chunk_t* p = &c->pending[coll];
  if (p->mixed) return; /* calls decided differently: NCCL's chunk, whatever comes */
  const dccl_knobs_t* k = r ? &r->knobs : &dccl_knobs_keep;
  if (!p->set) {
    *p = (dccl_pending_chunk_t){k->algorithm, k->protocol, 0, 1, k->chunk_bytes};
    return;
  }
  p->mixed = (int8_t)((p->chunk_bytes != k->chunk_bytes) | (p->algorithm != k->algorithm) |
                      (p->protocol != k->protocol));
}

static void apply(void* context, int coll, size_t nBytes, float** table, int numAlgo, int numProto,
                  int* nChannels) {
  dccl_comm_t* c = context;
  if (dccl_any_pins()) {
    const dccl_range_t* pin = dccl_pins_lookup(coll, nBytes);
    int forced = pin && force_in_table(pin, table, numAlgo, numProto, nChannels);
    if (pin) {
      dccl_count_pin(forced);
      note_chunk(c, coll, forced ? pin : NULL);
    }
    dccl_pins_done();
    if (pin) return; /* a pin the table refuses leaves the call to NCCL, not to the policy */
  }
  if (!c || !c->policy || !table) {
    note_chunk(c, coll, NULL);
    return;
  }
  const dccl_range_t* r = policy_rule(c, coll, nBytes);
  int forced = r && force_in_table(r, table, numAlgo, numProto, nChannels);
  note_chunk(c, coll, forced ? r : NULL);
  if (r && c->log_decisions) note(c, r, forced ? LOGGED_APPLIED : LOGGED_UNUSABLE);
}

/* What the v2 ABI may force: NCCL 2.21 takes the answer unchecked, so only a pair NCCL 2.21
 * implements for this collective, whose features the exported system had and which NCCL reports
 * supported for this call (CollNet, NVLS). A policy rule must also be for exactly this system
 * (nodes and ranks both exact): a "*" rule was not exported for it. */
static int force_v2_ok(const dccl_range_t* r, int coll, unsigned features, int collNetSupport,
                       int nvlsSupport, int is_pin) {
  if (r->knobs.algorithm < 0 || r->knobs.algorithm >= DCCL_NUM_ALGOS || r->knobs.protocol < 0 || r->knobs.protocol >= DCCL_NUM_PROTOS)
    return 0;
  unsigned need = dccl_v2_allowed[r->knobs.algorithm].feature | dccl_v2_proto_feature[r->knobs.protocol];
  if (!(dccl_v2_allowed[r->knobs.algorithm].colls >> coll & 1u) ||
      !(dccl_v2_allowed[r->knobs.algorithm].protos >> r->knobs.protocol & 1u) || (features & need) != need)
    return 0;
  if ((need & DCCL_FEATURE_COLLNET) && collNetSupport != 1) return 0;
  if ((need & DCCL_FEATURE_NVLS) && nvlsSupport != 1) return 0;
  return is_pin || (r->nodes != DCCL_ANY && r->ranks != DCCL_ANY);
}

static ncclResult_t coll_v2(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport,
                            int nvlsSupport, int numPipeOps, int* algorithm, int* protocol,
                            int* nChannels) {
  (void)numPipeOps;
  dccl_comm_t* c = context;
  if (!algorithm || !protocol || (unsigned)collType >= DCCL_NUM_COLLS) return DCCL_NCCL_SUCCESS;
  unsigned features = c && c->policy ? c->policy->features : 0;
  const dccl_range_t* r = NULL;
  int ok = 0, pinned = 0;
  if (dccl_any_pins()) {
    const dccl_range_t* pin = dccl_pins_lookup(collType, nBytes);
    if (pin) {
      pinned = 1;
      ok = force_v2_ok(pin, collType, features, collNetSupport, nvlsSupport, 1);
      dccl_count_pin(ok);
      if (ok) *algorithm = pin->knobs.algorithm, *protocol = pin->knobs.protocol;
      if (ok && pin->knobs.channels != DCCL_KEEP && nChannels) *nChannels = pin->knobs.channels;
    }
    dccl_pins_done();
  }
  if (pinned || !c || !c->policy) return DCCL_NCCL_SUCCESS;
  r = policy_rule(c, collType, nBytes);
  if (!r) return DCCL_NCCL_SUCCESS;
  ok = force_v2_ok(r, collType, features, collNetSupport, nvlsSupport, 0);
  if (ok) {
    *algorithm = r->knobs.algorithm;
    *protocol = r->knobs.protocol;
    if (r->knobs.channels != DCCL_KEEP && nChannels) *nChannels = r->knobs.channels;
  }
  if (c->log_decisions) note(c, r, ok ? LOGGED_APPLIED : LOGGED_UNUSABLE);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t coll_v3(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                            float** table, int numAlgo, int numProto, int* nChannels) {
  (void)numPipeOps;
  apply(context, collType, nBytes, table, numAlgo, numProto, nChannels);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t coll_v4(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                            float** table, int numAlgo, int numProto, int regBuff, int* nChannels) {
  (void)numPipeOps;
  (void)regBuff; /* rank-local (buffer registration): deciding on it could split a communicator */
  apply(context, collType, nBytes, table, numAlgo, numProto, nChannels);
  return DCCL_NCCL_SUCCESS;
}

/* v6: the chunk of a piece of the call getCollInfo decided (dccl_pending_chunk_t), where the piece
 * runs the decided algorithm and protocol and the chunk is at least the protocol's grain (NCCL
 * rounds down to it: less would be no chunk at all); otherwise NCCL's own. NCCL clamps it to its
 * buffer (src/enqueue.cc @2.30.7, calcCollChunking). */
static ncclResult_t chunk_v6(void* context, ncclFunc_t collType, size_t nBytes, int algorithm,
                             int protocol, int nChannels, size_t* chunkSize) {
  static const int grain[DCCL_NUM_PROTOS] = DCCL_PROTO_GRAIN_BYTES;
  dccl_comm_t* c = context;
  if (!c || !chunkSize || (unsigned)collType >= DCCL_NUM_COLLS) return DCCL_NCCL_SUCCESS;
  c->chunking = 1;
  const dccl_pending_chunk_t* p = &c->pending[collType];
  if (!p->set || p->mixed || p->chunk_bytes == DCCL_KEEP || p->algorithm != algorithm ||
      p->protocol != protocol || (unsigned)protocol >= DCCL_NUM_PROTOS ||
      p->chunk_bytes < grain[protocol])
    return DCCL_NCCL_SUCCESS;
  if (c->log_decisions &&
      __atomic_exchange_n(&c->chunk_logged[collType], p->chunk_bytes, __ATOMIC_RELAXED) != p->chunk_bytes)
    DCCL_INFO(c->log, "DynamICCL chunk: %s %s/%s piece of %zu B on %d channel(s): %zu -> %d B "
              "(logged when it changes)", dccl_coll_names[collType], dccl_algo_names[algorithm],
              dccl_proto_names[protocol], nBytes, nChannels, *chunkSize, (int)p->chunk_bytes);
  *chunkSize = (size_t)p->chunk_bytes;
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

DCCL_EXPORT int dynamiccl_set_context(const char* slice_spec) {
  return dccl_set_context(slice_spec);
}

DCCL_EXPORT int dynamiccl_policy_hash(char* out, size_t len) {
  return dccl_loaded_policy_hash(out, len);
}

DCCL_EXPORT const char* dynamiccl_plugin_version(void) { return DCCL_PLUGIN_VERSION; }

DCCL_EXPORT int dynamiccl_pin(int collective, uint64_t min_bytes, uint64_t max_bytes, int algorithm,
                              int protocol, int channels) {
  return dccl_pin(collective, min_bytes, max_bytes, algorithm, protocol, channels);
}

DCCL_EXPORT int dynamiccl_pin_knobs(int collective, uint64_t min_bytes, uint64_t max_bytes,
                                    const long long* knobs, int nknobs) {
  return dccl_pin_knobs(collective, min_bytes, max_bytes, knobs, nknobs);
}

DCCL_EXPORT int dynamiccl_pin_counts(uint64_t* forced, uint64_t* refused) {
  dccl_pin_counts(forced, refused);
  return 0;
}

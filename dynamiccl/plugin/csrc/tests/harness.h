/* Shared by the C test programs: load the plugin the way NCCL's loader does (dlopen with
 * RTLD_NOW | RTLD_LOCAL, then dlsym of one ncclTunerPlugin_vN), call it through the version's own
 * struct and argument order, fill a cost table the way NCCL does (every entry -1.0, then the
 * predicted time in microseconds for each usable algorithm/protocol), and answer ncclGetVersion as
 * NCCL does (nccl_version_standin.h; link with -rdynamic). Header-only on purpose: each test
 * program is one translation unit plus this file. */
#ifndef DYNAMICCL_TEST_HARNESS_H
#define DYNAMICCL_TEST_HARNESS_H

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nccl_tuner_abi.h"
#include "../policy_format.h" /* NCCL's table sizes and names (generated from dynamiccl.system.nccl) */
#include "nccl_version_standin.h"

typedef struct {
  int version;
  const void* table; /* the exported struct for that version */
} plugin_t;

static void* g_plugin_handle;

/* The exported symbol `prefix``version` of the plugin at path (opened once), NULL with a message. */
static const void* plugin_symbol(const char* path, const char* prefix, int version) {
  if (!g_plugin_handle) g_plugin_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!g_plugin_handle) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return NULL;
  }
  char sym[48];
  snprintf(sym, sizeof(sym), "%s%d", prefix, version);
  const void* found = dlsym(g_plugin_handle, sym);
  if (!found) fprintf(stderr, "dlsym %s: %s\n", sym, dlerror());
  return found;
}

/* What NCCL does when a process's last communicator is destroyed: close the plugin (it unloads
 * unless it keeps itself loaded), to be opened afresh by the next plugin_load. */
static inline void plugin_unload(void) {
  if (g_plugin_handle) dlclose(g_plugin_handle);
  g_plugin_handle = NULL;
}

static int plugin_load(const char* path, int version, plugin_t* out) {
  out->version = version;
  out->table = plugin_symbol(path, "ncclTunerPlugin_v", version);
  return out->table ? 0 : -1;
}

/* The run-time entry points (after plugin_load), as dynamiccl.runtime finds them with ctypes. */
typedef int (*set_context_fn)(const char*);
typedef int (*policy_hash_fn)(char*, size_t);
typedef const char* (*version_fn)(void);
typedef int (*pin_fn)(int, uint64_t, uint64_t, int, int, int);
typedef int (*pin_knobs_fn)(int, uint64_t, uint64_t, const long long*, int);
typedef struct {
  set_context_fn set_context;
  policy_hash_fn policy_hash;
  version_fn version;
  pin_fn pin;
  pin_knobs_fn pin_knobs;
} runtime_api_t;

static int runtime_api(runtime_api_t* api) {
  if (!g_plugin_handle) return -1;
  *(void**)&api->set_context = dlsym(g_plugin_handle, "dynamiccl_set_context");
  *(void**)&api->policy_hash = dlsym(g_plugin_handle, "dynamiccl_policy_hash");
  *(void**)&api->version = dlsym(g_plugin_handle, "dynamiccl_plugin_version");
  *(void**)&api->pin = dlsym(g_plugin_handle, "dynamiccl_pin");
  *(void**)&api->pin_knobs = dlsym(g_plugin_handle, "dynamiccl_pin_knobs");
  return api->set_context && api->policy_hash && api->version && api->pin && api->pin_knobs ? 0 : -1;
}

/* NCCL's logger as the tests hand it to the plugin: the message formatted, then given to the
 * program's sink (set before init; NULL drops it). NCCL's logger is thread-safe; a sink must be. */
typedef void (*log_sink_t)(int level, unsigned long flags, const char* msg);
static log_sink_t g_log_sink;

static void harness_logger(int level, unsigned long flags, const char* file, int line,
                           const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  (void)file, (void)line;
  if (g_log_sink) g_log_sink(level, flags, msg);
}

/* init with the version's argument order: v2-v4 (nRanks, nNodes, logger, &ctx), v5/v6 (&ctx,
 * commId, nRanks, nNodes, logger, nvlDomainInfo, constants). */
static int plugin_init(const plugin_t* p, size_t nRanks, size_t nNodes, ncclDebugLogger_t log,
                       void** ctx, unsigned char* constants) {
  dccl_nvl_domain_info_t nvl = {(int)nNodes, nNodes ? (int)(nRanks / nNodes) : 0,
                                nNodes ? (int)(nRanks / nNodes) : 0};
  switch (p->version) {
    case 2: return ((const dccl_tuner_v2_t*)p->table)->init(nRanks, nNodes, log, ctx);
    case 3: return ((const dccl_tuner_v3_t*)p->table)->init(nRanks, nNodes, log, ctx);
    case 4: return ((const dccl_tuner_v4_t*)p->table)->init(nRanks, nNodes, log, ctx);
    case 5:
      return ((const dccl_tuner_v5_t*)p->table)->init(ctx, 0x1234abcdULL, nRanks, nNodes, log, &nvl,
                                                      (dccl_tuner_constants_t*)constants);
    default:
      return ((const dccl_tuner_v6_t*)p->table)->init(ctx, 0x1234abcdULL, nRanks, nNodes, log, &nvl,
                                                      (dccl_tuner_constants_t*)constants);
  }
}

/* getCollInfo for v3..v6 (the cost-table ABIs). */
static int plugin_coll(const plugin_t* p, void* ctx, int coll, size_t nBytes, int pipe, int reg,
                       float* table, int numAlgo, int numProto, int* nChannels) {
  float** t = (float**)(void*)table; /* NCCL passes the array's address typed as float** */
  switch (p->version) {
    case 3:
      return ((const dccl_tuner_v3_t*)p->table)->getCollInfo(ctx, coll, nBytes, pipe, t, numAlgo,
                                                             numProto, nChannels);
    case 4:
      return ((const dccl_tuner_v4_t*)p->table)->getCollInfo(ctx, coll, nBytes, pipe, t, numAlgo,
                                                             numProto, reg, nChannels);
    case 5:
      return ((const dccl_tuner_v5_t*)p->table)->getCollInfo(ctx, coll, nBytes, pipe, t, numAlgo,
                                                             numProto, reg, nChannels);
    default:
      return ((const dccl_tuner_v6_t*)p->table)->getCollInfo(ctx, coll, nBytes, pipe, t, numAlgo,
                                                             numProto, reg, nChannels);
  }
}

static int plugin_coll_v2(const plugin_t* p, void* ctx, int coll, size_t nBytes, int collnet,
                          int nvls, int pipe, int* algo, int* proto, int* nChannels) {
  return ((const dccl_tuner_v2_t*)p->table)->getCollInfo(ctx, coll, nBytes, collnet, nvls, pipe,
                                                         algo, proto, nChannels);
}

static int plugin_finalize(const plugin_t* p, void* ctx) {
  switch (p->version) {
    case 2: return ((const dccl_tuner_v2_t*)p->table)->destroy(ctx);
    case 3: return ((const dccl_tuner_v3_t*)p->table)->destroy(ctx);
    case 4: return ((const dccl_tuner_v4_t*)p->table)->destroy(ctx);
    case 5: return ((const dccl_tuner_v5_t*)p->table)->finalize(ctx);
    default: return ((const dccl_tuner_v6_t*)p->table)->finalize(ctx);
  }
}

/* NCCL's fill: -1.0 everywhere, then a time in microseconds for each usable entry. */
static void fill_table(float* t, int numAlgo, int numProto, const unsigned char* usable) {
  for (int i = 0; i < numAlgo * numProto; i++) t[i] = usable[i] ? 5.0f + 3.5f * (float)i : -1.0f;
}

/* Checks what the plugin did to the table: only usable entries may change, only to 0.0, at most
 * one. Returns the forced index (-1 if none) or -2 on a violation (message in why). */
static int table_change(const float* before, const float* after, int n, char* why, size_t len) {
  int forced = -1;
  for (int i = 0; i < n; i++) {
    if (memcmp(&before[i], &after[i], sizeof(float)) == 0) continue;
    if (!(before[i] >= 0.0f)) {
      snprintf(why, len, "entry %d was unusable (%g) and became %g", i, before[i], after[i]);
      return -2;
    }
    if (after[i] != 0.0f || forced != -1) {
      snprintf(why, len, "entry %d changed from %g to %g", i, before[i], after[i]);
      return -2;
    }
    forced = i;
  }
  return forced;
}

#endif

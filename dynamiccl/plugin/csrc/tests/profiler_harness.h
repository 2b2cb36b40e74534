/* Shared by the profiler's C test programs: load the plugin's ncclProfiler_vN the way NCCL's loader
 * does (dlopen RTLD_NOW | RTLD_LOCAL, dlsym), build descriptors of that version's layout and call
 * the plugin in NCCL's order (NCCL 2.28.9 src/plugin/profiler.cc, src/transport/profiler.cc):
 *
 *   group start, coll start (plan launch), coll stop (enqueued), group stop; then per channel, from
 *   the proxy thread: kernelCh start (pTimer = channel start), KernelChStop state (pTimer = stop),
 *   kernelCh stop.
 *
 * Header-only: each test program is one translation unit plus this file. */
#ifndef DYNAMICCL_PROFILER_HARNESS_H
#define DYNAMICCL_PROFILER_HARNESS_H

#include "../nccl_profiler_abi.h"
#include "../profiler_format.h" /* event types, names (generated from dynamiccl.system.nccl) */
#include "harness.h"             /* dlopen as NCCL does, the logger */

typedef struct {
  int version; /* 4, 5 or 6 */
  const void* table;
} profiler_t;

static int profiler_load(const char* path, int version, profiler_t* out) {
  out->version = version;
  out->table = plugin_symbol(path, "ncclProfiler_v", version);
  return out->table ? 0 : -1;
}

static const dccl_profiler_v5_t* v5(const profiler_t* p) { return p->table; }
static const dccl_profiler_v4_t* v4(const profiler_t* p) { return p->table; }

static int profiler_init(const profiler_t* p, void** ctx, uint64_t comm_id, int* mask,
                         const char* name, int nnodes, int nranks, int rank, ncclDebugLogger_t log) {
  if (p->version == 4) return v4(p)->init(ctx, mask, name, comm_id, nnodes, nranks, rank, log);
  return v5(p)->init(ctx, comm_id, mask, name, nnodes, nranks, rank, log);
}

static int profiler_finalize(const profiler_t* p, void* ctx) {
  return p->version == 4 ? v4(p)->finalize(ctx) : v5(p)->finalize(ctx);
}

static int profiler_stop(const profiler_t* p, void* handle) {
  return p->version == 4 ? v4(p)->stopEvent(handle) : v5(p)->stopEvent(handle);
}

static int profiler_state(const profiler_t* p, void* handle, int state, dccl_prof_state_args_t* a) {
  return p->version == 4 ? v4(p)->recordEventState(handle, state, a)
                         : v5(p)->recordEventState(handle, state, a);
}

/* A descriptor of either layout, zeroed as NCCL's `= { 0 }` does. */
typedef union {
  dccl_prof_descr_v5_t d5;
  dccl_prof_descr_v4_t d4;
} descr_t;

static void descr_init(const profiler_t* p, descr_t* d, uint64_t type, void* parent, int rank) {
  memset(d, 0, sizeof(*d));
  if (p->version == 4) {
    d->d4.type = (uint8_t)type;
    d->d4.parentObj = parent;
    d->d4.rank = rank;
  } else {
    d->d5.type = type;
    d->d5.parentObj = parent;
    d->d5.rank = rank;
  }
}

static dccl_prof_coll_t* descr_coll(const profiler_t* p, descr_t* d) {
  return p->version == 4 ? &d->d4.coll : &d->d5.coll;
}

static dccl_prof_kernel_ch_t* descr_channel(const profiler_t* p, descr_t* d) {
  return p->version == 4 ? &d->d4.kernelCh : &d->d5.kernelCh;
}

static int profiler_start(const profiler_t* p, void* ctx, void** handle, descr_t* d) {
  return p->version == 4 ? v4(p)->startEvent(ctx, handle, &d->d4) : v5(p)->startEvent(ctx, handle, &d->d5);
}

/* One collective as NCCL describes it. Names are NCCL's own spellings ("AllReduce", "ncclFloat32",
 * "RING", "SIMPLE"); channel i runs on channel id first_channel + i. */
typedef struct {
  const char *func, *datatype, *algo, *proto;
  size_t count;
  uint64_t seq;
  int nchannels, first_channel, nwarps;
} call_t;

static int start_call(const profiler_t* p, void* ctx, const call_t* c, int rank, void** handle) {
  descr_t d;
  descr_init(p, &d, DCCL_PROF_EVENT_COLL, NULL, rank);
  dccl_prof_coll_t* coll = descr_coll(p, &d);
  coll->seqNumber = c->seq;
  coll->func = c->func;
  coll->count = c->count;
  coll->datatype = c->datatype;
  coll->nChannels = (uint8_t)c->nchannels;
  coll->nWarps = (uint8_t)c->nwarps;
  coll->algo = c->algo;
  coll->proto = c->proto;
  *handle = (void*)0x1; /* NCCL does not clear it; the plugin must set it */
  return profiler_start(p, ctx, handle, &d);
}

static int start_channel(const profiler_t* p, void* ctx, void* parent, int channel, uint64_t ptimer,
                         void** handle) {
  descr_t d;
  descr_init(p, &d, DCCL_PROF_EVENT_KERNEL_CH, parent, 0);
  descr_channel(p, &d)->channelId = (uint8_t)channel;
  descr_channel(p, &d)->pTimer = ptimer;
  *handle = (void*)0x1;
  return profiler_start(p, ctx, handle, &d);
}

/* A channel's end as the proxy reports it: the stop time, then the stop. Returns the first error. */
static int stop_channel(const profiler_t* p, void* handle, uint64_t ptimer) {
  if (!handle) return 0;
  dccl_prof_state_args_t a;
  memset(&a, 0, sizeof(a));
  a.kernelCh.pTimer = ptimer;
  int rc = profiler_state(p, handle, DCCL_PROF_STATE_KERNEL_CH_STOP, &a);
  int rc2 = profiler_stop(p, handle);
  return rc ? rc : rc2;
}

/* The whole sequence NCCL runs for one collective whose channel i runs on the GPU from
 * t0 + i * skew to t0 + i * skew + duration. Any non-zero return is returned (NCCL would ignore
 * it; the plugin must never give one). */
static int nccl_collective(const profiler_t* p, void* ctx, const call_t* c, uint64_t t0,
                           uint64_t duration, uint64_t skew) {
  void *group = (void*)0x1, *call = NULL, *ch[64];
  descr_t g;
  descr_init(p, &g, 1 /* ncclProfileGroup */, NULL, 0);
  int rc = profiler_start(p, ctx, &group, &g);
  rc |= start_call(p, ctx, c, 0, &call);
  if (call) rc |= profiler_stop(p, call); /* NCCL stops only handles it was given */
  if (group) rc |= profiler_stop(p, group);
  int n = c->nchannels < 64 ? c->nchannels : 64;
  for (int i = 0; i < n; i++)
    rc |= start_channel(p, ctx, call, (c->first_channel + i) % 64, t0 + (uint64_t)i * skew, &ch[i]);
  for (int i = 0; i < n; i++)
    if (ch[i]) rc |= stop_channel(p, ch[i], t0 + (uint64_t)i * skew + duration);
  return rc;
}

#endif

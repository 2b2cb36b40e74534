/* DynamICCL as NCCL's profiler plugin: per communicator and rank, every completed collective into a
 * ring in shared memory (ring.c), with NCCL's own choice and its GPU time. Loaded by stock NCCL
 * through NCCL_PROFILER_PLUGIN (the same library as the tuner: one dlopen handle).
 *
 * How NCCL reports a collective (NCCL 2.28.9 src/plugin/profiler.cc, src/transport/profiler.cc,
 * src/enqueue.cc): a coll event starts when its plan is launched and stops once it is enqueued;
 * then, from the proxy thread, one kernelCh event per channel it runs on (channel ids anywhere in
 * 0..63, as many as the descriptor's nChannels) whose parent is the coll event: started with the
 * channel's start on the GPU's global timer, a KernelChStop state with its stop, then stopped. The
 * call is complete when its own stop and every channel's stop have arrived, in any order.
 *
 * Rules this file keeps:
 *  - every entry point returns ncclSuccess and never blocks: a full set of slots, a descriptor it
 *    cannot read, a channel out of order or a stop for an event no longer live is counted in the
 *    ring's header (DROP_REASONS) and otherwise ignored;
 *  - nothing is allocated after init: each communicator owns DCCL_PROF_SLOTS slots (a call in
 *    flight, its channels inside), claimed and released with atomics;
 *  - the first word of every handle given to NCCL says what it is (a call or a channel);
 *  - without DYNAMICCL_PROFILE a communicator records nothing and the activation mask NCCL shares
 *    by all communicators is left as it is.
 *
 * Environment: DYNAMICCL_PROFILE (directory of the rings; unset = off), DYNAMICCL_PROFILE_RECORDS
 * (records per ring). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "nccl_profiler_abi.h"
#include "profiler_format.h"
#include "ring.h"

#define DCCL_EXPORT __attribute__((visibility("default")))
_Static_assert((DCCL_PROF_SLOTS & (DCCL_PROF_SLOTS - 1)) == 0, "slots: a power of two");
/* Slots tried from the hint before a call is dropped (or a stale one taken over). */
#define SLOT_PROBES 8

enum { TAG_FREE = 0, TAG_CALL = 0x6c6c6143, TAG_CHANNEL = 0x6e616843, TAG_CHANNEL_STOPPED = 0x706f7453 };

typedef struct {
  uint32_t tag;     /* TAG_CHANNEL while running, TAG_CHANNEL_STOPPED once stopped */
  uint8_t channel;  /* its index in the call's ch[] */
  uint8_t has_stop; /* KernelChStop arrived */
  uint64_t start, stop;
} channel_t;

typedef struct prof_comm prof_comm_t;

typedef struct {
  uint32_t tag;     /* TAG_CALL while NCCL may still refer to it */
  uint32_t busy;    /* claimed: 1 from the call's start until its record is out */
  uint32_t pending; /* stops still to come: the call's own and one per channel */
  uint32_t coll_stopped, channels_started, timed, broken;
  uint64_t started_ns; /* host time of the start, for the stale check */
  uint64_t gpu_start, gpu_stop, channel_mask;
  prof_comm_t* comm;
  dccl_ring_record_t rec; /* what the call becomes */
  channel_t ch[DCCL_PROF_MAX_CHANNELS];
} slot_t;

struct prof_comm {
  dccl_ring_t ring;
  slot_t* slots;
  uint64_t hint; /* the slot claimed last */
  ncclDebugLogger_t log;
};

/* ---- names NCCL's descriptors carry -> ids ---------------------------------------------------- */

/* NCCL hands out pointers to its own string constants, so the pointer that spelled a name last
 * time is tried first, and checked: one short compare instead of a scan. */
static const char* g_coll_seen[DCCL_PROF_NUM_COLLS];
static const char* g_algo_seen[DCCL_PROF_NUM_ALGOS];
static const char* g_proto_seen[DCCL_PROF_NUM_PROTOS];
static const char* g_dtype_seen[DCCL_PROF_NUM_DTYPES];

/* Reads at most strlen(name) + 1 bytes of s. */
static int same_name(const char* s, const char* name) { return strncmp(s, name, 32) == 0; }

static int name_id(const char* s, const char* const* names, const char** seen, int n) {
  if (!s) return -1;
  for (int i = 0; i < n; i++)
    if (__atomic_load_n(&seen[i], __ATOMIC_RELAXED) == s && same_name(s, names[i])) return i;
  for (int i = 0; i < n; i++)
    if (same_name(s, names[i])) {
      __atomic_store_n(&seen[i], s, __ATOMIC_RELAXED);
      return i;
    }
  return -1;
}

/* The record a coll descriptor describes; 0 ok, -1 something it names is unknown. */
static int describe(const dccl_prof_coll_t* d, dccl_ring_record_t* rec) {
  int coll = name_id(d->func, dccl_prof_coll_names, g_coll_seen, DCCL_PROF_NUM_COLLS);
  int dtype = name_id(d->datatype, dccl_prof_dtype_names, g_dtype_seen, DCCL_PROF_NUM_DTYPES);
  int algo = name_id(d->algo, dccl_prof_algo_names, g_algo_seen, DCCL_PROF_NUM_ALGOS);
  int proto = name_id(d->proto, dccl_prof_proto_names, g_proto_seen, DCCL_PROF_NUM_PROTOS);
  if (coll < 0 || dtype < 0 || algo < 0 || proto < 0 || d->nChannels > DCCL_PROF_MAX_CHANNELS)
    return -1;
  uint64_t size = dccl_prof_dtype_bytes[dtype];
  if (d->count > UINT64_MAX / size) return -1;
  rec->seq = d->seqNumber;
  rec->bytes = d->count * size;
  rec->coll = (uint8_t)coll;
  rec->algo = (int8_t)algo;
  rec->proto = (int8_t)proto;
  rec->channels = d->nChannels;
  rec->warps = d->nWarps;
  rec->dtype = (uint8_t)dtype;
  return 0;
}

/* ---- slots ------------------------------------------------------------------------------------ */

static slot_t* slot_of(channel_t* c) {
  return (slot_t*)((char*)(c - c->channel) - offsetof(slot_t, ch));
}

static int claim(slot_t* s) {
  uint32_t free_ = 0;
  return __atomic_compare_exchange_n(&s->busy, &free_, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

/* The record goes out and the slot is free again; called by whoever took pending to zero. */
static void finish(slot_t* s, int stale) {
  dccl_ring_record_t rec = s->rec;
  uint64_t start = __atomic_load_n(&s->gpu_start, __ATOMIC_RELAXED);
  uint64_t stop = __atomic_load_n(&s->gpu_stop, __ATOMIC_RELAXED);
  uint32_t timed = __atomic_load_n(&s->timed, __ATOMIC_RELAXED);
  rec.timed_channels = (uint8_t)timed;
  if (!stale && rec.channels && timed == rec.channels && !__atomic_load_n(&s->broken, __ATOMIC_RELAXED) &&
      stop >= start) {
    rec.flags = DCCL_RING_FLAG_TIMED;
    rec.gpu_start_ns = start;
    rec.gpu_stop_ns = stop;
  } else if (rec.channels) {
    dccl_ring_drop(&s->comm->ring, stale ? DCCL_DROP_STALE : DCCL_DROP_UNTIMED);
  }
  dccl_ring_publish(&s->comm->ring, &rec);
  uint64_t mask = __atomic_load_n(&s->channel_mask, __ATOMIC_RELAXED);
  for (int c = 0; mask; c++, mask >>= 1)
    if (mask & 1) __atomic_store_n(&s->ch[c].tag, TAG_FREE, __ATOMIC_RELAXED);
  __atomic_store_n(&s->tag, TAG_FREE, __ATOMIC_RELAXED);
  __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
}

/* One of the stops the call waits for arrived; the last one publishes it. */
static void release_one(slot_t* s) {
  uint32_t p = __atomic_load_n(&s->pending, __ATOMIC_ACQUIRE);
  do {
    if (p == 0) { /* given up as stale meanwhile */
      dccl_ring_drop(&s->comm->ring, DCCL_DROP_HANDLE);
      return;
    }
  } while (!__atomic_compare_exchange_n(&s->pending, &p, p - 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  if (p == 1) finish(s, 0);
}

/* A slot whose call has waited for its channels longer than DCCL_PROF_STALE_NS is taken over:
 * its call is published untimed and the slot stays claimed for the caller. */
static int take_stale(slot_t* s, uint64_t now) {
  uint32_t p = __atomic_load_n(&s->pending, __ATOMIC_ACQUIRE);
  if (p == 0 || now - __atomic_load_n(&s->started_ns, __ATOMIC_RELAXED) < DCCL_PROF_STALE_NS) return 0;
  if (!__atomic_compare_exchange_n(&s->pending, &p, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return 0;
  finish(s, 1);
  return claim(s);
}

/* A free slot near the last one claimed: with a few calls in flight the same few slots (and their
 * cache lines) serve every call. The hint is only a hint: racing writers store nearby indices. */
static slot_t* free_slot(prof_comm_t* c, uint64_t now) {
  uint64_t h = __atomic_load_n(&c->hint, __ATOMIC_RELAXED);
  for (uint64_t i = 0; i < SLOT_PROBES; i++) {
    slot_t* s = &c->slots[(h + i) & (DCCL_PROF_SLOTS - 1)];
    if (claim(s)) {
      __atomic_store_n(&c->hint, h + i, __ATOMIC_RELAXED);
      return s;
    }
  }
  slot_t* s = &c->slots[h & (DCCL_PROF_SLOTS - 1)];
  if (!take_stale(s, now)) {
    __atomic_store_n(&c->hint, h + SLOT_PROBES, __ATOMIC_RELAXED); /* look further next time */
    return NULL;
  }
  return s;
}

/* ---- events ---------------------------------------------------------------------------------- */

static void start_call(prof_comm_t* c, void** handle, const dccl_prof_coll_t* d) {
  dccl_ring_record_t rec;
  memset(&rec, 0, sizeof(rec));
  if (describe(d, &rec) != 0) {
    dccl_ring_drop(&c->ring, DCCL_DROP_DESCRIPTOR);
    return;
  }
  uint64_t now = dccl_realtime_ns();
  slot_t* s = free_slot(c, now);
  if (!s) {
    dccl_ring_drop(&c->ring, DCCL_DROP_NO_SLOT);
    return;
  }
  rec.host_start_ns = now;
  s->comm = c; /* set on first use: init touches no slot, so its pages are mapped as calls need them */
  s->rec = rec;
  __atomic_store_n(&s->started_ns, now, __ATOMIC_RELAXED);
  __atomic_store_n(&s->gpu_start, UINT64_MAX, __ATOMIC_RELAXED);
  __atomic_store_n(&s->gpu_stop, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&s->channel_mask, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&s->coll_stopped, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&s->channels_started, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&s->timed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&s->broken, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&s->pending, (uint32_t)rec.channels + 1, __ATOMIC_RELEASE);
  __atomic_store_n(&s->tag, TAG_CALL, __ATOMIC_RELEASE);
  __atomic_fetch_add(&c->ring.header->started, 1, __ATOMIC_RELAXED);
  *handle = s;
}

static void start_channel(prof_comm_t* c, void** handle, void* parent, const dccl_prof_kernel_ch_t* d) {
  /* the parent must be one of this communicator's slots holding a live call */
  uintptr_t base = (uintptr_t)c->slots, p = (uintptr_t)parent;
  if (p < base || p >= base + sizeof(slot_t) * DCCL_PROF_SLOTS || (p - base) % sizeof(slot_t)) {
    if (parent) dccl_ring_drop(&c->ring, DCCL_DROP_HANDLE);
    return; /* no parent: a call this plugin did not record */
  }
  slot_t* s = parent;
  if (__atomic_load_n(&s->tag, __ATOMIC_ACQUIRE) != TAG_CALL) {
    dccl_ring_drop(&c->ring, DCCL_DROP_HANDLE);
    return;
  }
  unsigned id = d->channelId;
  uint32_t order = __atomic_fetch_add(&s->channels_started, 1, __ATOMIC_RELAXED);
  uint32_t was = TAG_FREE;
  if (id >= DCCL_PROF_MAX_CHANNELS || order >= s->rec.channels ||
      !__atomic_compare_exchange_n(&s->ch[id].tag, &was, TAG_CHANNEL, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_RELAXED)) {
    /* more channels than the call said, or one twice: its time cannot be trusted */
    __atomic_store_n(&s->broken, 1, __ATOMIC_RELAXED);
    return;
  }
  channel_t* ch = &s->ch[id];
  ch->channel = (uint8_t)id;
  __atomic_store_n(&ch->has_stop, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&ch->start, d->pTimer, __ATOMIC_RELAXED);
  __atomic_fetch_or(&s->channel_mask, 1ull << id, __ATOMIC_RELAXED);
  uint64_t first = __atomic_load_n(&s->gpu_start, __ATOMIC_RELAXED);
  while (d->pTimer < first &&
         !__atomic_compare_exchange_n(&s->gpu_start, &first, d->pTimer, 1, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
  }
  *handle = ch;
}

static void start_event(void* context, void** handle, uint64_t type, void* parent,
                        const dccl_prof_coll_t* coll, const dccl_prof_kernel_ch_t* channel) {
  prof_comm_t* c = context;
  if (type == DCCL_PROF_EVENT_COLL) start_call(c, handle, coll);
  else if (type == DCCL_PROF_EVENT_KERNEL_CH) start_channel(c, handle, parent, channel);
  /* NCCL also starts group events for the collectives asked for: not recorded */
}

static ncclResult_t start_v5(void* context, void** eHandle, dccl_prof_descr_v5_t* d) {
  if (!eHandle) return DCCL_NCCL_SUCCESS;
  *eHandle = NULL;
  if (context && d) start_event(context, eHandle, d->type, d->parentObj, &d->coll, &d->kernelCh);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t start_v4(void* context, void** eHandle, dccl_prof_descr_v4_t* d) {
  if (!eHandle) return DCCL_NCCL_SUCCESS;
  *eHandle = NULL;
  if (context && d) start_event(context, eHandle, d->type, d->parentObj, &d->coll, &d->kernelCh);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t stop_event(void* handle) {
  if (!handle) return DCCL_NCCL_SUCCESS;
  uint32_t tag = __atomic_load_n((uint32_t*)handle, __ATOMIC_ACQUIRE);
  if (tag == TAG_CALL) {
    slot_t* s = handle;
    if (__atomic_exchange_n(&s->coll_stopped, 1, __ATOMIC_ACQ_REL)) {
      dccl_ring_drop(&s->comm->ring, DCCL_DROP_HANDLE);
      return DCCL_NCCL_SUCCESS;
    }
    s->rec.host_stop_ns = dccl_realtime_ns();
    release_one(s);
  } else if (tag == TAG_CHANNEL || tag == TAG_CHANNEL_STOPPED) {
    channel_t* ch = handle;
    slot_t* s = slot_of(ch);
    uint32_t running = TAG_CHANNEL;
    if (!__atomic_compare_exchange_n(&ch->tag, &running, TAG_CHANNEL_STOPPED, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED)) {
      dccl_ring_drop(&s->comm->ring, DCCL_DROP_HANDLE); /* stopped twice */
      return DCCL_NCCL_SUCCESS;
    }
    uint64_t stop = __atomic_load_n(&ch->stop, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&ch->has_stop, __ATOMIC_ACQUIRE) ||
        stop < __atomic_load_n(&ch->start, __ATOMIC_RELAXED)) {
      __atomic_store_n(&s->broken, 1, __ATOMIC_RELAXED);
    } else {
      uint64_t last = __atomic_load_n(&s->gpu_stop, __ATOMIC_RELAXED);
      while (stop > last && !__atomic_compare_exchange_n(&s->gpu_stop, &last, stop, 1,
                                                         __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      }
      __atomic_fetch_add(&s->timed, 1, __ATOMIC_RELAXED);
    }
    release_one(s);
  }
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t record_state(void* handle, dccl_prof_state_t state, dccl_prof_state_args_t* args) {
  if (!handle || state != DCCL_PROF_STATE_KERNEL_CH_STOP) return DCCL_NCCL_SUCCESS;
  uint32_t tag = __atomic_load_n((uint32_t*)handle, __ATOMIC_ACQUIRE);
  if (tag != TAG_CHANNEL && tag != TAG_CHANNEL_STOPPED) return DCCL_NCCL_SUCCESS;
  channel_t* ch = handle;
  if (tag == TAG_CHANNEL_STOPPED || !args || __atomic_load_n(&ch->has_stop, __ATOMIC_RELAXED)) {
    __atomic_store_n(&slot_of(ch)->broken, 1, __ATOMIC_RELAXED); /* late, missing or twice */
    return DCCL_NCCL_SUCCESS;
  }
  __atomic_store_n(&ch->stop, args->kernelCh.pTimer, __ATOMIC_RELAXED);
  __atomic_store_n(&ch->has_stop, 1, __ATOMIC_RELEASE);
  return DCCL_NCCL_SUCCESS;
}

/* ---- init / finalize ------------------------------------------------------------------------- */

/* Records per ring from DYNAMICCL_PROFILE_RECORDS (default when unset); 0 when invalid. */
static uint32_t ring_capacity(ncclDebugLogger_t log) {
  const char* text = getenv(DCCL_ENV_PROFILE_RECORDS);
  if (!text || !*text) return DCCL_RING_DEFAULT_RECORDS;
  char* end;
  unsigned long long n = strtoull(text, &end, 10);
  if (*end || n < DCCL_RING_MIN_RECORDS || n > DCCL_RING_MAX_RECORDS || (n & (n - 1))) {
    DCCL_PROF_WARN(log, "DynamICCL profiler: " DCCL_ENV_PROFILE_RECORDS "=%.40s is not a power of "
                   "two in %u..%u; not recording this communicator", text, DCCL_RING_MIN_RECORDS,
                   DCCL_RING_MAX_RECORDS);
    return 0;
  }
  return (uint32_t)n;
}

static void init_common(void** context, int* mask, uint64_t comm_id, const char* name, int nnodes,
                        int nranks, int rank, ncclDebugLogger_t log, unsigned abi) {
  if (!context) return;
  *context = NULL;
  const char* dir = getenv(DCCL_ENV_PROFILE);
  if (!dir || !*dir) return; /* off: the mask stays as other communicators set it */
  uint32_t capacity = ring_capacity(log);
  prof_comm_t* c = capacity ? calloc(1, sizeof(*c)) : NULL;
  if (c) c->slots = calloc(DCCL_PROF_SLOTS, sizeof(slot_t));
  if (!c || !c->slots) {
    if (c) DCCL_PROF_WARN(log, "DynamICCL profiler: out of memory; not recording this communicator");
    free(c);
    return;
  }
  dccl_ring_owner_t owner = {comm_id, rank, nranks, nnodes, abi, name};
  char err[512];
  if (dccl_ring_create(&c->ring, dir, capacity, &owner, err, sizeof(err)) != 0) {
    DCCL_PROF_WARN(log, "DynamICCL profiler: %s; not recording this communicator", err);
    free(c->slots);
    free(c);
    return;
  }
  c->log = log;
  if (mask) __atomic_fetch_or(mask, DCCL_PROF_EVENT_MASK, __ATOMIC_RELAXED);
  DCCL_PROF_INFO(log, "DynamICCL profiler: recording the collectives of communicator %016llx, rank "
                 "%d of %d, into %s (%u records)", (unsigned long long)comm_id, rank, nranks, dir,
                 capacity);
  *context = c;
}

static ncclResult_t init_v5(void** context, uint64_t commId, int* eActivationMask,
                            const char* commName, int nNodes, int nranks, int rank,
                            ncclDebugLogger_t logfn) {
  init_common(context, eActivationMask, commId, commName, nNodes, nranks, rank, logfn, 5);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t init_v6(void** context, uint64_t commId, int* eActivationMask,
                            const char* commName, int nNodes, int nranks, int rank,
                            ncclDebugLogger_t logfn) {
  init_common(context, eActivationMask, commId, commName, nNodes, nranks, rank, logfn, 6);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t init_v4(void** context, int* eActivationMask, const char* commName,
                            uint64_t commHash, int nNodes, int nranks, int rank,
                            ncclDebugLogger_t logfn) {
  init_common(context, eActivationMask, commHash, commName, nNodes, nranks, rank, logfn, 4);
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t finalize(void* context) {
  prof_comm_t* c = context;
  if (!c) return DCCL_NCCL_SUCCESS;
  for (unsigned i = 0; i < DCCL_PROF_SLOTS; i++) /* calls still waiting for a channel: untimed */
    take_stale(&c->slots[i], UINT64_MAX);
  dccl_ring_header_t* h = c->ring.header;
  unsigned long long n[DCCL_NUM_DROP_REASONS];
  for (int i = 0; i < DCCL_NUM_DROP_REASONS; i++) n[i] = __atomic_load_n(&h->drops[i], __ATOMIC_RELAXED);
  DCCL_PROF_INFO(c->log, "DynamICCL profiler: communicator %016llx rank %d: %llu collectives "
                 "recorded; not recorded: %llu (no free slot), %llu (unknown descriptor); without a "
                 "GPU time: %llu, %llu of them given up after %llu s", (unsigned long long)h->comm_id,
                 h->rank, (unsigned long long)__atomic_load_n(&h->head, __ATOMIC_RELAXED),
                 n[DCCL_DROP_NO_SLOT], n[DCCL_DROP_DESCRIPTOR],
                 n[DCCL_DROP_UNTIMED] + n[DCCL_DROP_STALE], n[DCCL_DROP_STALE],
                 DCCL_PROF_STALE_NS / 1000000000ull);
  dccl_ring_close(&c->ring);
  free(c->slots);
  free(c);
  return DCCL_NCCL_SUCCESS;
}

/* ---- the exported tables --------------------------------------------------------------------- */

#define PROFILER_NAME "DynamICCL"
DCCL_EXPORT const dccl_profiler_v5_t ncclProfiler_v6 = {PROFILER_NAME, init_v6, start_v5, stop_event,
                                                        record_state, finalize};
DCCL_EXPORT const dccl_profiler_v5_t ncclProfiler_v5 = {PROFILER_NAME, init_v5, start_v5, stop_event,
                                                        record_state, finalize};
DCCL_EXPORT const dccl_profiler_v4_t ncclProfiler_v4 = {PROFILER_NAME, init_v4, start_v4, stop_event,
                                                        record_state, finalize};

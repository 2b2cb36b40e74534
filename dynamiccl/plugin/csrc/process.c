/* Process-wide state shared by all communicators (see process.h). */
#define _GNU_SOURCE /* realpath, dladdr, RTLD_NOLOAD, RTLD_NODELETE */
#include "process.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fleet.h"
#include "log.h"
#include "sha256.h"
#include "view.h"

/* ---- the policy, read once per process ----------------------------------------------------- */

/* The first communicator that names a policy reads it; what that read decided (the policy, or NCCL
 * deciding, with the reason) holds for every later communicator of the process, so a file replaced
 * or re-pointed mid-job cannot make communicators of one job decide differently. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_read;                    /* DYNAMICCL_POLICY was read (whatever came of it) */
static dccl_policy_t* g_policy;       /* the policy in force for the process's life, or NULL */
static char g_named[PATH_MAX + 1];    /* DYNAMICCL_POLICY as first given */
static char g_path[PATH_MAX + 1];     /* ... made absolute: the file read */
static struct stat g_stat;            /* that file when read, to notice it changing afterwards */
static int g_stat_ok;
static char g_refusal[640];           /* why NCCL decides instead (g_policy NULL) */
static int g_warned_renamed, g_warned_changed;

/* NCCL unloads its tuner when the last communicator is destroyed and loads it afresh for the next
 * one (src/plugin/tuner.cc); pinning the library keeps what the first read decided for the
 * process's life, not just the library's. */
static void stay_resident(ncclDebugLogger_t log) {
  Dl_info info;
  if (!dladdr((void*)&dccl_acquire_policy, &info) || !info.dli_fname ||
      !dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) /* never closed */
    DCCL_INFO(log, "DynamICCL: could not keep the plugin loaded for the process's life (%s); a "
              "communicator created after NCCL unloads it reads the policy again", dlerror());
}

/* A relative path resolves against each process's working directory, which can differ between
 * nodes: use the absolute path, and say which one. */
static const char* absolute_path(const char* path, char* buf, ncclDebugLogger_t log) {
  if (path[0] == '/' || !realpath(path, buf)) return path; /* a failure is reported by the read */
  DCCL_WARN(log, "DynamICCL: " DCCL_ENV_POLICY "=%s is a relative path; using %s. Give an "
            "absolute path: every rank must read the same file", path, buf);
  return buf;
}

static void first_read(const char* named, const void* nccl_caller, ncclDebugLogger_t log) {
  char err[400] = "", abs[PATH_MAX + 1], hash[DCCL_HASH_HEX_LEN + 1];
  char* data = NULL;
  size_t len = 0;
  dccl_policy_t* parsed = NULL;
  g_read = 1;
  snprintf(g_named, sizeof(g_named), "%s", named);
  snprintf(g_path, sizeof(g_path), "%s", absolute_path(named, abs, log));
  g_stat_ok = stat(g_path, &g_stat) == 0;
  if (dccl_read_file(g_path, &data, &len, err, sizeof(err)) == 0) {
    dccl_sha256_hex(data, len, hash);
    if (dccl_policy_parse(data, len, &parsed, err, sizeof(err)) == 0)
      memcpy(parsed->hash, hash, sizeof(hash));
    free(data);
  }
  stay_resident(log);
  if (!parsed) {
    snprintf(g_refusal, sizeof(g_refusal), "%.300s: %.300s", g_path, err);
    DCCL_WARN(log, "DynamICCL: not using policy file %s: %s. NCCL's own choices stand.", g_path, err);
  } else if (!dccl_admit_policy(parsed, g_path, nccl_caller, log, g_refusal, sizeof(g_refusal))) {
    dccl_policy_free(parsed);
  } else {
    g_policy = parsed;
  }
  dccl_note_net_plugin(g_policy != NULL, log);
}

static int same_file(const struct stat* a, const struct stat* b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
         a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
         a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* A later communicator: says once if DYNAMICCL_POLICY now names another file, or once if the file
 * read has changed since (replaced, or rewritten in place: its ctime moves either way). */
static void check_unchanged(const char* named, ncclDebugLogger_t log) {
  char abs[PATH_MAX + 1];
  struct stat now;
  const char* kept = g_policy ? g_policy->hash : "none: NCCL decides";
  if (strcmp(named, g_named) != 0) {
    const char* path = named[0] == '/' || !realpath(named, abs) ? named : abs;
    if (strcmp(path, g_path) != 0 && !g_warned_renamed++)
      DCCL_WARN(log, "DynamICCL: " DCCL_ENV_POLICY " now names %s, but this process keeps what "
                "it read from %s at its first communicator (sha256 %s): a policy is read once "
                "per process, so every communicator of a job decides alike", path, g_path, kept);
    return;
  }
  if (g_stat_ok && stat(g_path, &now) == 0 && !same_file(&now, &g_stat) && !g_warned_changed++)
    DCCL_WARN(log, "DynamICCL: %s changed after this process read it; this process keeps what it "
              "read (sha256 %s). Replace a policy between jobs: a rank that starts now reads the "
              "new file and decides otherwise than this one", g_path, kept);
}

dccl_policy_t* dccl_acquire_policy(const char* path, const void* nccl_caller,
                                   ncclDebugLogger_t log) {
  pthread_mutex_lock(&g_lock); /* a communicator initialising meanwhile waits for the verdict */
  int first = !g_read;
  if (first) first_read(path, nccl_caller, log);
  else check_unchanged(path, log);
  dccl_policy_t* p = g_policy;
  if (!p && !first)
    DCCL_INFO(log, "DynamICCL: this process does not use its policy (%s); NCCL decides", g_refusal);
  pthread_mutex_unlock(&g_lock);
  return p;
}

int dccl_loaded_policy_hash(char* out, size_t len) {
  int rc = -1;
  pthread_mutex_lock(&g_lock);
  if (g_policy && out && len > DCCL_HASH_HEX_LEN) {
    memcpy(out, g_policy->hash, DCCL_HASH_HEX_LEN + 1);
    rc = 0;
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* ---- the run-time context ------------------------------------------------------------------- */

#define MAX_CONTEXTS 256 /* distinct contexts a process may ever set; entries are never freed */

typedef struct {
  char straggler[DCCL_MAX_BUCKET + 1], c2c[DCCL_MAX_BUCKET + 1];
} context_t;

uint32_t dccl_g_context_word;
static context_t g_contexts[MAX_CONTEXTS];
static int g_ncontexts;

void dccl_context_buckets(uint32_t word, const char** straggler, const char** c2c) {
  *straggler = g_contexts[word - 1].straggler;
  *c2c = g_contexts[word - 1].c2c;
}

int dccl_set_context(const char* spec) {
  context_t want;
  if (dccl_parse_context(spec, want.straggler, want.c2c) != 0) return -1;
  int rc = 1;
  pthread_mutex_lock(&g_lock);
  if (g_policy && dccl_policy_find_slice(g_policy, want.straggler, want.c2c) >= 0) {
    int i = 0;
    while (i < g_ncontexts && memcmp(&g_contexts[i], &want, sizeof(want)) != 0) i++;
    if (i == g_ncontexts && g_ncontexts < MAX_CONTEXTS) g_contexts[g_ncontexts++] = want;
    if (i < g_ncontexts) {
      __atomic_store_n(&dccl_g_context_word, (uint32_t)i + 1, __ATOMIC_RELEASE);
      rc = 0;
    } else {
      rc = -1; /* more distinct contexts than any policy has slices: not a real job */
    }
  }
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* ---- pins ----------------------------------------------------------------------------------- */

typedef struct {
  uint32_t first[DCCL_NUM_COLLS], count[DCCL_NUM_COLLS], n;
  uint64_t lo[DCCL_MAX_PINS];
  dccl_range_t r[]; /* sorted by (collective, lo), disjoint per collective */
} pinset_t;

void* dccl_g_pins;                 /* pinset_t*, NULL when nothing is pinned */
static unsigned long g_pin_readers; /* getCollInfo calls inside a pin lookup right now */
static int g_user_override;
static pthread_mutex_t g_pin_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t g_pins_forced, g_pins_refused;

void dccl_note_user_override(void) { __atomic_store_n(&g_user_override, 1, __ATOMIC_RELAXED); }

void dccl_count_pin(int forced) {
  __atomic_add_fetch(forced ? &g_pins_forced : &g_pins_refused, 1, __ATOMIC_RELAXED);
}

void dccl_pin_counts(uint64_t* forced, uint64_t* refused) {
  if (forced) *forced = __atomic_load_n(&g_pins_forced, __ATOMIC_RELAXED);
  if (refused) *refused = __atomic_load_n(&g_pins_refused, __ATOMIC_RELAXED);
}

const dccl_range_t* dccl_pins_lookup(int coll, uint64_t nbytes) {
  __atomic_add_fetch(&g_pin_readers, 1, __ATOMIC_SEQ_CST);
  const pinset_t* p = __atomic_load_n(&dccl_g_pins, __ATOMIC_SEQ_CST);
  if (!p || (unsigned)coll >= DCCL_NUM_COLLS || __atomic_load_n(&g_user_override, __ATOMIC_RELAXED))
    return NULL;
  return dccl_find_range(p->r + p->first[coll], p->lo + p->first[coll], p->count[coll], nbytes);
}

void dccl_pins_done(void) { __atomic_sub_fetch(&g_pin_readers, 1, __ATOMIC_RELEASE); }

static int cmp_pin(const void* a, const void* b) {
  const dccl_range_t* x = a;
  const dccl_range_t* y = b;
  if (x->coll != y->coll) return x->coll < y->coll ? -1 : 1;
  return (x->lo > y->lo) - (x->lo < y->lo);
}

/* A pinned choice's knobs are what a rule may say: each knob's value in its column's range, or
 * DCCL_KEEP where the knob may keep NCCL's value. */
static int pin_knobs_ok(const long long* values, int n) {
  if (n != DCCL_NUM_KNOBS) return 0; /* a caller built for another knob table */
  for (int i = 0; i < n; i++) {
    int keep = values[i] == DCCL_KEEP && dccl_knob_columns[i].keepable;
    if (!keep && (values[i] < dccl_knob_columns[i].lo || values[i] > dccl_knob_columns[i].hi)) return 0;
  }
  return 1;
}

int dccl_pin(int coll, uint64_t min_bytes, uint64_t max_bytes, int algo, int proto, int channels) {
  long long values[DCCL_NUM_KNOBS];
  for (int i = 0; i < DCCL_NUM_KNOBS; i++) values[i] = DCCL_KEEP;
  values[DCCL_KNOB_ALGORITHM] = algo;
  values[DCCL_KNOB_PROTOCOL] = proto;
  values[DCCL_KNOB_CHANNELS] = channels == 0 ? DCCL_KEEP : channels; /* this entry's 0 keeps */
  if (algo == DCCL_KEEP) return dccl_pin_knobs(coll, min_bytes, max_bytes, NULL, 0);
  if (channels < 0) return -1;
  return dccl_pin_knobs(coll, min_bytes, max_bytes, values, DCCL_NUM_KNOBS);
}

int dccl_pin_knobs(int coll, uint64_t min_bytes, uint64_t max_bytes, const long long* values,
                   int nvalues) {
  if (coll < 0 || coll >= DCCL_NUM_COLLS || min_bytes >= max_bytes) return -1;
  if (values && !pin_knobs_ok(values, nvalues)) return -1;
  dccl_knobs_t knobs = dccl_knobs_keep;
  for (int i = 0; values && i < nvalues; i++) dccl_knobs_set(&knobs, i, values[i]);
  uint64_t lo = min_bytes, hi = max_bytes - 1; /* [min, max) as an inclusive range */
  pthread_mutex_lock(&g_pin_lock);
  pinset_t* old = dccl_g_pins;
  uint32_t had = old ? old->n : 0;
  /* Each old pin loses the part inside [lo, hi], which can split it in two. */
  pinset_t* next = malloc(sizeof(pinset_t) + sizeof(dccl_range_t) * (2 * (size_t)had + 1));
  if (!next) {
    pthread_mutex_unlock(&g_pin_lock);
    return -1;
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < had; i++) {
    dccl_range_t r = old->r[i];
    if (r.coll != coll || r.hi < lo || r.lo > hi) {
      next->r[n++] = r;
      continue;
    }
    if (r.lo < lo) next->r[n] = r, next->r[n++].hi = lo - 1;
    if (r.hi > hi) next->r[n] = r, next->r[n++].lo = hi + 1;
  }
  if (values) next->r[n++] = (dccl_range_t){lo, hi, knobs, (uint8_t)coll, DCCL_ANY, DCCL_ANY};
  if (n > DCCL_MAX_PINS) {
    free(next);
    pthread_mutex_unlock(&g_pin_lock);
    return -1;
  }
  qsort(next->r, n, sizeof(dccl_range_t), cmp_pin);
  next->n = n;
  memset(next->first, 0, sizeof(next->first));
  memset(next->count, 0, sizeof(next->count));
  for (uint32_t i = n; i-- > 0;) {
    next->first[next->r[i].coll] = i;
    next->count[next->r[i].coll]++;
    next->lo[i] = next->r[i].lo;
  }
  if (n == 0) {
    free(next);
    next = NULL;
  }
  __atomic_store_n(&dccl_g_pins, next, __ATOMIC_SEQ_CST);
  /* Readers that loaded the old table announced themselves first: wait for them to leave. */
  while (__atomic_load_n(&g_pin_readers, __ATOMIC_SEQ_CST) != 0) sched_yield();
  free(old);
  pthread_mutex_unlock(&g_pin_lock);
  return 0;
}

__attribute__((destructor)) static void free_pins(void) { free(dccl_g_pins); }

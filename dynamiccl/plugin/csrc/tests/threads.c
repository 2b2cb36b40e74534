/* Concurrency: several communicators initialised, queried and finalised from several threads at
 * once (as NCCL does with one communicator per thread, or its async-init thread), meant for a
 * ThreadSanitizer build. Every answer must equal the one a single-threaded reference got for the
 * same (nRanks, nNodes, call): decisions may not depend on which thread asks or when.
 *
 *   threads PLUGIN.so THREADS ROUNDS [runtime]   (DYNAMICCL_POLICY names a valid policy)
 *   -> "PASS ..." or "FAIL ..."
 *
 * With "runtime", one more thread keeps setting the context (to the default slice, so answers stay
 * comparable), pinning and unpinning reduce, and reading the policy hash, while the workers query:
 * the run-time entry points must be race-free against getCollInfo. Reduce answers are then not
 * compared (a pin may or may not be in force at the moment of the call). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>

#include "harness.h"

#define NQ 512
#define NSYS 4
static const size_t k_sys[NSYS][2] = {{16, 2}, {8, 1}, {32, 4}, {64, 8}}; /* nRanks, nNodes */

typedef struct {
  int coll, pipe, reg;
  size_t nbytes;
} query_t;

static query_t g_q[NQ];
static int g_expect[NSYS][NQ][3]; /* algo, proto, nChannels */
static plugin_t g_p[7];
static const char* g_path;
static pthread_barrier_t g_start;
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static long g_logs;
static int g_rounds;
static int g_mutate;
static int g_stop;
static runtime_api_t g_api;

static void* mutator(void* arg) {
  (void)arg;
  long n = 0;
  char hash[65];
  while (!__atomic_load_n(&g_stop, __ATOMIC_RELAXED)) {
    g_api.set_context(n % 2 ? "straggler=none c2c=none" : "straggler=none");
    g_api.pin(1, 0, (uint64_t)1 << (n % 40), 1, 2, (int)(n % 65));
    if (n % 3 == 0) g_api.pin(1, 0, UINT64_MAX, -1, 0, 0);
    g_api.policy_hash(hash, sizeof(hash));
    n++;
  }
  return (void*)n;
}

static void count_logs(int level, unsigned long flags, const char* msg) {
  (void)level, (void)flags, (void)msg;
  pthread_mutex_lock(&g_log_lock); /* NCCL's logger is thread-safe; so is this one */
  g_logs++;
  pthread_mutex_unlock(&g_log_lock);
}

static void ask(const plugin_t* p, void* ctx, const query_t* q, int out[3]) {
  float table[DCCL_NUM_ALGOS * DCCL_NUM_PROTOS];
  unsigned char usable[DCCL_NUM_ALGOS * DCCL_NUM_PROTOS];
  memset(usable, 1, sizeof(usable));
  fill_table(table, DCCL_NUM_ALGOS, DCCL_NUM_PROTOS, usable);
  int nch = 0;
  plugin_coll(p, ctx, q->coll, q->nbytes, q->pipe, q->reg, table, DCCL_NUM_ALGOS, DCCL_NUM_PROTOS,
              &nch);
  out[0] = out[1] = -1;
  for (int i = 0; i < DCCL_NUM_ALGOS * DCCL_NUM_PROTOS; i++)
    if (table[i] == 0.0f) out[0] = i / DCCL_NUM_PROTOS, out[1] = i % DCCL_NUM_PROTOS;
  out[2] = nch;
}

static void* worker(void* arg) {
  long t = (long)arg, bad = 0;
  pthread_barrier_wait(&g_start);
  for (int r = 0; r < g_rounds; r++) {
    int s = (int)((t + r) % NSYS);
    const plugin_t* p = &g_p[4 + (t + r) % 3]; /* v4, v5, v6: same decisions, different ABIs */
    void* ctx = NULL;
    if (plugin_init(p, k_sys[s][0], k_sys[s][1], harness_logger, &ctx, NULL) != 0 || !ctx) return (void*)1;
    for (int i = 0; i < NQ; i++) {
      int got[3];
      ask(p, ctx, &g_q[(i + t * 37) % NQ], got);
      const int* want = g_expect[s][(i + t * 37) % NQ];
      if (g_mutate && g_q[(i + t * 37) % NQ].coll == 1) continue;
      bad += got[0] != want[0] || got[1] != want[1] || got[2] != want[2];
    }
    plugin_finalize(p, ctx);
  }
  return (void*)bad;
}

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && strcmp(argv[4], "runtime") == 0)) {
    fprintf(stderr, "usage: %s PLUGIN.so THREADS ROUNDS [runtime]\n", argv[0]);
    return 2;
  }
  g_log_sink = count_logs;
  g_mutate = argc == 5;
  g_path = argv[1];
  int nthreads = atoi(argv[2]);
  g_rounds = atoi(argv[3]);
  for (int v = 2; v <= 6; v++)
    if (plugin_load(g_path, v, &g_p[v]) != 0) return 2;
  if (runtime_api(&g_api) != 0) return 2;
  uint64_t x = 88172645463325252ULL;
  for (int i = 0; i < NQ; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    g_q[i] = (query_t){(int)(x % 5), 1 + (int)(x >> 8) % 2, (int)(x >> 16) % 2,
                       (size_t)1 << (x >> 24) % 36 | (size_t)(x >> 40) % 4096};
  }
  int applied = 0;
  for (int s = 0; s < NSYS; s++) { /* the single-threaded reference */
    void* ctx = NULL;
    plugin_init(&g_p[6], k_sys[s][0], k_sys[s][1], harness_logger, &ctx, NULL);
    if (!ctx) {
      printf("FAIL the policy did not load for nRanks %zu nNodes %zu\n", k_sys[s][0], k_sys[s][1]);
      return 1;
    }
    for (int i = 0; i < NQ; i++) {
      ask(&g_p[6], ctx, &g_q[i], g_expect[s][i]);
      applied += g_expect[s][i][0] >= 0;
    }
    plugin_finalize(&g_p[6], ctx);
  }
  pthread_t th[64];
  if (nthreads < 1 || nthreads > 64) return 2;
  pthread_barrier_init(&g_start, NULL, (unsigned)nthreads);
  /* A communicator stays alive throughout, so the policy the mutator matches contexts against is
   * loaded while the workers run. */
  void* keep = NULL;
  plugin_init(&g_p[6], 16, 2, harness_logger, &keep, NULL);
  pthread_t mut;
  if (g_mutate) pthread_create(&mut, NULL, mutator, NULL);
  for (long t = 0; t < nthreads; t++) pthread_create(&th[t], NULL, worker, (void*)t);
  long mismatches = 0;
  for (int t = 0; t < nthreads; t++) {
    void* bad;
    pthread_join(th[t], &bad);
    mismatches += (long)bad;
  }
  long mutations = 0;
  if (g_mutate) {
    void* n;
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED);
    pthread_join(mut, &n);
    mutations = (long)n;
    g_api.pin(1, 0, UINT64_MAX, -1, 0, 0);
  }
  plugin_finalize(&g_p[6], keep);
  if (mismatches || !applied || (g_mutate && !mutations)) {
    printf("FAIL %ld answers differed from the single-threaded reference (%d applied)\n",
           mismatches, applied);
    return 1;
  }
  printf("PASS threads=%d rounds=%d queries=%ld applied_in_reference=%d logs=%ld mutations=%ld\n",
         nthreads, g_rounds, (long)nthreads * g_rounds * NQ, applied, g_logs, mutations);
  return 0;
}

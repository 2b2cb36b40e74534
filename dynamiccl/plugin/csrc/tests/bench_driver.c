/* Timing driver for experiments/bench_plugin.py: median nanoseconds per getCollInfo for two
 * plugins loaded side by side (DynamICCL and a no-op), interleaved repetition by repetition so
 * both see the same machine state. Each call gets a freshly NCCL-filled cost table, as in NCCL.
 *
 * Also times communicator init (fastest of 7): the first of a process (read, hash, parse, check,
 * index; each timed in a fresh child process, since a process reads its policy once) and a later
 * one (the process's policy indexed for the communicator).
 *
 * With "pinned", 16 allreduce size ranges are pinned first (dynamiccl_pin), so the time is that of
 * a pinned call rather than a policy lookup.
 *
 *   bench_driver PLUGIN.so NOOP.so NRANKS NNODES CALLS REPS [pinned] -> {"ns_per_call": ..., ...} */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../nccl_tuner_abi.h"
#include "../policy_format.h"
#include "nccl_version_standin.h" /* the plugin checks NCCL's version: link with -rdynamic */

#define NQ 4096

typedef struct {
  int coll;
  size_t nbytes;
} query_t;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static volatile float g_sink;

static double run(const dccl_tuner_v6_t* t, void* ctx, const query_t* q, long calls) {
  enum { N = DCCL_NUM_ALGOS * DCCL_NUM_PROTOS };
  float tmpl[N], table[N];
  /* usable as on an H100 system: Tree and Ring with every protocol, NVLS/NVLSTree Simple */
  for (int i = 0; i < N; i++) {
    int algo = i / DCCL_NUM_PROTOS, proto = i % DCCL_NUM_PROTOS;
    int usable = algo == DCCL_ALGO_TREE || algo == DCCL_ALGO_RING ||
                 ((algo == DCCL_ALGO_NVLS || algo == DCCL_ALGO_NVLS_TREE) && proto == DCCL_PROTO_SIMPLE);
    tmpl[i] = usable ? 10.0f + (float)i : -1.0f;
  }
  double t0 = now_ns();
  for (long i = 0; i < calls; i++) {
    const query_t* c = &q[i & (NQ - 1)];
    int nch = 0;
    memcpy(table, tmpl, sizeof(table));
    t->getCollInfo(ctx, c->coll, c->nbytes, 1, (float**)(void*)table, DCCL_NUM_ALGOS,
                   DCCL_NUM_PROTOS, 0, &nch);
    g_sink += table[c->coll] + (float)nch;
  }
  return (now_ns() - t0) / (double)calls;
}

int main(int argc, char** argv) {
  if (argc != 7 && !(argc == 8 && strcmp(argv[7], "pinned") == 0)) {
    fprintf(stderr, "usage: %s PLUGIN.so NOOP.so NRANKS NNODES CALLS REPS [pinned]\n", argv[0]);
    return 2;
  }
  const dccl_tuner_v6_t* t[2];
  void* ctx[2];
  for (int k = 0; k < 2; k++) {
    void* h = dlopen(argv[1 + k], RTLD_NOW | RTLD_LOCAL);
    t[k] = h ? dlsym(h, "ncclTunerPlugin_v6") : NULL;
    if (!t[k]) {
      fprintf(stderr, "cannot load %s: %s\n", argv[1 + k], dlerror());
      return 2;
    }
    ctx[k] = NULL;
  }
  /* Init, fastest of several: a process's first (the file read, hashed, parsed and checked), each
   * in a child of its own that reports through a pipe, then later ones in this process. */
  double init_ms[2] = {1e300, 1e300};
  size_t nranks = strtoull(argv[3], NULL, 10), nnodes = strtoull(argv[4], NULL, 10);
  for (int rep = 0; rep < 7; rep++) {
    int fds[2];
    double ms = 1e300;
    if (pipe(fds) != 0) return 2;
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
      void* c = NULL;
      double t0 = now_ns();
      t[0]->init(&c, 1, nranks, nnodes, NULL, NULL, NULL);
      ms = c ? (now_ns() - t0) / 1e6 : -1.0;
      _exit(write(fds[1], &ms, sizeof(ms)) == sizeof(ms) ? 0 : 1);
    }
    close(fds[1]);
    if (child < 0 || read(fds[0], &ms, sizeof(ms)) != sizeof(ms) || ms < 0) {
      fprintf(stderr, "the DynamICCL plugin did not load the policy (is DYNAMICCL_POLICY set?)\n");
      return 2;
    }
    close(fds[0]);
    waitpid(child, NULL, 0);
    init_ms[0] = ms < init_ms[0] ? ms : init_ms[0];
  }
  t[0]->init(&ctx[0], 1, nranks, nnodes, NULL, NULL, NULL); /* this process's first: stays alive */
  for (int rep = 0; rep < 7; rep++) {
    void* c = NULL;
    double t0 = now_ns();
    t[0]->init(&c, 1, nranks, nnodes, NULL, NULL, NULL);
    double ms = (now_ns() - t0) / 1e6;
    init_ms[1] = ms < init_ms[1] ? ms : init_ms[1];
    t[0]->finalize(c);
  }
  t[1]->init(&ctx[1], 1, 1, 1, NULL, NULL, NULL);
  if (argc == 8) {
    int (*pin)(int, uint64_t, uint64_t, int, int, int);
    *(void**)&pin = dlsym(dlopen(argv[1], RTLD_NOW | RTLD_LOCAL), "dynamiccl_pin");
    for (int i = 0; i < 16; i++)
      if (!pin || pin(4, (uint64_t)1 << (2 * i), (uint64_t)1 << (2 * i + 2), 1, i % 3, 0) != 0) {
        fprintf(stderr, "cannot pin\n");
        return 2;
      }
  }
  if (!ctx[0]) {
    fprintf(stderr, "the DynamICCL plugin did not load the policy (is DYNAMICCL_POLICY set?)\n");
    return 2;
  }
  query_t* q = malloc(sizeof(query_t) * NQ);
  uint64_t x = 0x2545F4914F6CDD1DULL;
  for (int i = 0; i < NQ; i++) { /* mostly allreduce, sizes log-uniform over 8 B .. 16 GiB */
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    q[i].coll = (x & 3) ? 4 : (int)((x >> 2) % 4);
    q[i].nbytes = (size_t)8 << ((x >> 8) % 32) | (size_t)((x >> 40) & 0xFFF);
  }
  long calls = atol(argv[5]);
  int reps = atoi(argv[6]);
  double* ns[2] = {malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps)};
  run(t[0], ctx[0], q, calls); /* warm-up */
  run(t[1], ctx[1], q, calls);
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < 2; k++) ns[k][r] = run(t[k], ctx[k], q, calls);
  for (int k = 0; k < 2; k++) qsort(ns[k], (size_t)reps, sizeof(double), cmp_double);
  printf("{\"ns_per_call\": %.2f, \"noop_ns_per_call\": %.2f, \"min_ns_per_call\": %.2f, "
         "\"min_noop_ns_per_call\": %.2f, \"init_ms\": %.3f, \"init_cached_ms\": %.3f}\n",
         ns[0][reps / 2], ns[1][reps / 2], ns[0][0], ns[1][0], init_ms[0], init_ms[1]);
  for (int k = 0; k < 2; k++) t[k]->finalize(ctx[k]), free(ns[k]);
  free(q);
  return 0;
}

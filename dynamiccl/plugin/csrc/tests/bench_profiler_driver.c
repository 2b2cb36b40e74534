/* Timing driver for experiments/bench_profiler.py: nanoseconds per event pair (a start and its stop)
 * for two profilers loaded side by side (DynamICCL and a no-op), through the calls NCCL makes for a
 * collective (profiler_harness.h: group start, coll start/stop, then per channel kernelCh start,
 * KernelChStop, stop), interleaved repetition by repetition so both see the same machine state.
 * A collective of C channels is 1 + C event pairs. DEPTH collectives are in flight at once, as in a
 * job whose host enqueues ahead of the GPU: DEPTH calls are launched, then their channels end.
 *
 *   bench_profiler_driver PLUGIN.so NOOP.so CALLS REPS CHANNELS DEPTH
 *     -> {"ns_per_event_pair": ..., "noop_ns_per_event_pair": ..., ...}
 * DYNAMICCL_PROFILE must name a directory for the rings. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "profiler_harness.h"

/* The thread's CPU time: on a shared machine a repetition preempted by another process is not
 * charged for the time it waited. */
static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static const char* const k_funcs[] = {"AllReduce", "AllReduce", "AllReduce", "AllGather",
                                      "ReduceScatter", "AllReduce", "Broadcast", "AllReduce"};

/* ns per event pair over `calls` collectives, `depth` at a time */
static double run(const profiler_t* p, void* ctx, long calls, int channels, int depth,
                  uint64_t* seq) {
  void* call[64];
  void* ch[64][64];
  double t0 = now_ns();
  for (long i = 0; i < calls; i += depth) {
    for (int k = 0; k < depth; k++) { /* the host launches and enqueues */
      call_t c = {k_funcs[(i + k) & 7], "ncclFloat32", "RING", "SIMPLE", (size_t)(1024 << (k & 7)),
                  (*seq)++, channels, k & 3, 8};
      void* group;
      descr_t g;
      descr_init(p, &g, 1 /* group */, NULL, 0);
      profiler_start(p, ctx, &group, &g);
      start_call(p, ctx, &c, 0, &call[k]);
      if (call[k]) profiler_stop(p, call[k]);
    }
    for (int k = 0; k < depth; k++) { /* the proxy thread sees the kernels run */
      uint64_t t = 1000000 + (uint64_t)(i + k) * 100000;
      for (int c = 0; c < channels; c++) start_channel(p, ctx, call[k], (k + c) & 63, t + 20u * (unsigned)c, &ch[k][c]);
      for (int c = 0; c < channels; c++) stop_channel(p, ch[k][c], t + 5000 + 20u * (unsigned)c);
    }
  }
  return (now_ns() - t0) / (double)(calls * (1 + channels));
}

int main(int argc, char** argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s PLUGIN.so NOOP.so CALLS REPS CHANNELS DEPTH\n", argv[0]);
    return 2;
  }
  profiler_t p[2];
  void* ctx[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    void* h = dlopen(argv[1 + k], RTLD_NOW | RTLD_LOCAL);
    p[k].version = 6;
    p[k].table = h ? dlsym(h, "ncclProfiler_v6") : NULL;
    int mask = 0;
    if (!p[k].table || profiler_init(&p[k], &ctx[k], 0x5eed + (uint64_t)k, &mask, "bench", 1, 8, 0,
                                     NULL) != 0 || !ctx[k]) {
      fprintf(stderr, "cannot load or init %s (is DYNAMICCL_PROFILE set?)\n", argv[1 + k]);
      return 2;
    }
  }
  long calls = atol(argv[3]);
  int reps = atoi(argv[4]), channels = atoi(argv[5]), depth = atoi(argv[6]);
  if (reps < 1 || channels < 1 || channels > 64 || depth < 1 || depth > 64 || calls < depth) return 2;
  calls -= calls % depth;
  double* ns[2] = {malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps)};
  uint64_t seq[2] = {0, 0};
  run(&p[0], ctx[0], calls, channels, depth, &seq[0]); /* warm-up */
  run(&p[1], ctx[1], calls, channels, depth, &seq[1]);
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < 2; k++) ns[k][r] = run(&p[k], ctx[k], calls, channels, depth, &seq[k]);
  for (int k = 0; k < 2; k++) qsort(ns[k], (size_t)reps, sizeof(double), cmp_double);
  printf("{\"ns_per_event_pair\": %.2f, \"noop_ns_per_event_pair\": %.2f, "
         "\"min_ns_per_event_pair\": %.2f, \"min_noop_ns_per_event_pair\": %.2f, "
         "\"collectives\": %llu}\n", ns[0][reps / 2], ns[1][reps / 2], ns[0][0], ns[1][0],
         (unsigned long long)seq[0]);
  for (int k = 0; k < 2; k++) profiler_finalize(&p[k], ctx[k]), free(ns[k]);
  return 0;
}

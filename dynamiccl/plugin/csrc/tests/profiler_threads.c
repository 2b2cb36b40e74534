/* Concurrency, meant for a ThreadSanitizer build: COMMS communicators at once, each driven as NCCL
 * drives it: a host thread starts and stops every call (plan launch, enqueue) and hands it to the
 * communicator's proxy thread, which runs its channels' events (start, KernelChStop, stop), the
 * channels of one call in scrambled order and calls overlapping; init and finalize race with the
 * other communicators' events.
 *
 *   profiler_threads PLUGIN.so COMMS CALLS   (DYNAMICCL_PROFILE names the ring folder)
 *   -> "PASS ..." or "FAIL ..."
 *
 * Call i of communicator k: seq i, allreduce of (i + 1) floats on 1 + i % 8 channels; channel c runs
 * on the GPU from T(i) + 10 c to T(i) + 10 c + 1000 + i % 100, so pytest knows every record's
 * duration: 1000 + i % 100 + 10 * (channels - 1). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>

#include "profiler_harness.h"

#define MAX_COMMS 16
#define QUEUE 64 /* calls in flight per communicator */

typedef struct {
  int index;
  long calls;
  profiler_t* prof;
  void* ctx;
  void* queue[QUEUE];
  long head, tail; /* host writes head, proxy writes tail */
  long failures, host_failures, proxy_failures; /* each written by one thread */
} comm_t;

static comm_t g_comms[MAX_COMMS];
static pthread_barrier_t g_start;

static uint64_t t_of(long i) { return 1000000000ull + (uint64_t)i * 100000ull; }

static void* host(void* arg) {
  comm_t* c = arg;
  for (long i = 0; i < c->calls; i++) {
    while (i - __atomic_load_n(&c->tail, __ATOMIC_ACQUIRE) >= QUEUE) sched_yield();
    call_t call = {"AllReduce", "ncclFloat32", "RING", "SIMPLE", (size_t)i + 1, (uint64_t)i,
                   1 + (int)(i % 8), (int)(i % 5), 8};
    void* h = NULL;
    c->host_failures += start_call(c->prof, c->ctx, &call, c->index, &h) != 0;
    if (h) c->host_failures += profiler_stop(c->prof, h) != 0;
    c->queue[i % QUEUE] = h;
    __atomic_store_n(&c->head, i + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

static void* proxy(void* arg) {
  comm_t* c = arg;
  for (long i = 0; i < c->calls; i++) {
    while (__atomic_load_n(&c->head, __ATOMIC_ACQUIRE) <= i) sched_yield();
    void* call = c->queue[i % QUEUE];
    int n = 1 + (int)(i % 8), first = (int)(i % 5);
    void* ch[8];
    for (int k = 0; k < n; k++) {
      int chan = i & 1 ? (k + (int)i) % n : n - 1 - k; /* rotated or reversed */
      c->proxy_failures += start_channel(c->prof, c->ctx, call, first + chan, t_of(i) + 10u * (unsigned)chan,
                                   &ch[chan]) != 0;
    }
    for (int k = n - 1; k >= 0; k--)
      c->proxy_failures += stop_channel(c->prof, ch[k], t_of(i) + 10u * (unsigned)k + 1000u + (unsigned)(i % 100)) != 0;
    __atomic_store_n(&c->tail, i + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

static void* communicator(void* arg) {
  comm_t* c = arg;
  int mask = 0;
  pthread_barrier_wait(&g_start);
  if (profiler_init(c->prof, &c->ctx, 0xc0ffee00ull + (uint64_t)c->index, &mask, "threads", 1,
                    MAX_COMMS, c->index, NULL) != 0 || !c->ctx) {
    c->failures++;
    return NULL;
  }
  pthread_t h, p;
  pthread_create(&h, NULL, host, c);
  pthread_create(&p, NULL, proxy, c);
  pthread_join(h, NULL);
  pthread_join(p, NULL);
  c->failures += c->host_failures + c->proxy_failures + (profiler_finalize(c->prof, c->ctx) != 0);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s PLUGIN.so COMMS CALLS\n", argv[0]);
    return 2;
  }
  int ncomms = atoi(argv[2]);
  long calls = atol(argv[3]);
  if (ncomms < 1 || ncomms > MAX_COMMS || calls < 1) return 2;
  profiler_t prof[3];
  for (int v = 4; v <= 6; v++)
    if (profiler_load(argv[1], v, &prof[v - 4]) != 0) return 2;
  pthread_barrier_init(&g_start, NULL, (unsigned)ncomms);
  pthread_t th[MAX_COMMS];
  for (int k = 0; k < ncomms; k++) {
    g_comms[k] = (comm_t){.index = k, .calls = calls, .prof = &prof[k % 3]};
    pthread_create(&th[k], NULL, communicator, &g_comms[k]);
  }
  long failures = 0;
  for (int k = 0; k < ncomms; k++) {
    pthread_join(th[k], NULL);
    failures += g_comms[k].failures;
  }
  if (failures) {
    printf("FAIL %ld calls returned an error or a communicator did not start\n", failures);
    return 1;
  }
  printf("PASS comms=%d calls=%ld\n", ncomms, calls);
  return 0;
}

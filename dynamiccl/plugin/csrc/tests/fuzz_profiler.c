/* libFuzzer target for the profiler plugin (clang -fsanitize=fuzzer,address,undefined, linked with
 * the plugin's sources). Each input is a program of events for two communicators (ABI versions
 * from the first byte): coll events with names valid, misspelt or NULL and any count and channel
 * count, kernelCh events with a real parent, none, or a pointer into the middle of a call, stop
 * times, stops and states in any order and number, events of any type, and NCCL's own sequence for
 * a call. Communicators live for INPUTS_PER_COMM inputs (creating a ring file per input would make
 * the fuzzer slow), so state carries from one input to the next as in a long job; at each finalize
 * every record in the rings must name real ids and be consistent. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "profiler_harness.h"

extern const dccl_profiler_v5_t ncclProfiler_v6, ncclProfiler_v5;
extern const dccl_profiler_v4_t ncclProfiler_v4;

#define INPUTS_PER_COMM 200

static char g_dir[256];
static profiler_t g_prof[2];
static void* g_ctx[2];
static long g_inputs;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc, (void)argv;
  const char* dir = getenv(DCCL_ENV_PROFILE); /* the rings' folder, emptied at every finalize */
  if (!dir || !*dir || strlen(dir) >= sizeof(g_dir)) {
    fprintf(stderr, "set " DCCL_ENV_PROFILE " to an empty folder\n");
    abort();
  }
  strcpy(g_dir, dir);
  setenv(DCCL_ENV_PROFILE_RECORDS, "64", 1);
  return 0;
}

typedef struct {
  const uint8_t* p;
  size_t n;
} input_t;

static unsigned take(input_t* in) {
  if (!in->n) return 0;
  in->n--;
  return *in->p++;
}

static uint64_t take64(input_t* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | take(in);
  return v;
}

static const char* pick(input_t* in, const char* const* names, int n) {
  static const char* const bad[] = {NULL, "", "Allreduce", "AllReduceX", "ncclFloat", "RINGS",
                                    "Unknown", "Invalid"};
  unsigned b = take(in);
  return b < 200 ? names[b % (unsigned)n] : bad[b % 8];
}

/* Every record of every ring in the folder names real ids and is consistent; the files go. */
static void check_rings(void) {
  DIR* d = opendir(g_dir);
  struct dirent* e;
  char path[512];
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "%s/%s", g_dir, e->d_name);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(dccl_ring_header_t)) abort();
    const dccl_ring_header_t* h = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED || memcmp(h->magic, DCCL_RING_MAGIC, 8) != 0 || !h->closed) abort();
    const dccl_ring_record_t* r = (const dccl_ring_record_t*)(h + 1);
    uint64_t n = h->head < h->capacity ? h->head : h->capacity;
    for (uint64_t i = 0; i < n; i++) {
      if (r[i].commit == 0 || r[i].coll >= DCCL_PROF_NUM_COLLS || r[i].algo < 0 ||
          r[i].algo >= DCCL_PROF_NUM_ALGOS || r[i].proto < 0 || r[i].proto >= DCCL_PROF_NUM_PROTOS ||
          r[i].dtype >= DCCL_PROF_NUM_DTYPES || r[i].channels > DCCL_PROF_MAX_CHANNELS ||
          r[i].timed_channels > r[i].channels)
        abort();
      if ((r[i].flags & DCCL_RING_FLAG_TIMED) &&
          (r[i].gpu_stop_ns < r[i].gpu_start_ns || r[i].timed_channels != r[i].channels))
        abort();
    }
    munmap((void*)h, (size_t)st.st_size);
    close(fd);
    unlink(path);
  }
  if (d) closedir(d);
}

static void open_comms(unsigned versions) {
  for (int k = 0; k < 2; k++) {
    int v = 4 + (int)((versions >> (2 * k)) % 3);
    g_prof[k].version = v;
    g_prof[k].table = v == 4 ? (const void*)&ncclProfiler_v4
                             : v == 5 ? (const void*)&ncclProfiler_v5 : (const void*)&ncclProfiler_v6;
    int mask = 0;
    if (profiler_init(&g_prof[k], &g_ctx[k], 0xf0 + (uint64_t)k, &mask, NULL, 1, 2, k, NULL) != 0 ||
        !g_ctx[k])
      abort();
  }
}

static void close_comms(void) {
  for (int k = 0; k < 2; k++)
    if (profiler_finalize(&g_prof[k], g_ctx[k]) != 0) abort();
  check_rings();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  input_t in = {data, size};
  unsigned first = take(&in);
  if (g_inputs++ % INPUTS_PER_COMM == 0) {
    if (g_inputs > 1) close_comms();
    open_comms(first);
  }
  void* ev[16] = {0}; /* handles of this input only: the next input cannot stop them */
  while (in.n) {
    unsigned op = take(&in), k = op >> 7, e = (op >> 3) & 15;
    const profiler_t* p = &g_prof[k];
    void* ctx = g_ctx[k];
    switch (op & 7) {
      case 0: { /* a coll event */
        call_t c = {pick(&in, dccl_prof_coll_names, DCCL_PROF_NUM_COLLS),
                    pick(&in, dccl_prof_dtype_names, DCCL_PROF_NUM_DTYPES),
                    pick(&in, dccl_prof_algo_names, DCCL_PROF_NUM_ALGOS),
                    pick(&in, dccl_prof_proto_names, DCCL_PROF_NUM_PROTOS), (size_t)take64(&in),
                    take(&in), (int)take(&in), 0, 8};
        if (start_call(p, ctx, &c, 0, &ev[e]) != 0) abort();
        break;
      }
      case 1: { /* a kernelCh event */
        unsigned how = take(&in);
        void* parent = how < 128 ? ev[how % 16] : how < 192 ? NULL
                     : ev[how % 16] ? (char*)ev[how % 16] + 8 * (1 + how % 7) : NULL;
        if (start_channel(p, ctx, parent, (int)take(&in), take64(&in), &ev[e]) != 0) abort();
        break;
      }
      case 2: { /* KernelChStop */
        dccl_prof_state_args_t a;
        memset(&a, 0, sizeof(a));
        a.kernelCh.pTimer = take64(&in);
        if (profiler_state(p, ev[e], DCCL_PROF_STATE_KERNEL_CH_STOP, &a) != 0) abort();
        break;
      }
      case 3:
        if (profiler_stop(p, ev[e]) != 0) abort();
        break;
      case 4: { /* any state, arguments or none */
        dccl_prof_state_args_t a;
        memset(&a, 0, sizeof(a));
        unsigned s = take(&in);
        if (profiler_state(p, ev[e], (int)(s % 40), s & 128 ? NULL : &a) != 0) abort();
        break;
      }
      case 5: { /* an event of any type */
        descr_t d;
        descr_init(p, &d, take(&in) | (uint64_t)take(&in) << 8, ev[take(&in) % 16], 0);
        if (profiler_start(p, ctx, &ev[e], &d) != 0) abort();
        break;
      }
      case 6: { /* NCCL's own sequence for a call */
        call_t c = {"AllReduce", "ncclFloat32", "RING", "SIMPLE", 1 + take(&in), take(&in),
                    1 + (int)(take(&in) % 64), (int)take(&in), 8};
        if (nccl_collective(p, ctx, &c, take64(&in) >> 2, take(&in), take(&in)) != 0) abort();
        break;
      }
      default: /* forget a handle (NCCL never reuses one after its stop) */
        ev[e] = NULL;
    }
  }
  return 0;
}

/* Test driver for the profiler plugin: loads it like NCCL and executes commands from stdin, one per
 * line, so pytest can drive every ABI version with synthetic and hostile events and then read the
 * rings the plugin wrote (with dynamiccl.plugin.profile_ring, the reader under test too):
 *
 *   init K V COMMID NNODES NRANKS RANK     -> CTX K set|null MASK m   (ncclProfiler_vV's init)
 *   coll K E FUNC DTYPE COUNT ALGO PROTO NCH SEQ
 *                                          -> EV E set|null  (a coll event; a name may be NULL)
 *   chan K E PARENT CHANNEL PTIMER         -> EV E set|null  (a kernelCh event; PARENT is an event
 *        index, NULL, foreign (memory not the plugin's) or P+8 (8 bytes into event P's handle))
 *   kstop E PTIMER                         (KernelChStop with that stop time)
 *   state E STATE null|zero                (recordEventState: another state, or NULL arguments)
 *   stop E                                 (stopEvent; NULL when event E was given no handle)
 *   event K E TYPE                         -> EV E set|null  (an event of any type, zeroed descriptor)
 *   nullargs K                             (startEvent with a NULL handle pointer / descriptor)
 *   call K FUNC DTYPE COUNT ALGO PROTO NCH SEQ T0 DURATION SKEW FIRST
 *                                          (NCCL's whole sequence for one collective)
 *   fin K                                  -> FIN K rc
 *   setenv NAME VALUE | unsetenv NAME
 * Log calls are printed as "LOG level flags message". A non-zero return from the plugin prints
 * "VIOLATION ..." and makes the exit status 1. */
#define _POSIX_C_SOURCE 200809L
#include "profiler_harness.h"

#define MAX_CTX 64
#define MAX_EVENTS 4096

static void print_log(int level, unsigned long flags, const char* msg) {
  printf("LOG %d %lx %s\n", level, flags, msg);
}

static const char* name_or_null(const char* s) { return strcmp(s, "NULL") == 0 ? NULL : s; }

static int g_failed;
static void check(int rc, const char* what) {
  if (rc != 0) printf("VIOLATION %s returned %d\n", what, rc), g_failed = 1;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_log_sink = print_log;
  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN.so < commands\n", argv[0]);
    return 2;
  }
  static profiler_t prof[MAX_CTX];
  static void* ctx[MAX_CTX];
  static void* ev[MAX_EVENTS];
  static int owner[MAX_EVENTS]; /* the context each event was started in */
  static char names[4][64];
  static uint64_t foreign[32];
  char line[1024], a[64], b[64];
  int k, e, v, nnodes, nranks, rank, nch, channel, state;
  unsigned long long comm, count, seq, t0, dur, skew, ptimer;
  while (fgets(line, sizeof(line), stdin)) {
    if (sscanf(line, "init %d %d %llx %d %d %d", &k, &v, &comm, &nnodes, &nranks, &rank) == 6 &&
        k >= 0 && k < MAX_CTX) {
      if (profiler_load(argv[1], v, &prof[k]) != 0) return 2;
      int mask = 0;
      ctx[k] = (void*)0x1;
      check(profiler_init(&prof[k], &ctx[k], comm, &mask, "test-comm", nnodes, nranks, rank,
                          harness_logger),
            "init");
      printf("CTX %d %s MASK %d\n", k, ctx[k] ? "set" : "null", mask);
    } else if (sscanf(line, "coll %d %d %63s %63s %llu %63s %63s %d %llu", &k, &e, names[0],
                      names[1], &count, names[2], names[3], &nch, &seq) == 9 &&
               k >= 0 && k < MAX_CTX && e >= 0 && e < MAX_EVENTS) {
      call_t c = {name_or_null(names[0]), name_or_null(names[1]), name_or_null(names[2]),
                  name_or_null(names[3]), count, seq, nch, 0, 8};
      owner[e] = k;
      check(start_call(&prof[k], ctx[k], &c, 0, &ev[e]), "startEvent(coll)");
      printf("EV %d %s\n", e, ev[e] ? "set" : "null");
    } else if (sscanf(line, "chan %d %d %63s %d %llu", &k, &e, a, &channel, &ptimer) == 5 &&
               k >= 0 && k < MAX_CTX && e >= 0 && e < MAX_EVENTS) {
      void* parent = NULL;
      if (strcmp(a, "foreign") == 0) parent = foreign;
      else if (strstr(a, "+8") && ev[atoi(a) % MAX_EVENTS]) parent = (char*)ev[atoi(a) % MAX_EVENTS] + 8;
      else if (strcmp(a, "NULL") != 0) parent = ev[atoi(a) % MAX_EVENTS];
      owner[e] = k;
      check(start_channel(&prof[k], ctx[k], parent, channel, ptimer, &ev[e]), "startEvent(kernelCh)");
      printf("EV %d %s\n", e, ev[e] ? "set" : "null");
    } else if (sscanf(line, "kstop %d %llu", &e, &ptimer) == 2 && e >= 0 && e < MAX_EVENTS) {
      dccl_prof_state_args_t s;
      memset(&s, 0, sizeof(s));
      s.kernelCh.pTimer = ptimer;
      check(profiler_state(&prof[owner[e]], ev[e], DCCL_PROF_STATE_KERNEL_CH_STOP, &s), "recordEventState");
    } else if (sscanf(line, "state %d %d %63s", &e, &state, a) == 3 && e >= 0 && e < MAX_EVENTS) {
      dccl_prof_state_args_t s;
      memset(&s, 0, sizeof(s));
      check(profiler_state(&prof[owner[e]], ev[e], state, strcmp(a, "null") == 0 ? NULL : &s),
            "recordEventState");
    } else if (sscanf(line, "stop %d", &e) == 1 && e >= 0 && e < MAX_EVENTS) {
      check(profiler_stop(&prof[owner[e]], ev[e]), "stopEvent");
    } else if (sscanf(line, "event %d %d %d", &k, &e, &state) == 3 && k >= 0 && k < MAX_CTX &&
               e >= 0 && e < MAX_EVENTS) {
      descr_t d;
      descr_init(&prof[k], &d, (uint64_t)state, NULL, 0);
      ev[e] = (void*)0x1;
      owner[e] = k;
      check(profiler_start(&prof[k], ctx[k], &ev[e], &d), "startEvent");
      printf("EV %d %s\n", e, ev[e] ? "set" : "null");
    } else if (sscanf(line, "nullargs %d", &k) == 1 && k >= 0 && k < MAX_CTX) {
      descr_t d;
      void* h = (void*)0x1;
      descr_init(&prof[k], &d, DCCL_PROF_EVENT_COLL, NULL, 0);
      check(profiler_start(&prof[k], ctx[k], NULL, &d), "startEvent(NULL handle)");
      check(prof[k].version == 4 ? v4(&prof[k])->startEvent(ctx[k], &h, NULL)
                                 : v5(&prof[k])->startEvent(ctx[k], &h, NULL),
            "startEvent(NULL descriptor)");
      if (h) printf("VIOLATION a handle for a NULL descriptor\n"), g_failed = 1;
      check(profiler_stop(&prof[k], NULL), "stopEvent(NULL)");
      check(profiler_state(&prof[k], NULL, DCCL_PROF_STATE_KERNEL_CH_STOP, NULL), "recordEventState(NULL)");
    } else if (sscanf(line, "call %d %63s %63s %llu %63s %63s %d %llu %llu %llu %llu %d", &k,
                      names[0], names[1], &count, names[2], names[3], &nch, &seq, &t0, &dur, &skew,
                      &channel) == 12 && k >= 0 && k < MAX_CTX) {
      call_t c = {names[0], names[1], names[2], names[3], count, seq, nch, channel, 8};
      check(nccl_collective(&prof[k], ctx[k], &c, t0, dur, skew), "a call");
    } else if (sscanf(line, "fin %d", &k) == 1 && k >= 0 && k < MAX_CTX) {
      int rc = profiler_finalize(&prof[k], ctx[k]);
      check(rc, "finalize");
      printf("FIN %d %d\n", k, rc);
    } else if (sscanf(line, "setenv %63s %63s", a, b) == 2) {
      setenv(a, b, 1);
    } else if (sscanf(line, "unsetenv %63s", a) == 1) {
      unsetenv(a);
    } else if (line[0] != '\n' && line[0] != '#') {
      printf("VIOLATION bad command: %s", line);
      g_failed = 1;
    }
  }
  return g_failed;
}

/* Robustness run (meant for an AddressSanitizer + UndefinedBehaviorSanitizer build): thousands of
 * corrupted, truncated, oversized and valid-but-strange policy files, each loaded through a random
 * ABI version's init, then random getCollInfo calls and run-time entry point calls (contexts, pins,
 * hash buffers) with hostile arguments. Checks,
 * per file: init returns ncclSuccess and a context (without a policy where the parser rejects the
 * file, with exactly one WARN); every call returns ncclSuccess; no cost-table entry NCCL marked
 * unusable is ever written; at most one entry changes and only to 0.0; nChannels stays 0 or becomes
 * 1..64; getChunkSize (v6) leaves NCCL's chunk or answers one of at least a grain.
 *
 *   robust PLUGIN.so VALID_POLICY WORKDIR ITERATIONS SEED   -> "PASS ..." or "FAIL ..." lines
 *
 * Linked with policy.c only to recompute checksums (so most mutations get past the checksum and
 * reach the parser) and, with fleet.c, to know whether the plugin must take a mutated file.
 *
 * The plugin reads its policy once per process, so each file is tried in a child process of its
 * own (fork: the plugin loaded, nothing read yet); every 25th child also runs LeakSanitizer's check
 * before it exits. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../fleet.h"
#include "../policy.h"
#include "harness.h"

static runtime_api_t g_api;
/* getCollInfo calls per file: the files cost a process each, the calls almost nothing. */
#define CALLS_PER_FILE 120

/* LeakSanitizer's on-demand check (weak: absent from a build without it); non-zero on a leak. */
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

static uint64_t rng_state;
static uint64_t rnd(void) { /* xorshift64*: reproducible from the seed */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ULL;
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static int g_warns;
static void count_warnings(int level, unsigned long flags, const char* msg) {
  (void)flags, (void)msg;
  if (level == DCCL_LOG_WARN) g_warns++;
}

static const char* const k_tokens[] = {
    "0", "1", "7", "8", "-1", "*", "-", "64", "65", "2048", "2047", "1073741825",
    "18446744073709551615", "18446744073709551616", "99999999999999999999999", "defer", "slice",
    "straggler=none", "c2c=none", "straggler=long", "bogus", "policy", "DYNAMICCL-POLICY", "#", "\t"};
#define N_TOKENS (sizeof(k_tokens) / sizeof(k_tokens[0]))

/* A token a rule line may hold: the format's own, or a collective, algorithm or protocol name (the
 * generated header's tables, so a new algorithm is fuzzed without an edit here). */
static const char* random_token(void) {
  size_t i = below(N_TOKENS + DCCL_NUM_COLLS + DCCL_NUM_ALGOS + DCCL_NUM_PROTOS);
  if (i < N_TOKENS) return k_tokens[i];
  i -= N_TOKENS;
  if (i < DCCL_NUM_COLLS) return dccl_coll_names[i];
  i -= DCCL_NUM_COLLS;
  return i < DCCL_NUM_ALGOS ? dccl_algo_names[i] : dccl_proto_names[i - DCCL_NUM_ALGOS];
}

typedef struct {
  char* d;
  size_t n, cap;
} buf_t;

static void reserve(buf_t* b, size_t extra) {
  if (b->n + extra <= b->cap) return;
  b->cap = (b->n + extra) * 2;
  b->d = realloc(b->d, b->cap);
  if (!b->d) abort();
}
static void insert(buf_t* b, size_t at, const char* s, size_t len) {
  reserve(b, len);
  memmove(b->d + at + len, b->d + at, b->n - at);
  memcpy(b->d + at, s, len);
  b->n += len;
}
static size_t line_start(const buf_t* b, size_t pos) {
  while (pos > 0 && b->d[pos - 1] != '\n') pos--;
  return pos;
}
static size_t line_end(const buf_t* b, size_t pos) {
  while (pos < b->n && b->d[pos] != '\n') pos++;
  return pos < b->n ? pos + 1 : pos;
}

static void mutate(buf_t* b) {
  size_t pos = below(b->n + 1);
  switch (below(9)) {
    case 0: /* random bytes, printable or not */
      for (int k = 1 + (int)below(8); k > 0 && b->n; k--) b->d[below(b->n)] = (char)rnd();
      break;
    case 1: b->n = pos; break; /* truncate */
    case 2: { /* insert printable garbage */
      char junk[64];
      size_t len = 1 + below(sizeof(junk));
      for (size_t i = 0; i < len; i++) junk[i] = (char)(0x20 + below(95));
      insert(b, pos, junk, len);
      break;
    }
    case 3: { /* duplicate a line: overlapping rules, repeated headers or slices */
      size_t s = line_start(b, pos), e = line_end(b, pos);
      char* copy = malloc(e - s + 1);
      memcpy(copy, b->d + s, e - s);
      insert(b, s, copy, e - s);
      free(copy);
      break;
    }
    case 4: { /* replace one whitespace-separated token */
      size_t s = pos;
      while (s > 0 && b->d[s - 1] != ' ' && b->d[s - 1] != '\n') s--;
      size_t e = s;
      while (e < b->n && b->d[e] != ' ' && b->d[e] != '\n') e++;
      const char* t = random_token();
      memmove(b->d + s, b->d + e, b->n - e);
      b->n -= e - s;
      insert(b, s, t, strlen(t));
      break;
    }
    case 5: { /* oversized: many extra rule-like lines, some very long */
      buf_t extra = {0};
      char line[6000];
      for (int k = (int)below(2000); k > 0; k--) {
        int len = snprintf(line, sizeof(line), "allreduce %llu %llu * * ring ll %d\n",
                           (unsigned long long)below(1u << 30), (unsigned long long)rnd(),
                           (int)below(70));
        if (below(50) == 0) {
          memset(line, 'x', 5000);
          line[5000] = '\n';
          len = 5001;
        }
        insert(&extra, extra.n, line, (size_t)len);
      }
      if (extra.n) insert(b, line_end(b, pos), extra.d, extra.n);
      free(extra.d);
      break;
    }
    case 6: { /* delete a line */
      size_t s = line_start(b, pos), e = line_end(b, pos);
      memmove(b->d + s, b->d + e, b->n - e);
      b->n -= e - s;
      break;
    }
    case 7: insert(b, 0, "DYNAMICCL-POLICY 2\n", 19); break; /* a newer format */
    default: break; /* unchanged: the valid control case */
  }
}

static void fix_checksum(buf_t* b) {
  if (b->n && b->d[b->n - 1] == '\n') {
    size_t s = line_start(b, b->n - 1);
    if (b->n - s > 9 && memcmp(b->d + s, "checksum ", 9) == 0) b->n = s;
  }
  if (b->n && b->d[b->n - 1] != '\n') insert(b, b->n, "\n", 1);
  char line[40];
  int len = snprintf(line, sizeof(line), DCCL_CHECKSUM_PREFIX "%08x\n", dccl_crc32(b->d, b->n));
  insert(b, b->n, line, (size_t)len);
}

static size_t pick_bytes(void) {
  switch (below(6)) {
    case 0: return 0;
    case 1: return SIZE_MAX;
    case 2: return SIZE_MAX - below(3);
    case 3: return (size_t)rnd();
    default: return (size_t)1 << below(35) | (size_t)below(1u << 20); /* where rules are */
  }
}

/* The systems the valid policy has rules for, so most calls reach a rule, not just defers. */
static size_t g_sys[64][2];
static int g_nsys;
static void collect_systems(const char* data, size_t len) {
  dccl_policy_t* p;
  char err[256];
  if (dccl_policy_parse(data, len, &p, err, sizeof(err)) != 0) return;
  for (uint32_t i = 0; i < p->ngroups && g_nsys < 64; i++)
    if (p->groups[i].nodes > 0 && p->groups[i].ranks > 0) {
      g_sys[g_nsys][0] = (size_t)p->groups[i].ranks;
      g_sys[g_nsys++][1] = (size_t)p->groups[i].nodes;
    }
  dccl_policy_free(p);
}

/* One hostile getCollInfo; returns 0 when every contract held. */
static int hostile_call(const plugin_t* p, void* ctx, char* why, size_t whylen) {
  int coll = below(4) ? (int)below(5) : (int)below(24) - 3, pipe = (int)below(12) - 3, reg = (int)below(4) - 1;
  size_t nbytes = pick_bytes();
  if (p->version == 2) {
    int algo = -1, proto = -1, nch = 0;
    int* pa = below(10) ? &algo : NULL;
    int rc = plugin_coll_v2(p, ctx, coll, nbytes, (int)below(3), (int)below(3), pipe, pa, &proto,
                            below(10) ? &nch : NULL);
    /* the v2 ABI (NCCL 2.21) may only be told an algorithm and protocol that NCCL 2.21 has */
    int bad_algo = algo < -1 || algo >= DCCL_NUM_ALGOS || (algo >= 0 && !dccl_v2_allowed[algo].colls);
    if (rc != 0 || nch < 0 || nch > 64 || bad_algo || proto < -1 || proto >= DCCL_NUM_PROTOS) {
      snprintf(why, whylen, "v2 call: rc %d algo %d proto %d nch %d", rc, algo, proto, nch);
      return -1;
    }
    return 0;
  }
  /* this NCCL's table, or an older NCCL's with one algorithm fewer (2.21/2.22 had no PAT) */
  int numAlgo = DCCL_NUM_ALGOS - (int)below(2), numProto = DCCL_NUM_PROTOS, n = numAlgo * numProto;
  unsigned char usable[DCCL_NUM_ALGOS * DCCL_NUM_PROTOS];
  int mode = (int)below(5);
  for (int i = 0; i < n; i++) usable[i] = mode == 0 ? 0 : mode == 1 ? 1 : (unsigned char)below(2);
  float* table = malloc(sizeof(float) * (size_t)n);
  float before[DCCL_NUM_ALGOS * DCCL_NUM_PROTOS];
  fill_table(table, numAlgo, numProto, usable);
  for (int i = 0; i < n; i++) {
    if (usable[i] && below(8) == 0) table[i] = below(2) ? 0.0f : INFINITY;
    if (usable[i] && below(40) == 0) table[i] = NAN;
  }
  memcpy(before, table, sizeof(float) * (size_t)n);
  int nch = 0;
  int rc = plugin_coll(p, ctx, coll, nbytes, pipe, reg, below(20) ? table : NULL, numAlgo, numProto,
                       below(10) ? &nch : NULL);
  int forced = table_change(before, table, n, why, whylen);
  free(table);
  if (rc != 0 || forced == -2 || nch < 0 || nch > 64) {
    if (forced != -2) snprintf(why, whylen, "rc %d nChannels %d", rc, nch);
    return -1;
  }
  if (p->version == 6 && below(2)) { /* NCCL chunks what it just decided (or another pair) */
    static const size_t grain[DCCL_NUM_PROTOS] = DCCL_PROTO_GRAIN_BYTES;
    const dccl_tuner_v6_t* t6 = p->table;
    int algo = forced >= 0 && below(4) ? forced / numProto : (int)below(9) - 1;
    int proto = forced >= 0 && below(4) ? forced % numProto : (int)below(5) - 1;
    size_t nccl = 1 + below(1 << 22), chunk = nccl;
    int rc4 = t6->getChunkSize(ctx, coll, nbytes, algo, proto, (int)below(70) - 2,
                               below(20) ? &chunk : NULL);
    if (rc4 != 0 || (chunk != nccl && (proto < 0 || proto >= DCCL_NUM_PROTOS ||
                                       chunk < grain[proto] || chunk > (16u << 20)))) {
      snprintf(why, whylen, "getChunkSize rc %d chunk %zu (NCCL's %zu)", rc4, chunk, nccl);
      return -1;
    }
  }
  if (below(50) == 0) { /* the run-time entry points, hostile arguments included */
    static const char* const specs[] = {"straggler=long", "straggler=none c2c=none", "c2c=high,x=1",
                                        "straggler=", "", "straggler=long straggler=long", NULL};
    int rc1 = g_api.set_context(specs[below(7)]);
    int rc2 = g_api.pin((int)below(8) - 1, (uint64_t)pick_bytes(), (uint64_t)pick_bytes(),
                        (int)below(9) - 2, (int)below(5) - 1, (int)below(70) - 2);
    long long knobs[DCCL_NUM_KNOBS + 1];
    for (int i = 0; i <= DCCL_NUM_KNOBS; i++)
      knobs[i] = below(3) ? (long long)below(9) - 2 : (long long)pick_bytes();
    int rc5 = g_api.pin_knobs((int)below(8) - 1, (uint64_t)pick_bytes(), (uint64_t)pick_bytes(),
                              below(8) ? knobs : NULL, DCCL_NUM_KNOBS + 1 - (int)below(3));
    char hash[80];
    int rc3 = g_api.policy_hash(below(2) ? hash : NULL, below(80));
    if (rc1 < -1 || rc1 > 1 || rc2 < -1 || rc2 > 0 || rc3 < -1 || rc3 > 0 || rc5 < -1 || rc5 > 0) {
      snprintf(why, whylen, "run-time API returned %d %d %d %d", rc1, rc2, rc3, rc5);
      return -1;
    }
  }
  return 0;
}

/* One file in this (child) process: init through a random ABI version, hostile calls, finalize.
 * 0 when every contract held, else 1 with a FAIL line. */
static int try_file(const plugin_t* plugins, long it, const char* path, int expect_ok) {
  static const size_t ranks[] = {0, 1, 2, 8, 16, 32, (size_t)1 << 40};
  static const size_t nodes[] = {0, 1, 2, 4, (size_t)1 << 40};
  static const char* const contexts[] = {NULL, "straggler=long", "c2c=high,straggler=short",
                                         "straggler=", "garbage", "straggler=none c2c=none"};
  char why[256];
  setenv("DYNAMICCL_POLICY", path, 1);
  const char* context = contexts[below(6)];
  if (context) setenv("DYNAMICCL_CONTEXT", context, 1);
  else unsetenv("DYNAMICCL_CONTEXT");
  setenv("DYNAMICCL_LOG_DECISIONS", below(2) ? "1" : "0", 1);
  const plugin_t* p = &plugins[2 + below(5)];
  void* ctx = (void*)0x1;
  ncclDebugLogger_t log = below(10) ? harness_logger : NULL;
  size_t nr = ranks[below(7)], nn = nodes[below(5)];
  if (g_nsys && below(4)) {
    size_t k = below((size_t)g_nsys);
    nr = g_sys[k][0], nn = g_sys[k][1];
  }
  int rc = plugin_init(p, nr, nn, log, &ctx, NULL);
  if (rc != 0 || !ctx || g_warns != (!expect_ok && log ? 1 : 0)) {
    printf("FAIL iteration %ld: init rc %d, valid %d, context %p, %d warnings (file %s)\n", it, rc,
           expect_ok, ctx, g_warns, path);
    return 1;
  }
  for (int q = 0; q < CALLS_PER_FILE; q++) {
    if (hostile_call(p, ctx, why, sizeof(why)) != 0) {
      printf("FAIL iteration %ld call %d: %s (file %s)\n", it, q, why, path);
      return 1;
    }
  }
  if (plugin_finalize(p, ctx) != 0) return 1;
  if (it % 25 == 0 && __lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check()) {
    printf("FAIL iteration %ld: memory leaked (file %s)\n", it, path);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* a sanitizer exit must not lose the verdict */
  if (argc != 6) {
    fprintf(stderr, "usage: %s PLUGIN.so VALID_POLICY WORKDIR ITERATIONS SEED\n", argv[0]);
    return 2;
  }
  g_log_sink = count_warnings;
  char* seed_data;
  size_t seed_len;
  char err[256], path[4096];
  if (dccl_read_file(argv[2], &seed_data, &seed_len, err, sizeof(err)) != 0) {
    fprintf(stderr, "cannot read %s: %s\n", argv[2], err);
    return 2;
  }
  collect_systems(seed_data, seed_len);
  long iterations = atol(argv[4]);
  rng_state = (uint64_t)atoll(argv[5]) * 0x9E3779B97F4A7C15ULL + 1;
  plugin_t plugins[7];
  for (int v = 2; v <= 6; v++)
    if (plugin_load(argv[1], v, &plugins[v]) != 0) return 2;
  if (runtime_api(&g_api) != 0) return 2;
  long valid = 0, invalid = 0, calls = 0;
  buf_t b = {0};
  for (long it = 0; it < iterations; it++) {
    b.n = 0;
    insert(&b, 0, seed_data, seed_len);
    for (int k = (int)below(3); k >= 0; k--) mutate(&b);
    if (below(10) < 7) fix_checksum(&b);
    snprintf(path, sizeof(path), "%s/p%ld.dccl", argv[3], it);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, b.d, b.n) != (ssize_t)b.n) return 2;
    int huge = below(200) == 0; /* a sparse file just over the size limit */
    if (huge && ftruncate(fd, (off_t)DCCL_MAX_FILE_BYTES + 1) != 0) return 2;
    close(fd);
    dccl_policy_t* parsed = NULL;
    int low, high, expect_ok = !huge && dccl_policy_parse(b.d, b.n, &parsed, err, sizeof(err)) == 0;
    /* a file the parser takes is still refused under an NCCL outside its version window */
    expect_ok = expect_ok && dccl_nccl_window(parsed->nccl, &low, &high) == 0 &&
                low <= g_standin_nccl_version && g_standin_nccl_version <= high;
    dccl_policy_free(parsed);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 2;
    if (child == 0) {
      int failed = try_file(plugins, it, path, expect_ok);
      fflush(stdout);
      _exit(failed); /* the sanitizers' exit-time reports are for the parent */
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      printf("FAIL iteration %ld: the child process ended with status %d (file %s)\n", it, status,
             path);
      return 1;
    }
    expect_ok ? valid++ : invalid++;
    calls += CALLS_PER_FILE;
    unlink(path);
  }
  free(b.d);
  free(seed_data);
  printf("PASS iterations=%ld valid=%ld invalid=%ld calls=%ld\n", iterations, valid, invalid, calls);
  return 0;
}

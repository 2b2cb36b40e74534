/* Test driver: loads the plugin like NCCL and executes commands read from stdin, one per line, so
 * pytest can check every ABI version, environment variable and decision with real calls:
 *
 *   init V NRANKS NNODES                 -> CTX k set|null   (ABI version V's init)
 *   coll k COLL NBYTES PIPE REG NUMALGO NUMPROTO FILL
 *                                        -> RES algo proto nChannels   (v3..v6 getCollInfo)
 *        FILL = all | none | a '0'/'1' string of NUMALGO*NUMPROTO usable flags
 *   v2 k COLL NBYTES COLLNET NVLS PIPE   -> RES algo proto nChannels   (v2 getCollInfo)
 *   chunk                                -> CHUNK null|set  (whether v6 has a getChunkSize)
 *   getchunk k COLL NBYTES ALGO PROTO NCH NCCLCHUNK
 *                                        -> CHUNKSIZE bytes (v6 getChunkSize, NCCL's chunk given)
 *   fin k                                -> FIN rc
 *   setenv NAME VALUE                    (so one process can try many policy files)
 *   rewrite SRC DST                      (DST overwritten in place by SRC's bytes, its mtime kept:
 *                                         what `cp -p` or `rsync --inplace -t` do)
 *   rename SRC DST                       (DST atomically replaced by SRC: what `mv` and
 *                                         dynamiccl's own writers do)
 *   context SPEC...                      -> SETCTX rc       (dynamiccl_set_context; "NULL" = NULL)
 *   pin COLL MIN MAX ALGO PROTO CH       -> PIN rc          (dynamiccl_pin; MIN/MAX may be "max")
 *   pinknobs COLL MIN MAX V... | NULL    -> PINK rc         (dynamiccl_pin_knobs, one V per knob)
 *   hash LEN                             -> HASH rc text    (dynamiccl_policy_hash, buffer of LEN)
 *   version                              -> VERSION text    (dynamiccl_plugin_version)
 *   reload                               (close the plugin and open it again, as NCCL does once the
 *                                         process's last communicator is destroyed)
 *   ncclversion CODE                     (what this stand-in's ncclGetVersion answers; 0: it fails)
 *   dlopen PATH                          -> DLOPEN ok|failed (a library NCCL loads, e.g. a network
 *                                         plugin, opened RTLD_NOW | RTLD_LOCAL and kept)
 * NBYTES may be "max" (SIZE_MAX). Log calls are printed as "LOG level flags message". Any broken
 * contract (non-zero return, a write to an unusable entry, a changed constants block) prints
 * "VIOLATION ..." and makes the exit status 1. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define MAX_CTX 4096

static void print_log(int level, unsigned long flags, const char* msg) {
  printf("LOG %d %lx %s\n", level, flags, msg);
}

static int rewrite_in_place(const char* src, const char* dst) {
  char buf[1 << 16];
  struct stat st;
  int in = open(src, O_RDONLY), out = stat(dst, &st) == 0 ? open(dst, O_WRONLY | O_TRUNC) : -1;
  ssize_t n;
  while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
    if (write(out, buf, (size_t)n) != n) break;
  if (in >= 0) close(in);
  if (out < 0) return -1;
  close(out);
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  return utimensat(AT_FDCWD, dst, times, 0);
}

static size_t parse_size(const char* s) {
  return strcmp(s, "max") == 0 ? SIZE_MAX : (size_t)strtoull(s, NULL, 10);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* a sanitizer exit must not lose the verdict */
  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN.so < commands\n", argv[0]);
    return 2;
  }
  g_log_sink = print_log;
  plugin_t plugins[MAX_CTX];
  void* ctxs[MAX_CTX];
  int nctx = 0, failed = 0;
  char line[8192], a[64], b[64], fill[256], val[4096], val2[4096];
  runtime_api_t api = {0};
  int have_api = 0;
  unsigned char constants[1152], constants_before[1152];
  for (size_t i = 0; i < sizeof(constants); i++) constants[i] = (unsigned char)(i * 7);
  memcpy(constants_before, constants, sizeof(constants));
  plugin_t v6;
  if (plugin_load(argv[1], 6, &v6) != 0) return 2; /* NCCL's first lookup */
  have_api = runtime_api(&api) == 0;
  while (fgets(line, sizeof(line), stdin)) {
    int k, v, coll, pipe, reg, na, np, collnet, nvls, algo, proto, nch;
    if (sscanf(line, "init %d %63s %63s", &v, a, b) == 3) {
      if (nctx == MAX_CTX || plugin_load(argv[1], v, &plugins[nctx]) != 0) return 2;
      ctxs[nctx] = (void*)0x1; /* NCCL does not clear it; the plugin must set it */
      int rc = plugin_init(&plugins[nctx], parse_size(a), parse_size(b), harness_logger, &ctxs[nctx],
                           constants);
      if (rc != 0) printf("VIOLATION init returned %d\n", rc), failed = 1;
      if (memcmp(constants, constants_before, sizeof(constants)) != 0)
        printf("VIOLATION init changed NCCL's constants\n"), failed = 1;
      printf("CTX %d %s\n", nctx, ctxs[nctx] ? "set" : "null");
      nctx++;
    } else if (sscanf(line, "coll %d %d %63s %d %d %d %d %255s", &k, &coll, a, &pipe, &reg, &na,
                      &np, fill) == 8 && k >= 0 && k < nctx) {
      int n = na * np;
      unsigned char usable[256];
      for (int i = 0; i < n; i++)
        usable[i] = strcmp(fill, "all") == 0 ? 1 : strcmp(fill, "none") == 0 ? 0 : fill[i] == '1';
      float* table = malloc(sizeof(float) * (size_t)n); /* exact size: ASan sees any overrun */
      float before[256];
      char why[160];
      fill_table(table, na, np, usable);
      memcpy(before, table, sizeof(float) * (size_t)n);
      nch = 0;
      int rc = plugin_coll(&plugins[k], ctxs[k], coll, parse_size(a), pipe, reg, table, na, np,
                           &nch);
      int forced = table_change(before, table, n, why, sizeof(why));
      if (rc != 0) printf("VIOLATION getCollInfo returned %d\n", rc), failed = 1;
      if (forced == -2) printf("VIOLATION %s\n", why), failed = 1;
      if (forced < 0 && nch != 0) printf("VIOLATION nChannels set without a forced entry\n");
      printf("RES %d %d %d\n", forced >= 0 ? forced / np : -1, forced >= 0 ? forced % np : -1, nch);
      free(table);
    } else if (sscanf(line, "v2 %d %d %63s %d %d %d", &k, &coll, a, &collnet, &nvls, &pipe) == 6 &&
               k >= 0 && k < nctx) {
      algo = -1, proto = -1, nch = 0;
      int rc = plugin_coll_v2(&plugins[k], ctxs[k], coll, parse_size(a), collnet, nvls, pipe,
                              &algo, &proto, &nch);
      if (rc != 0) printf("VIOLATION getCollInfo returned %d\n", rc), failed = 1;
      printf("RES %d %d %d\n", algo, proto, nch);
    } else if (sscanf(line, "getchunk %d %d %63s %d %d %d %63s", &k, &coll, a, &algo, &proto, &nch, b) ==
                   7 && k >= 0 && k < nctx) {
      const dccl_tuner_v6_t* t6 = v6.table;
      size_t chunk = parse_size(b);
      int rc = t6->getChunkSize(ctxs[k], coll, parse_size(a), algo, proto, nch, &chunk);
      if (rc != 0) printf("VIOLATION getChunkSize returned %d\n", rc), failed = 1;
      printf("CHUNKSIZE %zu\n", chunk);
    } else if (strncmp(line, "pinknobs ", 9) == 0 && have_api) {
      long long values[DCCL_NUM_KNOBS];
      int used = 0, n = 0;
      if (sscanf(line + 9, "%d %63s %63s %n", &coll, a, b, &used) < 3) continue;
      char* rest = line + 9 + used;
      int unpin = strncmp(rest, "NULL", 4) == 0;
      while (!unpin && n < DCCL_NUM_KNOBS && sscanf(rest, "%lld %n", &values[n], &used) == 1) {
        rest += used;
        n++;
      }
      printf("PINK %d\n", api.pin_knobs(coll, parse_size(a), parse_size(b), unpin ? NULL : values,
                                        unpin ? 0 : n));
    } else if (strncmp(line, "chunk", 5) == 0) {
      const dccl_tuner_v6_t* t6 = v6.table;
      printf("CHUNK %s\n", t6->getChunkSize ? "set" : "null");
    } else if (strncmp(line, "context ", 8) == 0 && have_api) {
      line[strcspn(line, "\n")] = '\0';
      printf("SETCTX %d\n", api.set_context(strcmp(line + 8, "NULL") == 0 ? NULL : line + 8));
    } else if (sscanf(line, "pin %d %63s %63s %d %d %d", &coll, a, b, &algo, &proto, &nch) == 6 &&
               have_api) {
      printf("PIN %d\n", api.pin(coll, parse_size(a), parse_size(b), algo, proto, nch));
    } else if (sscanf(line, "hash %d", &k) == 1 && have_api && k >= 0 && k <= 4096) {
      memset(val, 'x', sizeof(val));
      int rc = api.policy_hash(k ? val : NULL, (size_t)k);
      printf("HASH %d %.*s\n", rc, rc == 0 ? (int)strnlen(val, (size_t)k) : 0, val);
      if (rc == 0 && strnlen(val, (size_t)k) == (size_t)k)
        printf("VIOLATION hash not NUL-terminated\n"), failed = 1;
    } else if (strncmp(line, "reload", 6) == 0) {
      plugin_unload();
      if (plugin_load(argv[1], 6, &v6) != 0) return 2;
      have_api = runtime_api(&api) == 0;
    } else if (sscanf(line, "ncclversion %d", &k) == 1) {
      g_standin_nccl_version = k;
    } else if (sscanf(line, "dlopen %4095s", val) == 1) {
      printf("DLOPEN %s\n", dlopen(val, RTLD_NOW | RTLD_LOCAL) ? "ok" : "failed");
    } else if (strncmp(line, "version", 7) == 0 && have_api) {
      printf("VERSION %s\n", api.version());
    } else if (sscanf(line, "rewrite %4095s %4095s", val, val2) == 2) {
      if (rewrite_in_place(val, val2) != 0) printf("VIOLATION cannot rewrite %s\n", val2), failed = 1;
    } else if (sscanf(line, "rename %4095s %4095s", val, val2) == 2) {
      if (rename(val, val2) != 0) printf("VIOLATION cannot rename %s\n", val), failed = 1;
    } else if (sscanf(line, "setenv %63s %4095s", a, val) == 2) {
      setenv(a, val, 1);
    } else if (sscanf(line, "fin %d", &k) == 1 && k >= 0 && k < nctx) {
      printf("FIN %d\n", plugin_finalize(&plugins[k], ctxs[k]));
    } else if (line[0] != '\n' && line[0] != '#') {
      printf("VIOLATION bad command: %s", line);
      failed = 1;
    }
  }
  return failed;
}

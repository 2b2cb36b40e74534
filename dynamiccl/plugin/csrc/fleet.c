/* Fleet safety (see fleet.h). Every rank of a communicator must choose alike or NCCL hangs, and a
 * policy only holds for the system and the NCCL it was measured on. The tuner ABI tells a plugin
 * neither its rank nor NCCL's version, and gives it no way to ask the other ranks anything, so each
 * check here is local and deterministic: ranks that run the same binaries with the same file and
 * environment reach the same verdict, and a rank that differs says so at WARN, with the host and
 * process NCCL prefixes to every line.
 *
 * Why a mismatch defers on that rank rather than failing the job: a tuner that returns an error from
 * init fails the user's communicator (NCCL 2.30.7 src/init.cc propagates it), which the plugin
 * never does. Deferring still leaves that rank choosing otherwise than ranks whose file matched, so
 * the check is opt-in (DYNAMICCL_POLICY_SHA256 set) and the README has the job verify the file on
 * every node before it starts; the WARN names what to fix. */
#define _GNU_SOURCE /* dladdr, RTLD_DEFAULT, RTLD_NOLOAD, dl_iterate_phdr, strcasestr */
#include "fleet.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static int env_set(const char* name) {
  const char* v = getenv(name);
  return v && *v;
}

/* ---- NCCL's own forcing ------------------------------------------------------------------- */

int dccl_nccl_forces_choice(ncclDebugLogger_t log) {
  static int said;
  if (!env_set(DCCL_ENV_NCCL_ALGO) && !env_set(DCCL_ENV_NCCL_PROTO)) return 0;
  if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) return 1;
  const char *algo = getenv(DCCL_ENV_NCCL_ALGO), *proto = getenv(DCCL_ENV_NCCL_PROTO);
  char set[160];
  snprintf(set, sizeof(set), "%s%.60s%s%s%.60s", algo && *algo ? DCCL_ENV_NCCL_ALGO "=" : "",
           algo && *algo ? algo : "", algo && *algo && proto && *proto ? " " : "",
           proto && *proto ? DCCL_ENV_NCCL_PROTO "=" : "", proto && *proto ? proto : "");
  if (env_set(DCCL_ENV_POLICY))
    DCCL_WARN(log, "DynamICCL: %s is set in the environment (as some cloud recipes do), so NCCL's "
              "own forcing wins and the policy %.200s is not used in this process: unset it to let "
              "the policy decide", set, getenv(DCCL_ENV_POLICY));
  else
    DCCL_INFO(log, "DynamICCL: %s is set; respecting it, run-time pins are not used", set);
  return 1;
}

/* ---- the expected checksum ---------------------------------------------------------------- */

/* 1 when text is 64 hexadecimal digits (either case) equal to hash (lowercase), 0 when it is 64
 * other hex digits, -1 when it is no SHA-256 at all. */
static int same_hash(const char* text, const char* hash) {
  if (strlen(text) != DCCL_HASH_HEX_LEN) return -1;
  int same = 1;
  for (int i = 0; i < DCCL_HASH_HEX_LEN; i++) {
    char c = text[i];
    if (c >= 'A' && c <= 'F') c = (char)(c - 'A' + 'a');
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return -1;
    same &= c == hash[i];
  }
  return same;
}

static int check_hash(const dccl_policy_t* p, const char* path, ncclDebugLogger_t log, char* why,
                      size_t whylen) {
  const char* want = getenv(DCCL_ENV_POLICY_SHA256);
  if (!want || !*want) {
    DCCL_INFO(log, "DynamICCL: " DCCL_ENV_POLICY_SHA256 " is not set, so a rank reading another "
              "file than the others is not detected here (set it to the sha256 `dynamiccl show` "
              "prints)");
    return 1;
  }
  int same = same_hash(want, p->hash);
  if (same == 1) {
    DCCL_INFO(log, "DynamICCL: policy file %s has the sha256 " DCCL_ENV_POLICY_SHA256 " expects",
              path);
    return 1;
  }
  if (same < 0)
    snprintf(why, whylen, DCCL_ENV_POLICY_SHA256 "=%.80s is not a SHA-256 (64 hexadecimal digits, "
             "as `dynamiccl show` and sha256sum print it)", want);
  else
    snprintf(why, whylen, "policy file %.200s has sha256 %s, not the " DCCL_ENV_POLICY_SHA256
             "=%.64s this job expects: this rank reads another file than the one the job was "
             "launched with", path, p->hash, want);
  DCCL_WARN(log, "DynamICCL: %s. NCCL decides every call in this process; ranks whose file matches "
            "still apply the policy, so a communicator spanning both runs mixed choices (stop the "
            "job and give every node the same file; dynamiccl/README.md, The plugin)", why);
  return 0;
}

/* ---- the NCCL version window -------------------------------------------------------------- */

/* One "A.B.C" at *s (each part within its digit limit); advances *s past it. */
static int parse_version(const char** s, int* code) {
  static const int digits[3] = DCCL_NCCL_VERSION_DIGITS;
  int part[3];
  for (int i = 0; i < 3; i++) {
    if (i && *(*s)++ != '.') return -1;
    int n = 0, v = 0;
    while (**s >= '0' && **s <= '9' && n <= digits[i]) v = v * 10 + (*(*s)++ - '0'), n++;
    if (n == 0 || n > digits[i]) return -1;
    part[i] = v;
  }
  *code = DCCL_NCCL_VERSION_CODE(part[0], part[1], part[2]);
  return 0;
}

int dccl_nccl_window(const char* text, int* low, int* high) {
  const char* s = text;
  static const char sep[] = DCCL_NCCL_WINDOW_SEPARATOR;
  if (parse_version(&s, low) != 0) return -1;
  *high = *low;
  if (strncmp(s, sep, sizeof(sep) - 1) == 0) {
    s += sizeof(sep) - 1;
    if (parse_version(&s, high) != 0) return -1;
  }
  return *s == '\0' && *low <= *high ? 0 : -1;
}

typedef ncclResult_t (*get_version_fn)(int*);

/* ncclGetVersion as the library holding addr (and its dependencies) exports it, or NULL. */
static get_version_fn version_in_library_of(const void* addr) {
  Dl_info info;
  get_version_fn fn = NULL;
  if (!addr || !dladdr(addr, &info) || !info.dli_fname || !*info.dli_fname) return NULL;
  void* handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return NULL;
  *(void**)&fn = dlsym(handle, DCCL_NCCL_GET_VERSION);
  dlclose(handle); /* only the reference NOLOAD took: the library itself stays loaded */
  return fn;
}

int dccl_running_nccl_version(const void* nccl_caller) {
  get_version_fn fn = version_in_library_of(nccl_caller);
  if (!fn) *(void**)&fn = dlsym(RTLD_DEFAULT, DCCL_NCCL_GET_VERSION);
  int code = 0;
  if (!fn || fn(&code) != DCCL_NCCL_SUCCESS || code <= 0) return 0;
  return code;
}

static const char* version_text(int code, char* buf, size_t len) {
  int major = code / DCCL_NCCL_VERSION_CODE(1, 0, 0), rest = code % DCCL_NCCL_VERSION_CODE(1, 0, 0);
  snprintf(buf, len, "%d.%d.%d", major, rest / DCCL_NCCL_VERSION_CODE(0, 1, 0),
           rest % DCCL_NCCL_VERSION_CODE(0, 1, 0));
  return buf;
}

static int check_version(const dccl_policy_t* p, const void* nccl_caller, ncclDebugLogger_t log,
                         char* why, size_t whylen) {
  int low, high, running = dccl_running_nccl_version(nccl_caller);
  char v[32];
  if (dccl_nccl_window(p->nccl, &low, &high) != 0)
    snprintf(why, whylen, "policy %.200s names no NCCL version window the plugin can read ('nccl "
             "%.200s'; it writes A.B.C or A.B.C" DCCL_NCCL_WINDOW_SEPARATOR "X.Y.Z): export it again",
             p->name, p->nccl);
  else if (running == 0)
    snprintf(why, whylen, "no " DCCL_NCCL_GET_VERSION " is reachable from the tuner, so the NCCL "
             "this process runs cannot be checked against the versions policy %.200s holds for "
             "(%.200s)", p->name, p->nccl);
  else if (running < low || running > high)
    snprintf(why, whylen, "this process runs NCCL %s, outside the versions policy %.200s was "
             "measured on (%.200s): tune it again under this NCCL", version_text(running, v,
             sizeof(v)), p->name, p->nccl);
  else {
    DCCL_INFO(log, "DynamICCL: NCCL %s is within the versions policy %s holds for (%s)",
              version_text(running, v, sizeof(v)), p->name, p->nccl);
    return 1;
  }
  DCCL_WARN(log, "DynamICCL: %s. NCCL decides every call in this process", why);
  return 0;
}

int dccl_admit_policy(const dccl_policy_t* policy, const char* path, const void* nccl_caller,
                      ncclDebugLogger_t log, char* why, size_t whylen) {
  return check_hash(policy, path, log, why, whylen) &&
         check_version(policy, nccl_caller, log, why, whylen);
}

/* ---- a network plugin's tuner ------------------------------------------------------------- */

/* dl_iterate_phdr callback: copies the name of a loaded aws-ofi-nccl library into data. */
static int find_ofi(struct dl_phdr_info* info, size_t size, void* data) {
  static const char* const prefixes[] = DCCL_OFI_LIBRARY_PREFIXES;
  (void)size;
  const char* slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  const char* base = slash ? slash + 1 : info->dlpi_name;
  for (int i = 0; base && i < DCCL_NUM_OFI_LIBRARY_PREFIXES; i++) {
    if (strncmp(base, prefixes[i], strlen(prefixes[i])) != 0) continue;
    char resolved[PATH_MAX + 1]; /* libnccl-net.so is often a link to libnccl-net-ofi.so */
    const char* name = realpath(info->dlpi_name, resolved) ? resolved : info->dlpi_name;
    const char* rslash = strrchr(name, '/');
    if (strstr(rslash ? rslash + 1 : name, DCCL_OFI_MARK)) {
      snprintf(data, PATH_MAX + 1, "%s", name);
      return 1;
    }
  }
  return 0;
}

void dccl_note_net_plugin(int policy_in_use, ncclDebugLogger_t log) {
  static int said;
  char found[PATH_MAX + 1] = "";
  const char* named = getenv(DCCL_ENV_NCCL_NET_PLUGIN);
  if (named && strcasestr(named, DCCL_OFI_MARK))
    snprintf(found, sizeof(found), DCCL_ENV_NCCL_NET_PLUGIN "=%.200s", named);
  else
    dl_iterate_phdr(find_ofi, found);
  if (!*found || __atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) return;
  dccl_log(log, policy_in_use ? DCCL_LOG_WARN : DCCL_LOG_INFO, DCCL_LOG_SUBSYS_TUNING, __FILE__,
           __LINE__, "DynamICCL: the network plugin is aws-ofi-nccl (%s), which ships its own tuner; "
           "NCCL loads one tuner, so DynamICCL replaces it: where the policy defers, and for calls "
           "no rule covers, NCCL's built-in model decides, not the OFI tuner. Measure the default "
           "launches with this plugin loaded and no policy (dynamiccl/README.md, The plugin)", found);
}

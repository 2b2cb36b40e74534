/* Policy file parser and lookup (see policy.h). Every malformed input ends in one readable reason
 * and no partial state: the plugin then steps aside, it never guesses. */
#define _POSIX_C_SOURCE 200809L
#include "policy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_TOKENS (DCCL_RULE_FIELDS + 1) /* one more than a rule has: "too many" is detected */

static void set_err(char* err, size_t errlen, const char* fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

uint32_t dccl_crc32(const void* data, size_t len) {
  /* zlib's CRC-32 (reflected polynomial 0xEDB88320), so Python's zlib.crc32 agrees. */
  uint32_t table[256];
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  const unsigned char* p = (const unsigned char*)data;
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < len; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

int dccl_read_file(const char* path, char** data, size_t* len, char* err, size_t errlen) {
  char reason[128];
  *data = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (strerror_r(errno, reason, sizeof(reason)) != 0) snprintf(reason, sizeof(reason), "?");
    set_err(err, errlen, "cannot open it (%s)", reason);
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    set_err(err, errlen, "it is not a regular file");
    close(fd);
    return -1;
  }
  if ((uint64_t)st.st_size > DCCL_MAX_FILE_BYTES) {
    set_err(err, errlen, "it is %lld bytes, over the %u-byte limit", (long long)st.st_size,
            DCCL_MAX_FILE_BYTES);
    close(fd);
    return -1;
  }
  size_t want = (size_t)st.st_size;
  char* buf = malloc(want + 1);
  if (!buf) {
    set_err(err, errlen, "out of memory reading it");
    close(fd);
    return -1;
  }
  size_t got = 0;
  for (;;) {
    ssize_t n = read(fd, buf + got, want + 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (strerror_r(errno, reason, sizeof(reason)) != 0) snprintf(reason, sizeof(reason), "?");
      set_err(err, errlen, "cannot read it (%s)", reason);
      free(buf);
      close(fd);
      return -1;
    }
    if (n == 0) break;
    got += (size_t)n;
    if (got > want) break;
  }
  close(fd);
  if (got != want) {
    set_err(err, errlen, "it changed while being read");
    free(buf);
    return -1;
  }
  *data = buf;
  *len = got;
  return 0;
}

/* ---- token helpers -------------------------------------------------------------------------- */

static int parse_u64(const char* s, uint64_t* out) {
  uint64_t v = 0;
  if (!*s || strlen(s) > 20) return -1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    uint64_t d = (uint64_t)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* "*" (when allowed) or an integer in [lo, hi]. */
static int parse_field(const char* s, int star_ok, uint64_t lo, uint64_t hi, int64_t* out) {
  uint64_t v;
  if (star_ok && strcmp(s, DCCL_TOKEN_ANY) == 0) { *out = DCCL_ANY; return 0; }
  if (parse_u64(s, &v) != 0 || v < lo || v > hi) return -1;
  *out = (int64_t)v;
  return 0;
}

static int lookup_name(const char* s, const char* const* names, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

static int is_word(const char* s, size_t maxlen) {
  size_t n = strlen(s);
  if (n == 0 || n > maxlen) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
  return 1;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

static int split(char* line, char** tok, int maxtok) {
  int n = 0;
  char* p = line;
  for (;;) {
    while (is_space(*p)) p++;
    if (!*p) return n;
    if (n == maxtok) return maxtok + 1;
    tok[n++] = p;
    while (*p && !is_space(*p)) p++;
    if (*p) *p++ = '\0';
  }
}

/* ---- the parser ----------------------------------------------------------------------------- */

typedef struct {
  uint64_t lo, hi;
  int32_t slice, coll, nodes, ranks, line;
  dccl_knobs_t knobs;
} raw_rule_t;

typedef struct {
  int line;
  int version;              /* the file's format version */
  int nfields, nknobs;      /* a rule's columns in that version, and its knob columns */
  char* err;
  size_t errlen;
  raw_rule_t* rules;
  size_t nrules, cap;
  dccl_slice_t slices[DCCL_MAX_SLICES];
  int nslices;
  int seen[DCCL_NUM_REQUIRED_HEADER];
  int seen_optional[DCCL_NUM_OPTIONAL_HEADER];
  dccl_policy_t* pol;
} parser_t;

static int perr(parser_t* ps, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(parser_t* ps, const char* fmt, ...) {
  char msg[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  set_err(ps->err, ps->errlen, "line %d: %s", ps->line, msg);
  return -1;
}

/* "none", or a comma list of distinct feature names. */
static int parse_features(const char* value, unsigned* out) {
  *out = 0;
  if (strcmp(value, DCCL_NO_FEATURES) == 0) return 0;
  for (const char* p = value;;) {
    size_t n = strcspn(p, ",");
    int found = -1;
    for (int f = 0; f < DCCL_NUM_FEATURES; f++)
      if (strlen(dccl_feature_names[f]) == n && strncmp(p, dccl_feature_names[f], n) == 0) found = f;
    if (found < 0 || (*out & (1u << found))) return -1;
    *out |= 1u << found;
    if (p[n] == '\0') return 0;
    p += n + 1;
  }
}

static const char* feature_list(char* buf, size_t len) {
  buf[0] = '\0';
  for (int f = 0; f < DCCL_NUM_FEATURES; f++) {
    size_t used = strlen(buf);
    snprintf(buf + used, len - used, "%s%s", f ? ", " : "", dccl_feature_names[f]);
  }
  return buf;
}

static int parse_header(parser_t* ps, char* line) {
  char* p = line;
  while (*p && !is_space(*p)) p++;
  char* value = p;
  if (*p) *value++ = '\0';
  while (is_space(*value)) value++;
  size_t vlen = strlen(value);
  while (vlen && is_space(value[vlen - 1])) value[--vlen] = '\0';
  if (!is_word(line, DCCL_MAX_HEADER_KEY)) return perr(ps, "'%.40s' is not a header key", line);
  if (lookup_name(line, dccl_coll_names, DCCL_NUM_COLLS) >= 0)
    return perr(ps, "rule for %.40s before the first '" DCCL_TOKEN_SLICE "' line", line);
  if (vlen == 0 || vlen > DCCL_MAX_HEADER_VALUE)
    return perr(ps, "header '%.40s' needs a value of 1..%d characters", line, DCCL_MAX_HEADER_VALUE);
  for (size_t k = 0; k < DCCL_NUM_REQUIRED_HEADER; k++) {
    if (strcmp(line, dccl_required_header[k]) != 0) continue;
    if (ps->seen[k]) return perr(ps, "header '%.40s' appears twice", line);
    ps->seen[k] = 1;
    if (strcmp(line, "policy") == 0) memcpy(ps->pol->name, value, vlen + 1);
    if (strcmp(line, "nccl") == 0) memcpy(ps->pol->nccl, value, vlen + 1);
    char names[64];
    if (strcmp(line, "features") == 0 && parse_features(value, &ps->pol->features) != 0)
      return perr(ps, "features is '" DCCL_NO_FEATURES "' or a comma list of %s, each at most once",
                  feature_list(names, sizeof(names)));
  }
  for (size_t k = 0; k < DCCL_NUM_OPTIONAL_HEADER; k++) {
    if (strcmp(line, dccl_optional_header[k]) != 0) continue;
    if (ps->seen_optional[k]) return perr(ps, "header '%.40s' appears twice", line);
    ps->seen_optional[k] = 1;
  }
  return 0; /* unknown keys: ignored, for forward compatibility */
}

static int parse_slice(parser_t* ps, char** tok, int n) {
  static const char k_straggler[] = DCCL_CONTEXT_KEY_STRAGGLER "=";
  static const char k_c2c[] = DCCL_CONTEXT_KEY_C2C "=";
  if (n != 3 || strncmp(tok[1], k_straggler, sizeof(k_straggler) - 1) != 0 ||
      strncmp(tok[2], k_c2c, sizeof(k_c2c) - 1) != 0)
    return perr(ps, "write a slice as '" DCCL_TOKEN_SLICE " " DCCL_CONTEXT_KEY_STRAGGLER
                "=BUCKET " DCCL_CONTEXT_KEY_C2C "=BUCKET'");
  const char* s = tok[1] + sizeof(k_straggler) - 1;
  const char* c = tok[2] + sizeof(k_c2c) - 1;
  if (!is_word(s, DCCL_MAX_BUCKET) || !is_word(c, DCCL_MAX_BUCKET))
    return perr(ps, "slice buckets are 1..%d characters of a-z, 0-9, _", DCCL_MAX_BUCKET);
  for (int i = 0; i < ps->nslices; i++)
    if (!strcmp(ps->slices[i].straggler, s) && !strcmp(ps->slices[i].c2c, c))
      return perr(ps, "this slice appears twice");
  if (ps->nslices == DCCL_MAX_SLICES) return perr(ps, "more than %d slices", DCCL_MAX_SLICES);
  dccl_slice_t* sl = &ps->slices[ps->nslices++];
  memset(sl, 0, sizeof(*sl));
  strcpy(sl->straggler, s);
  strcpy(sl->c2c, c);
  return 0;
}

/* One knob's column of a decision (dccl_knob_columns[i]): a token of an enum knob, or a number
 * lo..hi; "-" (DCCL_KEEP) where the knob may keep NCCL's value. */
static int parse_knob(parser_t* ps, int i, const char* tok, long long* out) {
  int keep_ok = dccl_knob_columns[i].keepable;
  if (keep_ok && strcmp(tok, DCCL_TOKEN_KEEP) == 0) {
    *out = DCCL_KEEP;
    return 0;
  }
  if (dccl_knob_columns[i].names) {
    int id = lookup_name(tok, dccl_knob_columns[i].names, (int)dccl_knob_columns[i].hi + 1);
    if (id < 0) return perr(ps, "unknown %s '%.40s'", dccl_knob_columns[i].name, tok);
    *out = id;
    return 0;
  }
  int64_t v;
  if (parse_field(tok, 0, (uint64_t)dccl_knob_columns[i].lo, (uint64_t)dccl_knob_columns[i].hi, &v))
    return perr(ps, "%s must be %s%lld..%lld", dccl_knob_columns[i].name,
                keep_ok ? "'" DCCL_TOKEN_KEEP "' or " : "", dccl_knob_columns[i].lo,
                dccl_knob_columns[i].hi);
  *out = v;
  return 0;
}

static int parse_rule(parser_t* ps, char** tok, int n) {
  raw_rule_t r;
  int64_t v[2];
  memset(&r, 0, sizeof(r));
  if ((r.coll = lookup_name(tok[0], dccl_coll_names, DCCL_NUM_COLLS)) < 0)
    return perr(ps, "unknown collective '%.40s'", tok[0]);
  if (n != ps->nfields)
    return perr(ps, "a rule has %d fields: %s", ps->nfields, dccl_rule_field_names[ps->version]);
  if (parse_u64(tok[1], &r.lo) || parse_u64(tok[2], &r.hi))
    return perr(ps, "min_bytes and max_bytes must be unsigned decimal integers < 2^64");
  if (r.lo > r.hi) return perr(ps, "min_bytes is larger than max_bytes");
  if (parse_field(tok[3], 1, 1, INT32_MAX, &v[0]) || parse_field(tok[4], 1, 1, INT32_MAX, &v[1]))
    return perr(ps, "nodes and ranks must be '*' or positive integers");
  if (v[0] != DCCL_ANY && v[1] != DCCL_ANY && v[1] < v[0])
    return perr(ps, "ranks must be at least nodes");
  r.nodes = (int32_t)v[0];
  r.ranks = (int32_t)v[1];
  char** knob = tok + DCCL_RULE_DIMS;
  r.knobs = dccl_knobs_keep; /* knobs a file's version has no column for keep NCCL's value */
  if (strcmp(knob[0], DCCL_TOKEN_DEFER) == 0) {
    for (int i = 1; i < ps->nknobs; i++)
      if (strcmp(knob[i], DCCL_TOKEN_KEEP))
        return perr(ps, "a defer rule has '" DCCL_TOKEN_KEEP "' as %s", dccl_defer_rest[ps->version]);
  } else {
    for (int i = 0; i < ps->nknobs; i++) {
      long long value = DCCL_KEEP;
      if (parse_knob(ps, i, knob[i], &value)) return -1;
      dccl_knobs_set(&r.knobs, i, value);
    }
  }
  if (ps->nrules == DCCL_MAX_RULES) return perr(ps, "more than %u rules", DCCL_MAX_RULES);
  if (ps->nrules == ps->cap) {
    size_t cap = ps->cap ? ps->cap * 2 : 256;
    raw_rule_t* grown = realloc(ps->rules, cap * sizeof(*grown));
    if (!grown) return perr(ps, "out of memory");
    ps->rules = grown;
    ps->cap = cap;
  }
  r.slice = ps->nslices - 1;
  r.line = ps->line;
  ps->rules[ps->nrules++] = r;
  return 0;
}

static int parse_line(parser_t* ps, const char* start, size_t len) {
  char buf[DCCL_MAX_LINE + 1];
  char* tok[MAX_TOKENS];
  if (len > DCCL_MAX_LINE) return perr(ps, "line longer than %d characters", DCCL_MAX_LINE);
  memcpy(buf, start, len);
  buf[len] = '\0';
  char* p = buf;
  while (is_space(*p)) p++;
  if (ps->line == 1) {
    int n = split(p, tok, MAX_TOKENS);
    uint64_t version;
    if (n != 2 || strcmp(tok[0], DCCL_FORMAT_MAGIC) != 0 || parse_u64(tok[1], &version))
      return perr(ps, "not a DynamICCL policy file (no '" DCCL_FORMAT_MAGIC " <version>' line)");
    if (version < DCCL_FORMAT_VERSION_MIN || version > DCCL_FORMAT_VERSION) {
      set_err(ps->err, ps->errlen, "format version %.20s is not supported (this plugin reads "
              DCCL_FORMAT_VERSIONS_READ "); re-export the policy", tok[1]);
      return -1;
    }
    ps->version = (int)version;
    ps->nknobs = 0;
    for (int i = 0; i < DCCL_NUM_KNOBS; i++) ps->nknobs += dccl_knob_columns[i].format_version <= ps->version;
    ps->nfields = DCCL_RULE_DIMS + ps->nknobs;
    return 0;
  }
  if (*p == '\0' || *p == '#') return 0;
  size_t klen = strcspn(p, " \t\r");
  int is_slice = klen == strlen(DCCL_TOKEN_SLICE) && strncmp(p, DCCL_TOKEN_SLICE, klen) == 0;
  if (ps->nslices == 0 && !is_slice) return parse_header(ps, p);
  int n = split(p, tok, MAX_TOKENS);
  if (is_slice) return parse_slice(ps, tok, n);
  return parse_rule(ps, tok, n);
}

static int cmp_raw(const void* a, const void* b) {
  const raw_rule_t* x = a;
  const raw_rule_t* y = b;
  const int32_t kx[4] = {x->slice, x->coll, x->nodes, x->ranks};
  const int32_t ky[4] = {y->slice, y->coll, y->nodes, y->ranks};
  for (int i = 0; i < 4; i++)
    if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return 0;
}

static int same_key(const raw_rule_t* x, const raw_rule_t* y) {
  return x->slice == y->slice && x->coll == y->coll && x->nodes == y->nodes &&
         x->ranks == y->ranks;
}

/* Sorts the rules, rejects overlapping ranges and lays out groups and ranges. */
static int build(parser_t* ps) {
  dccl_policy_t* pol = ps->pol;
  size_t n = ps->nrules;
  if (n) qsort(ps->rules, n, sizeof(raw_rule_t), cmp_raw);
  size_t ngroups = 0, in_group = 0;
  for (size_t i = 0; i < n; i++) {
    in_group = i && same_key(&ps->rules[i - 1], &ps->rules[i]) ? in_group + 1 : 1;
    if (in_group > DCCL_MAX_GROUP_RANGES) {
      set_err(ps->err, ps->errlen, "more than %u size ranges for %s nodes %d ranks %d in one slice",
              DCCL_MAX_GROUP_RANGES, dccl_coll_names[ps->rules[i].coll], ps->rules[i].nodes,
              ps->rules[i].ranks);
      return -1;
    }
    if (i && same_key(&ps->rules[i - 1], &ps->rules[i])) {
      if (ps->rules[i - 1].hi >= ps->rules[i].lo) {
        int a = ps->rules[i - 1].line, b = ps->rules[i].line;
        set_err(ps->err, ps->errlen, "lines %d and %d: overlapping size ranges for the same "
                "collective, nodes and ranks", a < b ? a : b, a < b ? b : a);
        return -1;
      }
    } else {
      ngroups++;
    }
  }
  pol->ranges = calloc(n ? n : 1, sizeof(dccl_range_t));
  pol->groups = calloc(ngroups ? ngroups : 1, sizeof(dccl_group_t));
  pol->slices = calloc((size_t)ps->nslices, sizeof(dccl_slice_t));
  pol->logged = calloc(n ? n : 1, 1);
  pol->los = calloc(n ? n : 1, sizeof(uint64_t));
  if (!pol->ranges || !pol->groups || !pol->slices || !pol->logged || !pol->los) {
    set_err(ps->err, ps->errlen, "out of memory");
    return -1;
  }
  memcpy(pol->slices, ps->slices, (size_t)ps->nslices * sizeof(dccl_slice_t));
  pol->nslices = (uint32_t)ps->nslices;
  dccl_group_t* g = NULL;
  for (size_t i = 0; i < n; i++) {
    const raw_rule_t* r = &ps->rules[i];
    if (!g || !same_key(&ps->rules[i - 1], r)) {
      g = &pol->groups[pol->ngroups];
      *g = (dccl_group_t){r->coll, r->nodes, r->ranks, (uint32_t)i, 0};
      if (pol->slices[r->slice].ngroups == 0) pol->slices[r->slice].first_group = pol->ngroups;
      pol->slices[r->slice].ngroups++;
      pol->ngroups++;
    }
    g->count++;
    pol->ranges[i] = (dccl_range_t){r->lo, r->hi, r->knobs, (uint8_t)r->coll, r->nodes, r->ranks};
    pol->los[i] = r->lo;
  }
  pol->nranges = (uint32_t)n;
  return 0;
}

/* The checksum line must be the file's last line: "checksum crc32 <8 lowercase hex digits>". */
static int check_checksum(const char* data, size_t len, size_t* body_len, char* err, size_t errlen) {
  if (len == 0 || data[len - 1] != '\n') {
    set_err(err, errlen, "the file is truncated (it does not end with the checksum line)");
    return -1;
  }
  size_t start = len - 1;
  while (start > 0 && data[start - 1] != '\n') start--;
  const char* line = data + start;
  size_t llen = len - 1 - start;
  const char prefix[] = DCCL_CHECKSUM_PREFIX;
  if (llen != sizeof(prefix) - 1 + 8 || memcmp(line, prefix, sizeof(prefix) - 1) != 0) {
    set_err(err, errlen, "the file is truncated or corrupted (its last line is not "
            "'" DCCL_CHECKSUM_PREFIX "XXXXXXXX')");
    return -1;
  }
  uint32_t want = 0;
  for (int i = 0; i < 8; i++) {
    char c = line[sizeof(prefix) - 1 + i];
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) {
      set_err(err, errlen, "the checksum is not 8 lowercase hexadecimal digits");
      return -1;
    }
    want = want << 4 | (uint32_t)d;
  }
  uint32_t got = dccl_crc32(data, start);
  if (got != want) {
    set_err(err, errlen, "checksum mismatch (file says %08x, content hashes to %08x): the file "
            "was edited or corrupted; re-export it", want, got);
    return -1;
  }
  *body_len = start;
  return 0;
}

int dccl_policy_parse(const char* data, size_t len, dccl_policy_t** out, char* err, size_t errlen) {
  *out = NULL;
  if (len > DCCL_MAX_FILE_BYTES) {
    set_err(err, errlen, "the file is over the %u-byte limit", DCCL_MAX_FILE_BYTES);
    return -1;
  }
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)data[i];
    if ((c < 0x20 || c > 0x7e) && c != '\n' && c != '\t' && c != '\r') {
      set_err(err, errlen, "byte %zu is not printable ASCII (binary or corrupted file)", i);
      return -1;
    }
  }
  size_t body_len = 0;
  parser_t ps;
  memset(&ps, 0, sizeof(ps));
  ps.err = err;
  ps.errlen = errlen;
  ps.pol = calloc(1, sizeof(dccl_policy_t));
  if (!ps.pol) {
    set_err(err, errlen, "out of memory");
    return -1;
  }
  /* The first line is read before the checksum so a foreign or newer file says what it is. */
  const char* nl = memchr(data, '\n', len);
  ps.line = 1;
  int rc = parse_line(&ps, data, nl ? (size_t)(nl - data) : len);
  if (rc == 0) rc = check_checksum(data, len, &body_len, err, errlen);
  for (size_t pos = nl ? (size_t)(nl - data) + 1 : len; rc == 0 && pos < body_len;) {
    const char* e = memchr(data + pos, '\n', body_len - pos);
    size_t l = (size_t)(e - (data + pos)); /* the body ends with '\n', so e is never NULL */
    ps.line++;
    rc = parse_line(&ps, data + pos, l);
    pos += l + 1;
  }
  for (size_t k = 0; rc == 0 && k < DCCL_NUM_REQUIRED_HEADER; k++) {
    if (!ps.seen[k]) {
      set_err(err, errlen, "header '%s' is missing", dccl_required_header[k]);
      rc = -1;
    }
  }
  if (rc == 0) {
    int has_default = 0;
    for (int i = 0; i < ps.nslices; i++)
      has_default |= !strcmp(ps.slices[i].straggler, DCCL_DEFAULT_BUCKET) &&
                     !strcmp(ps.slices[i].c2c, DCCL_DEFAULT_BUCKET);
    if (!has_default) {
      set_err(err, errlen, "no default slice ('" DCCL_TOKEN_SLICE " " DCCL_CONTEXT_KEY_STRAGGLER "="
              DCCL_DEFAULT_BUCKET " " DCCL_CONTEXT_KEY_C2C "=" DCCL_DEFAULT_BUCKET "')");
      rc = -1;
    }
  }
  if (rc == 0) rc = build(&ps);
  free(ps.rules);
  if (rc != 0) {
    dccl_policy_free(ps.pol);
    return -1;
  }
  *out = ps.pol;
  return 0;
}

void dccl_policy_free(dccl_policy_t* policy) {
  if (!policy) return;
  free(policy->ranges);
  free(policy->groups);
  free(policy->slices);
  free(policy->logged);
  free(policy->los);
  free(policy);
}

int dccl_policy_find_slice(const dccl_policy_t* policy, const char* straggler, const char* c2c) {
  for (uint32_t i = 0; i < policy->nslices; i++)
    if (!strcmp(policy->slices[i].straggler, straggler) && !strcmp(policy->slices[i].c2c, c2c))
      return (int)i;
  return -1;
}

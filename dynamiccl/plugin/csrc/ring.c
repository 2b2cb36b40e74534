/* The ring file: created under a hidden name, readable by its owner only, its header filled, then
 * renamed into place, so a reader that finds it finds it complete (dynamiccl/plugin/profile_ring.py
 * is the reader). A ring that cannot be created leaves a note named like it saying why, so the
 * reader knows its profile misses that rank rather than taking the ranks it has for the job. */
#define _GNU_SOURCE
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "policy_format.h" /* DCCL_PLUGIN_VERSION */

static uint32_t g_serial; /* communicators of this process: part of every ring's name */

uint64_t dccl_realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fill_header(dccl_ring_header_t* h, uint32_t capacity, const dccl_ring_owner_t* o) {
  h->version = DCCL_RING_VERSION;
  h->header_bytes = sizeof(dccl_ring_header_t);
  h->record_bytes = sizeof(dccl_ring_record_t);
  h->capacity = capacity;
  h->comm_id = o->comm_id;
  h->rank = o->rank;
  h->nranks = o->nranks;
  h->nnodes = o->nnodes;
  h->pid = (int32_t)getpid();
  h->abi = o->abi;
  h->created_ns = dccl_realtime_ns();
  if (o->comm_name) snprintf(h->comm_name, sizeof(h->comm_name), "%s", o->comm_name);
  snprintf(h->plugin_version, sizeof(h->plugin_version), "%s", DCCL_PLUGIN_VERSION);
  memcpy(h->magic, DCCL_RING_MAGIC, sizeof(h->magic));
}

/* DIR/<the ring's name>.failed holding `why` (best effort: on a full disk the name alone says it). */
static void note_failure(const char* dir, unsigned serial, const dccl_ring_owner_t* owner,
                         const char* why) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof(path), "%s/" DCCL_RING_FAILED_FORMAT, dir, (int)getpid(), serial,
                   (unsigned long long)owner->comm_id, owner->rank);
  if (n < 0 || n >= (int)sizeof(path)) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  ssize_t written = write(fd, why, strlen(why));
  (void)written;
  close(fd);
}

int dccl_ring_create(dccl_ring_t* ring, const char* dir, uint32_t capacity,
                     const dccl_ring_owner_t* owner, char* err, size_t errlen) {
  char name[128], path[PATH_MAX], tmp[PATH_MAX];
  unsigned serial = __atomic_fetch_add(&g_serial, 1, __ATOMIC_RELAXED);
  snprintf(name, sizeof(name), DCCL_RING_FILE_FORMAT, (int)getpid(), serial,
           (unsigned long long)owner->comm_id, owner->rank);
  if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path) ||
      snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name) >= (int)sizeof(tmp)) {
    snprintf(err, errlen, "the directory name is too long");
    return -1;
  }
  size_t bytes = sizeof(dccl_ring_header_t) + (size_t)capacity * sizeof(dccl_ring_record_t);
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    note_failure(dir, serial, owner, err);
    return -1;
  }
  int rc = posix_fallocate(fd, 0, (off_t)bytes);
  void* base = rc == 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (base == MAP_FAILED) {
    snprintf(err, errlen, "cannot reserve %zu bytes for %s: %s", bytes, tmp,
             strerror(rc ? rc : errno));
    close(fd);
    unlink(tmp);
    note_failure(dir, serial, owner, err);
    return -1;
  }
  close(fd);
  ring->header = base;
  ring->records = (dccl_ring_record_t*)((char*)base + sizeof(dccl_ring_header_t));
  ring->mask = capacity - 1;
  ring->bytes = bytes;
  fill_header(ring->header, capacity, owner);
  if (rename(tmp, path) != 0) {
    snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    munmap(base, bytes);
    unlink(tmp);
    note_failure(dir, serial, owner, err);
    return -1;
  }
  return 0;
}

void dccl_ring_publish(dccl_ring_t* ring, const dccl_ring_record_t* rec) {
  uint64_t index = __atomic_fetch_add(&ring->header->head, 1, __ATOMIC_RELAXED);
  dccl_ring_record_t* slot = &ring->records[index & ring->mask];
  /* seqlock: commit 0 first, the fields, then the index + 1 a reader checks before and after */
  (void)__atomic_exchange_n(&slot->commit, 0, __ATOMIC_ACQUIRE); /* the fields go after it */
  memcpy((char*)slot + sizeof(slot->commit), (const char*)rec + sizeof(rec->commit),
         sizeof(*rec) - sizeof(rec->commit));
  __atomic_store_n(&slot->commit, index + 1, __ATOMIC_RELEASE);
}

void dccl_ring_close(dccl_ring_t* ring) {
  if (!ring->header) return;
  __atomic_store_n(&ring->header->closed, 1, __ATOMIC_RELEASE);
  munmap(ring->header, ring->bytes);
  ring->header = NULL;
  ring->records = NULL;
}

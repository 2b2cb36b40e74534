/* One rank's ring of completed collectives in a shared file a reader maps (dynamiccl/plugin/profile_ring.py
 * documents the format; the structs are generated into profiler_format.h). Writers never wait:
 * a record is claimed with one atomic increment and committed seqlock-style. */
#ifndef DYNAMICCL_RING_H
#define DYNAMICCL_RING_H

#include <stdint.h>

#include "profiler_format.h"

#pragma GCC visibility push(hidden)

typedef struct {
  dccl_ring_header_t* header;
  dccl_ring_record_t* records;
  uint64_t mask;
  size_t bytes;
} dccl_ring_t;

typedef struct {
  uint64_t comm_id;
  int rank, nranks, nnodes;
  unsigned abi;
  const char* comm_name; /* may be NULL */
} dccl_ring_owner_t;

/* Creates DIR/<name>.ring (mode 0600) of `capacity` records (a power of two, already checked), its
 * memory reserved up front (a full /dev/shm fails here, never later with SIGBUS), and maps it. 0 ok;
 * -1 with the reason in err, and in DIR/<name>.failed for the reader. */
int dccl_ring_create(dccl_ring_t* ring, const char* dir, uint32_t capacity,
                     const dccl_ring_owner_t* owner, char* err, size_t errlen);
/* Appends rec (its commit field is set here). Lock-free; safe from any thread. */
void dccl_ring_publish(dccl_ring_t* ring, const dccl_ring_record_t* rec);
static inline void dccl_ring_drop(dccl_ring_t* ring, int reason) {
  __atomic_fetch_add(&ring->header->drops[reason], 1, __ATOMIC_RELAXED);
}
/* Marks the ring closed (no more records) and unmaps it; the file stays for readers. */
void dccl_ring_close(dccl_ring_t* ring);

uint64_t dccl_realtime_ns(void);

#pragma GCC visibility pop

#endif

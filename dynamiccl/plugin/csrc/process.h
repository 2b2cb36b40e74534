/* State shared by every communicator of the process: the policy (read once, at the first
 * communicator that names one, and kept for the process's life), the run-time context slice and the
 * pins set through the dynamiccl_* entry points.
 *
 * getCollInfo reads the dynamic parts without locks: the context is one atomic word naming an
 * interned (never freed) bucket pair, and the pins are an immutable table behind an atomic
 * pointer, replaced whole by writers (who serialise on a mutex and free an old table only once no
 * reader holds it). With nothing pinned the hot path costs two relaxed loads. */
#ifndef DYNAMICCL_PROCESS_H
#define DYNAMICCL_PROCESS_H

#include <stdint.h>

#include "nccl_tuner_abi.h"
#include "policy.h"

#pragma GCC visibility push(hidden)

/* The process's policy: the first call reads path, checks it (fleet.h) and keeps the outcome for
 * the process's life; every call returns that policy, or NULL when NCCL decides (one WARN, at the
 * first call, says why). A later call naming another file, or finding the file changed, keeps the
 * first and says so once. nccl_caller: an address in the library that called init (NCCL). The
 * policy is never freed: communicators hold it without references. */
dccl_policy_t* dccl_acquire_policy(const char* path, const void* nccl_caller, ncclDebugLogger_t log);
/* Copies the process's policy hash; -1 when it uses none or len is too small. */
int dccl_loaded_policy_hash(char* out, size_t len);

/* 0 while no context was set at run time; else 1 + the interned index of the active context.
 * Written with release order after the interned entry, so an acquire load sees its buckets. */
extern uint32_t dccl_g_context_word;
static inline uint32_t dccl_context_word(void) {
  return __atomic_load_n(&dccl_g_context_word, __ATOMIC_ACQUIRE);
}
/* The buckets of a context word (word != 0). */
void dccl_context_buckets(uint32_t word, const char** straggler, const char** c2c);
/* dynamiccl_set_context: 0 matched a slice of the loaded policy, 1 none matched, -1 bad input. */
int dccl_set_context(const char* spec);

/* Non-NULL while any pin exists (the table itself is private to process.c). */
extern void* dccl_g_pins;
static inline int dccl_any_pins(void) { return __atomic_load_n(&dccl_g_pins, __ATOMIC_RELAXED) != NULL; }
/* The pin for this call, or NULL; call only when dccl_any_pins(). The result stays valid until
 * dccl_pins_done(). */
const dccl_range_t* dccl_pins_lookup(int coll, uint64_t nbytes);
void dccl_pins_done(void);
/* Pins [min_bytes, max_bytes) of a collective to a decision: n values in the knob table's order
 * (DCCL_KEEP: keep NCCL's value), or NULL to unpin. 0 ok, -1 bad input or too many pins. */
int dccl_pin_knobs(int coll, uint64_t min_bytes, uint64_t max_bytes, const long long* values, int n);
/* dynamiccl_pin's older spelling: algorithm -1 unpins, channels 0 keeps NCCL's count. */
int dccl_pin(int coll, uint64_t min_bytes, uint64_t max_bytes, int algo, int proto, int channels);

/* NCCL_ALGO / NCCL_PROTO were set when a communicator initialised: pins then do nothing. */
void dccl_note_user_override(void);
/* A call a pin covered: its choice was forced (1) or NCCL could not run it there (0). */
void dccl_count_pin(int forced);
/* How many calls a pin covered since the process started: forced, and refused by NCCL's table. */
void dccl_pin_counts(uint64_t* forced, uint64_t* refused);

#pragma GCC visibility pop

#endif

/* Prints, for every field and struct of NCCL's profiler interface the plugin relies on, its offset
 * and size in NCCL's own header and in dynamiccl's nccl_profiler_abi.h, one line each:
 *
 *   NAME NCCL_OFFSET NCCL_SIZE OUR_OFFSET OUR_SIZE
 *
 * Compiled by tests/test_profiler_plugin.py with -I at a folder of NCCL's headers
 * (tests/fixtures/nccl_headers/: profiler_v4.h and profiler_v5.h of 2.28.9, profiler_v6.h of 2.29.7,
 * which includes profiler_v5.h) and -DNCCL_V4 or -DNCCL_V6 (none: v5). NCCL's headers expect these types from nccl_profiler.h (C++ there). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

typedef int ncclResult_t;
typedef void (*ncclDebugLogger_t)(int, unsigned long, const char*, int, const char*, ...);
typedef int ncclProfilerEventState_v4_t, ncclProfilerEventState_v5_t, ncclProfilerEventState_v6_t;

#ifdef NCCL_V6
#include "profiler_v6.h"
#define NCCL_DESCR ncclProfilerEventDescr_v6_t
#define NCCL_ARGS ncclProfilerEventStateArgs_v6_t
#define NCCL_TABLE ncclProfiler_v6_t
#define OUR_DESCR dccl_prof_descr_v5_t
#define OUR_TABLE dccl_profiler_v5_t
#elif defined(NCCL_V4)
#include "profiler_v4.h"
#define NCCL_DESCR ncclProfilerEventDescr_v4_t
#define NCCL_ARGS ncclProfilerEventStateArgs_v4_t
#define NCCL_TABLE ncclProfiler_v4_t
#define OUR_DESCR dccl_prof_descr_v4_t
#define OUR_TABLE dccl_profiler_v4_t
#else
#include "profiler_v5.h"
#define NCCL_DESCR ncclProfilerEventDescr_v5_t
#define NCCL_ARGS ncclProfilerEventStateArgs_v5_t
#define NCCL_TABLE ncclProfiler_v5_t
#define OUR_DESCR dccl_prof_descr_v5_t
#define OUR_TABLE dccl_profiler_v5_t
#endif

#include "../nccl_profiler_abi.h"

#define FIELD(T_NCCL, T_OURS, f)                                                                  \
  printf("%s.%s %zu %zu %zu %zu\n", #T_NCCL, #f, offsetof(T_NCCL, f), sizeof(((T_NCCL*)0)->f), \
         offsetof(T_OURS, f), sizeof(((T_OURS*)0)->f))
#define SIZE(T_NCCL, T_OURS) \
  printf("sizeof(%s) 0 %zu 0 %zu\n", #T_NCCL, sizeof(T_NCCL), sizeof(T_OURS))

int main(void) {
  SIZE(NCCL_DESCR, OUR_DESCR);
  FIELD(NCCL_DESCR, OUR_DESCR, type);
  FIELD(NCCL_DESCR, OUR_DESCR, parentObj);
  FIELD(NCCL_DESCR, OUR_DESCR, rank);
  FIELD(NCCL_DESCR, OUR_DESCR, coll.seqNumber);
  FIELD(NCCL_DESCR, OUR_DESCR, coll.func);
  FIELD(NCCL_DESCR, OUR_DESCR, coll.count);
  FIELD(NCCL_DESCR, OUR_DESCR, coll.datatype);
  FIELD(NCCL_DESCR, OUR_DESCR, coll.nChannels);
  FIELD(NCCL_DESCR, OUR_DESCR, coll.nWarps);
  FIELD(NCCL_DESCR, OUR_DESCR, coll.algo);
  FIELD(NCCL_DESCR, OUR_DESCR, coll.proto);
  FIELD(NCCL_DESCR, OUR_DESCR, kernelCh.channelId);
  FIELD(NCCL_DESCR, OUR_DESCR, kernelCh.pTimer);
  SIZE(NCCL_ARGS, dccl_prof_state_args_t);
  FIELD(NCCL_ARGS, dccl_prof_state_args_t, kernelCh.pTimer);
  SIZE(NCCL_TABLE, OUR_TABLE);
  FIELD(NCCL_TABLE, OUR_TABLE, name);
  FIELD(NCCL_TABLE, OUR_TABLE, init);
  FIELD(NCCL_TABLE, OUR_TABLE, startEvent);
  FIELD(NCCL_TABLE, OUR_TABLE, stopEvent);
  FIELD(NCCL_TABLE, OUR_TABLE, recordEventState);
  FIELD(NCCL_TABLE, OUR_TABLE, finalize);
  return 0;
}

/* The slice of NCCL's profiler-plugin interface DynamICCL needs, written from the facts of NCCL's
 * public headers (src/include/plugin/profiler/profiler_v4.h and profiler_v5.h at NCCL 2.28.9,
 * profiler_v6.h at 2.29.7). Only layouts: tests/test_profiler_plugin.py compiles NCCL's own headers
 * (tests/fixtures/nccl_headers/) beside this one and compares every offset and size used here.
 *
 * Versions (src/plugin/profiler.cc loads the newest it knows first): v4 (NCCL 2.27) has a one-byte
 * event type and init(ctx, mask, commName, commHash, nNodes, nranks, rank, logfn); v5 (2.28) a
 * 64-bit type, API events and init(ctx, commId, mask, commName, nNodes, nranks, rank, logfn); v6
 * (2.29) adds copy-engine events in the same 112-byte descriptor. The union members read here
 * (coll, kernelCh) have one layout in all three; the rest of NCCL's union is padding here. */
#ifndef DYNAMICCL_NCCL_PROFILER_ABI_H
#define DYNAMICCL_NCCL_PROFILER_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "nccl_tuner_abi.h" /* ncclResult_t, ncclDebugLogger_t */

/* A coll event: one collective task at plan launch (v4 lacks the trailing parentGroup of v5/v6). */
typedef struct {
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;
  const char* proto;
} dccl_prof_coll_t;

/* A kernelCh event: one channel of a collective's kernel; pTimer is its start on the GPU's
 * global timer (ns). */
typedef struct {
  uint8_t channelId;
  uint64_t pTimer;
} dccl_prof_kernel_ch_t;

typedef struct {
  uint64_t type; /* ncclProfileColl, ncclProfileKernelCh, ... */
  void* parentObj;
  int rank;
  union {
    dccl_prof_coll_t coll;
    dccl_prof_kernel_ch_t kernelCh;
    unsigned char union_bytes_[88];
  };
} dccl_prof_descr_v5_t; /* v6's descriptor has the same layout */

typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    dccl_prof_coll_t coll;
    dccl_prof_kernel_ch_t kernelCh;
    unsigned char union_bytes_[80];
  };
} dccl_prof_descr_v4_t;

/* recordEventState's arguments (v4..v6): kernelCh.pTimer is the channel's stop time. */
typedef union {
  size_t transSize;
  int appendedProxyOps;
  void* data;
  struct {
    uint64_t pTimer;
  } kernelCh;
} dccl_prof_state_args_t;

typedef int dccl_prof_state_t; /* ncclProfilerEventState_t */

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                       int nNodes, int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, dccl_prof_descr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, dccl_prof_state_t eState,
                                   dccl_prof_state_args_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} dccl_profiler_v5_t; /* ncclProfiler_v5 and ncclProfiler_v6 */

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask, const char* commName, uint64_t commHash,
                       int nNodes, int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, dccl_prof_descr_v4_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, dccl_prof_state_t eState,
                                   dccl_prof_state_args_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} dccl_profiler_v4_t;

#endif

/* The profiler benchmark's baseline: a profiler that records nothing, built with the same flags as
 * the real one. It hands out one dummy handle for every event, so NCCL (and the benchmark's
 * harness) makes exactly the calls it makes with DynamICCL: the difference in time per event pair
 * is what recording costs. */
#include "../nccl_profiler_abi.h"

static int g_dummy;

static ncclResult_t init(void** ctx, uint64_t commId, int* mask, const char* name, int nNodes,
                         int nranks, int rank, ncclDebugLogger_t log) {
  (void)commId, (void)name, (void)nNodes, (void)nranks, (void)rank, (void)log;
  *ctx = &g_dummy;
  *mask = 2 | 64; /* coll and kernelCh, as DynamICCL asks */
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t start(void* ctx, void** handle, dccl_prof_descr_v5_t* d) {
  (void)ctx;
  *handle = d->type == 1 ? NULL : &g_dummy; /* no group handle, as DynamICCL */
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t stop(void* handle) {
  (void)handle;
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t state(void* handle, dccl_prof_state_t s, dccl_prof_state_args_t* a) {
  (void)handle, (void)s, (void)a;
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t finalize(void* ctx) {
  (void)ctx;
  return DCCL_NCCL_SUCCESS;
}

__attribute__((visibility("default"))) const dccl_profiler_v5_t ncclProfiler_v6 = {
    "noop", init, start, stop, state, finalize};

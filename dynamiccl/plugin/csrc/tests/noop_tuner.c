/* The benchmark's baseline: a tuner that does nothing, built with the same flags as the real one,
 * so the difference in time per getCollInfo is what DynamICCL's lookup costs. */
#include "../nccl_tuner_abi.h"

static ncclResult_t init(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                         ncclDebugLogger_t log, dccl_nvl_domain_info_t* nvl,
                         dccl_tuner_constants_t* constants) {
  (void)commId, (void)nRanks, (void)nNodes, (void)log, (void)nvl, (void)constants;
  *ctx = NULL;
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t coll(void* ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                         float** table, int numAlgo, int numProto, int regBuff, int* nChannels) {
  (void)ctx, (void)collType, (void)nBytes, (void)numPipeOps, (void)table, (void)numAlgo;
  (void)numProto, (void)regBuff, (void)nChannels;
  return DCCL_NCCL_SUCCESS;
}

static ncclResult_t finalize(void* ctx) {
  (void)ctx;
  return DCCL_NCCL_SUCCESS;
}

__attribute__((visibility("default"))) const dccl_tuner_v6_t ncclTunerPlugin_v6 = {
    "noop", init, coll, finalize, NULL};

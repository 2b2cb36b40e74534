/* The slice of NCCL's tuner-plugin interface DynamICCL needs, written from the facts of NCCL's public
 * headers (NCCL 2.30.7 src/include/plugin/nccl_tuner.h, src/include/plugin/tuner/tuner_v2.h ..
 * tuner_v6.h; no NCCL header ships with the wheel, so the plugin carries its own). Only layouts and
 * constants: nothing here is NCCL code.
 *
 * Versions (src/plugin/tuner.cc loads v6, then v5 .. v2): v2 (NCCL 2.21) chooses algorithm/protocol through out-parameters; v3 and
 * later read a contiguous float[numAlgo][numProto] cost table; v4 adds regBuff; v5 moves the
 * context out-pointer to the first init argument and adds commId, NVL-domain info and the
 * cost-model constants; v6 adds the optional getChunkSize. */
#ifndef DYNAMICCL_NCCL_TUNER_ABI_H
#define DYNAMICCL_NCCL_TUNER_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int ncclResult_t; /* ncclSuccess = 0; a tuner never returns anything else */
#define DCCL_NCCL_SUCCESS 0

typedef int ncclFunc_t; /* NCCL's collective ids (DCCL_COLL_* in policy_format.h) */

/* Logger (src/include/nccl_common.h). Levels and the TUNING subsystem bit are all we use. */
enum { DCCL_LOG_WARN = 2, DCCL_LOG_INFO = 3 };
#define DCCL_LOG_SUBSYS_TUNING 0x40UL
typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

/* v5/v6 init arguments (tuner_v5.h): 12-byte NVL-domain info; the 1152-byte constants block is
 * passed through untouched, so it stays opaque here. */
typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} dccl_nvl_domain_info_t;
typedef struct dccl_tuner_constants dccl_tuner_constants_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int collNetSupport,
                              int nvlsSupport, int numPipeOps, int* algorithm, int* protocol,
                              int* nChannels);
  ncclResult_t (*destroy)(void* context);
} dccl_tuner_v2_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} dccl_tuner_v3_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*destroy)(void* context);
} dccl_tuner_v4_t;

typedef ncclResult_t (*dccl_init_v5_fn)(void** context, uint64_t commId, size_t nRanks,
                                        size_t nNodes, ncclDebugLogger_t logFunction,
                                        dccl_nvl_domain_info_t* nvlDomainInfo,
                                        dccl_tuner_constants_t* constants);

typedef struct {
  const char* name;
  dccl_init_v5_fn init;
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*finalize)(void* context);
} dccl_tuner_v5_t;

typedef struct {
  const char* name;
  dccl_init_v5_fn init;
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*finalize)(void* context);
  ncclResult_t (*getChunkSize)(void* context, ncclFunc_t collType, size_t nBytes, int algorithm,
                               int protocol, int nChannels, size_t* chunkSize);
} dccl_tuner_v6_t;

#endif

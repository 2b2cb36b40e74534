/* The stand-in NCCL's ncclGetVersion (NCCL 2.30.7 src/nccl.h.in: ncclResult_t ncclGetVersion(int*)),
 * for the test programs that play NCCL towards the plugin: the plugin reads the running NCCL's
 * version through this symbol, so each program exports it (link with -rdynamic). It answers
 * g_standin_nccl_version, 2.30.7 (the NCCL PyTorch 2.15 bundles) unless a test sets another; 0
 * makes it fail, as if no NCCL could tell its version. Include from exactly one file a program. */
#ifndef DYNAMICCL_NCCL_VERSION_STANDIN_H
#define DYNAMICCL_NCCL_VERSION_STANDIN_H

#include "../policy_format.h"

static int g_standin_nccl_version = DCCL_NCCL_VERSION_CODE(2, 30, 7);

int ncclGetVersion(int* version) __attribute__((visibility("default")));
int ncclGetVersion(int* version) {
  if (!version || g_standin_nccl_version <= 0) return 4; /* ncclInvalidArgument */
  *version = g_standin_nccl_version;
  return 0;
}

#endif

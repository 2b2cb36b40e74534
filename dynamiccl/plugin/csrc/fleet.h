/* The checks that keep a fleet's ranks deciding alike, each made once per process, at the first
 * communicator's init (fleet.c says why each one is there):
 *  - NCCL_ALGO / NCCL_PROTO in the environment: NCCL's own forcing wins and the plugin does nothing;
 *  - DYNAMICCL_POLICY_SHA256: the file this rank read must be the one the job was launched with;
 *  - the policy's NCCL version window: the NCCL running the process must be one it holds for;
 *  - a network plugin with its own tuner (aws-ofi-nccl): DynamICCL replaces it, so "defer" means
 *    NCCL's built-in model.
 * Nothing here runs per call. */
#ifndef DYNAMICCL_FLEET_H
#define DYNAMICCL_FLEET_H

#include "nccl_tuner_abi.h"
#include "policy.h"

#pragma GCC visibility push(hidden)

/* 1 when NCCL_ALGO or NCCL_PROTO is set (the plugin then leaves every call to NCCL); said once per
 * process, at WARN when DYNAMICCL_POLICY names a policy (which is then not used), else at INFO. */
int dccl_nccl_forces_choice(ncclDebugLogger_t log);

/* Whether this process may use the policy it has just read from path: its SHA-256 is the one
 * DYNAMICCL_POLICY_SHA256 expects (when set) and the NCCL that runs the process lies in its version
 * window. When not, one WARN says why and why NCCL now decides; the reason is also copied to why.
 * nccl_caller: an address in the library that called the tuner's init (NCCL). */
int dccl_admit_policy(const dccl_policy_t* policy, const char* path, const void* nccl_caller,
                      ncclDebugLogger_t log, char* why, size_t whylen);

/* An nccl header value ("A.B.C" or "A.B.C..X.Y.Z") as inclusive version codes: 0, or -1 when it is
 * not one (the grammar of dynamiccl.system.nccl_versions.parse_window). */
int dccl_nccl_window(const char* text, int* low, int* high);

/* The version code of the NCCL running this process (ncclGetVersion of the library that called
 * init, else of any library in the global scope), 0 when none can be found. */
int dccl_running_nccl_version(const void* nccl_caller);

/* When aws-ofi-nccl is the network plugin (loaded, or named by NCCL_NET_PLUGIN), says once per
 * process that DynamICCL replaces its tuner: at WARN with a policy in use, else at INFO. */
void dccl_note_net_plugin(int policy_in_use, ncclDebugLogger_t log);

#pragma GCC visibility pop

#endif

/* NCCL as a library, for the one path the other stand-ins cannot take: PyTorch loads libnccl.so.2
 * RTLD_LOCAL (a dependency of its own extension), so NCCL's ncclGetVersion is not in the process's
 * global scope, and the plugin must read the version from the library that called its init. This
 * library, itself opened RTLD_LOCAL, exports ncclGetVersion (the version standin_nccl sets) and
 * calls the plugin's v6 init as NCCL does:
 *   standin_nccl(PLUGIN.so, VERSION_CODE) -> 1 the plugin took its policy, 0 it left NCCL to decide,
 *                                            -1 the plugin could not be loaded.
 * Whether it took the policy is what its dynamiccl_policy_hash says (every communicator gets a
 * context, with or without one). */
#include <dlfcn.h>
#include <stddef.h>

#include "../nccl_tuner_abi.h"

#define EXPORT __attribute__((visibility("default")))

static int g_version;

EXPORT int ncclGetVersion(int* version) {
  if (!version) return 4; /* ncclInvalidArgument */
  *version = g_version;
  return 0;
}

EXPORT int standin_nccl(const char* plugin, int version) {
  g_version = version;
  void* handle = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
  const dccl_tuner_v6_t* tuner = handle ? dlsym(handle, "ncclTunerPlugin_v6") : NULL;
  int (*policy_hash)(char*, size_t) = handle ? (int (*)(char*, size_t))dlsym(handle,
                                                                             "dynamiccl_policy_hash")
                                             : NULL;
  if (!tuner || !policy_hash) return -1;
  void* context = NULL;
  if (tuner->init(&context, 1, 16, 2, NULL, NULL, NULL) != 0) return -1;
  char hash[65];
  int took = policy_hash(hash, sizeof(hash)) == 0;
  tuner->finalize(context);
  return took;
}

/* Logging through NCCL's own logger only (never printf): visible with NCCL_DEBUG=INFO and
 * NCCL_DEBUG_SUBSYS=TUNING (the tuner) or PROFILE (the profiler), silent otherwise. A NULL logger
 * drops the message. */
#ifndef DYNAMICCL_LOG_H
#define DYNAMICCL_LOG_H

#include <stdarg.h>
#include <stdio.h>

#include "nccl_tuner_abi.h"

static inline void dccl_log(ncclDebugLogger_t log, int level, unsigned long subsys, const char* file,
                            int line, const char* fmt, ...) __attribute__((format(printf, 6, 7)));
static inline void dccl_log(ncclDebugLogger_t log, int level, unsigned long subsys, const char* file,
                            int line, const char* fmt, ...) {
  char msg[1024];
  if (!log) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  log(level, subsys, file, line, "%s", msg);
}
#define DCCL_INFO(log, ...) \
  dccl_log(log, DCCL_LOG_INFO, DCCL_LOG_SUBSYS_TUNING, __FILE__, __LINE__, __VA_ARGS__)
#define DCCL_WARN(log, ...) \
  dccl_log(log, DCCL_LOG_WARN, DCCL_LOG_SUBSYS_TUNING, __FILE__, __LINE__, __VA_ARGS__)
/* NCCL_PROFILE, the logger's subsystem bit for profiler messages (src/include/nccl_common.h). */
#define DCCL_LOG_SUBSYS_PROFILE 0x4000UL
#define DCCL_PROF_INFO(log, ...) \
  dccl_log(log, DCCL_LOG_INFO, DCCL_LOG_SUBSYS_PROFILE, __FILE__, __LINE__, __VA_ARGS__)
#define DCCL_PROF_WARN(log, ...) \
  dccl_log(log, DCCL_LOG_WARN, DCCL_LOG_SUBSYS_PROFILE, __FILE__, __LINE__, __VA_ARGS__)

#endif

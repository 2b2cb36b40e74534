/* Logging through NCCL's own logger only (never printf): visible with NCCL_DEBUG=INFO and
 * NCCL_DEBUG_SUBSYS=TUNING, silent otherwise. A NULL logger drops the message. */
#ifndef DYNAMICCL_LOG_H
#define DYNAMICCL_LOG_H

#include <stdarg.h>
#include <stdio.h>

#include "nccl_tuner_abi.h"

static inline void dccl_log(ncclDebugLogger_t log, int level, const char* file, int line,
                            const char* fmt, ...) __attribute__((format(printf, 5, 6)));
static inline void dccl_log(ncclDebugLogger_t log, int level, const char* file, int line,
                            const char* fmt, ...) {
  char msg[1024];
  if (!log) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  log(level, DCCL_LOG_SUBSYS_TUNING, file, line, "%s", msg);
}
#define DCCL_INFO(log, ...) dccl_log(log, DCCL_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define DCCL_WARN(log, ...) dccl_log(log, DCCL_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)

#endif

/* SHA-256 (FIPS 180-4) of a byte buffer, as lowercase hex: the policy file's content hash, equal to
 * Python's hashlib.sha256(data).hexdigest(), so a rank's log line and `dynamiccl show` compare. */
#ifndef DYNAMICCL_SHA256_H
#define DYNAMICCL_SHA256_H

#include <stddef.h>

#pragma GCC visibility push(hidden)

/* Writes 64 hex digits and a NUL into out. */
void dccl_sha256_hex(const void* data, size_t len, char out[65]);

#pragma GCC visibility pop

#endif

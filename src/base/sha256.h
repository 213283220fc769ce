/* base/sha256.h - SHA-256 (FIPS 180-4), incremental, for verifying downloaded files.
 *
 * Usage: rp_sha256_init(&c); rp_sha256_update(&c, p, n)...; rp_sha256_final(&c, digest).
 * rp_sha256_hex writes the 64-character lowercase hex form used by the Hugging Face hub.
 *
 * Ownership: the context is a plain value owned by the caller; nothing is allocated.
 * Threading: one thread per context.
 * Errors:    rp_sha256_file returns RP_ERR_NOT_FOUND / RP_ERR_IO with a message.
 */
#ifndef RP_BASE_SHA256_H
#define RP_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct rp_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;   /* total bytes fed so far */
    uint8_t block[64];
    size_t n_block;     /* bytes waiting in block */
} rp_sha256;

void rp_sha256_init(rp_sha256 *c);
void rp_sha256_update(rp_sha256 *c, const void *data, size_t n);
void rp_sha256_final(rp_sha256 *c, uint8_t digest[32]);

/* digest -> 64 hex characters and a NUL. */
void rp_sha256_hex(const uint8_t digest[32], char out[65]);

/* Hashes a whole file (read in chunks); out gets the hex digest. */
rp_status rp_sha256_file(const char *path, char out[65], rp_err *err);

#endif

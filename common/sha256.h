/* SHA-256 (FIPS 180-4): the weights digest torchlike reports for DIF-1 and
 * the plugin-file fingerprint in conformance reports. Small and plain so that
 * neither a plugin nor the harness needs a crypto library. Internal to this
 * repository (not part of the SDK); linked statically, PIC. */
#ifndef ILAB_COMMON_SHA256_H
#define ILAB_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct ilab_sha256 {
    uint32_t h[8];
    unsigned char pending[64]; /* bytes not yet hashed (less than a block) */
    size_t n_pending;
    uint64_t total;            /* bytes fed so far */
} ilab_sha256;

void ilab_sha256_init(ilab_sha256 *s);
void ilab_sha256_update(ilab_sha256 *s, const void *data, size_t len);
/* Finish and write 64 lowercase hex digits and a NUL into hex[65]. */
void ilab_sha256_final_hex(ilab_sha256 *s, char hex[65]);

/* One-shot convenience. */
void ilab_sha256_hex(const void *data, size_t len, char hex[65]);

#endif

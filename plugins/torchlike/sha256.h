/* torchlike — SHA-256 (FIPS 180-4), for the weights digest in model_info()
 * (DIF-1 compares backends by it). Small and plain so the plugin needs no
 * crypto library. */
#ifndef TORCHLIKE_SHA256_H
#define TORCHLIKE_SHA256_H

#include <stddef.h>

/* Writes 64 lowercase hex digits and a NUL into hex[65]. */
void tl_sha256_hex(const void *data, size_t len, char hex[65]);

#endif

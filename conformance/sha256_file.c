/* SHA-256 of a plugin file, for the report's plugin identity. */
#include <stdio.h>

#include "harness.h"
#include "sha256.h"

bool conf_sha256_file(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    ilab_sha256 s;
    ilab_sha256_init(&s);
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        ilab_sha256_update(&s, buf, n);
    bool ok = !ferror(f);
    fclose(f);
    ilab_sha256_final_hex(&s, hex);
    return ok;
}

/* Shared by the libFuzzer targets in fuzz/: the entry points libFuzzer calls
 * and the property check that turns a broken invariant into a crash report. */
#ifndef ILAB_FUZZ_H
#define ILAB_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A property the code under test must keep. A failure aborts, so libFuzzer
 * saves the input as a crash and the message says which property broke. */
#define FUZZ_CHECK(cond, ...)                                                        \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: property failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* A NUL-terminated copy of the input (the parsers under test take C strings). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s) {
        for (size_t i = 0; i < size; i++)
            s[i] = (char)data[i];
        s[size] = '\0';
    }
    return s;
}

#endif

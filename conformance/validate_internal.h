/* The validation layer's shared state (validate_*.c only). */
#ifndef ILAB_CONFORMANCE_VALIDATE_INTERNAL_H
#define ILAB_CONFORMANCE_VALIDATE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "validate.h"

/* ---- shadow buffers (validate_buf.c) ------------------------------------ *
 * The plugin writes into a copy with guard bytes on both sides, every byte
 * set to VAL_PATTERN; what it wrote is found by comparing, and only what the
 * contract lets it write is copied back to the caller. 0xFF is no byte of
 * UTF-8, the id -1 and a NaN as a float: a plugin writing it by mistake
 * is caught by another check. */
#define VAL_GUARD 64
#define VAL_PATTERN 0xFF
#define VAL_SHADOW_MAX ((size_t)256 << 20) /* bigger buffers pass unshadowed */
typedef struct val_buf {
    unsigned char *mem; /* VAL_GUARD + size + VAL_GUARD */
    size_t size;
} val_buf;
/* false when `size` is over VAL_SHADOW_MAX or malloc failed: pass through */
bool val_buf_open(val_buf *b, size_t size);
void *val_buf_ptr(const val_buf *b);
bool val_buf_guards_ok(const val_buf *b);
/* first byte in [from, size) the plugin changed, or SIZE_MAX */
size_t val_buf_changed_from(const val_buf *b, size_t from);
void val_buf_close(val_buf *b);

/* ---- sequences and instances (validate_core.c) --------------------------- */
enum { VAL_SEQ_LIVE = 1, VAL_SEQ_STALE = 2 };
typedef struct val_seq {
    uint64_t handle; /* 0: empty slot */
    int32_t length;  /* -1: unknown (calls naming it overlapped) */
    uint16_t state;
    uint16_t inflight;
} val_seq;

#define VAL_MSG 512
typedef struct val_inst {
    const ilab_backend_t *be; /* NULL: free record */
    ilab_model_info_t info;   /* from create(); info_ok false when model_info() failed */
    bool info_ok;
    bool foreign;             /* the host engine calls it too */
    bool generated;           /* generate() ran: it may hold capacity of its own */
    int active;               /* layer calls in flight */
    uint64_t epoch;           /* calls begun */
    char last[VAL_MSG];       /* last_error() as last seen after this instance's own failure */
    bool last_ok;             /* `last` is known */
    ilab_model_info_t first_info; /* ABI-9: every model_info() answer equals the first */
    bool first_info_ok;
    int64_t first_free, total;    /* CCH-10: first figure with no sequence live; -1 unknown */
    int32_t block;
    val_seq *seqs;            /* open addressing over every handle ever issued (mmap'ed) */
    size_t seq_cap, seq_used;
    size_t live;
} val_inst;

typedef struct val_state {
    pthread_mutex_t mu;            /* instances and sequences */
    const ilab_backend_api_t *real;
    const ilab_manifest *m;
    val_inst inst[32];
} val_state;
extern val_state val_g;

/* A call on an instance, from enter to leave. */
typedef struct val_call {
    const char *name;   /* "tokenize" */
    val_inst *inst;     /* NULL when the handle is not one of ours */
    uint64_t epoch;
    bool started_alone;
} val_call;
void val_enter(val_call *c, const char *name, const ilab_backend_t *be);
/* Status in the enum (ERR-1); on non-OK, last_error() (ERR-1, ERR-4); no
 * message bled into another instance (ERR-4). */
void val_leave(val_call *c, ilab_status st);
/* Under val_g.mu: */
val_inst *val_inst_find(const ilab_backend_t *be);
val_seq *val_seq_find(val_inst *in, uint64_t h);  /* NULL when never issued */
val_seq *val_seq_add(val_inst *in, uint64_t h);   /* NULL when out of room */
void val_lock(void);
void val_unlock(void);

/* ---- violations (validate_core.c) ---------------------------------------- */
/* Records a broken rule: "<call> in <test>: <detail>". Never blocks on
 * val_g.mu, so it may run in event callbacks. */
void val_violation(const char *clause, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The clause was checked on a call (a verdict without one is SKIP). */
void val_checked(const char *clause);

/* ---- the wrappers --------------------------------------------------------- */
void val_fill_tokens(ilab_backend_api_t *t);   /* validate_tokens.c */
void val_fill_life(ilab_backend_api_t *t);     /* validate_life.c */
void val_fill_seq(ilab_backend_api_t *t);      /* validate_seq.c */
void val_fill_generate(ilab_backend_api_t *t); /* validate_gen.c */

/* Memory the layer maps itself (not through malloc) may lie where the
 * sanitizer's allocator once had memory it poisoned: its shadow is cleared
 * so that reads of it are never taken for wild accesses. A precaution: the
 * wild reads CI saw came from reading a thread key before it existed
 * (validate_buf.c). */
#if defined(__SANITIZE_ADDRESS__)
#define VAL_HAS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VAL_HAS_ASAN 1
#endif
#endif
#ifdef VAL_HAS_ASAN
#include <sanitizer/asan_interface.h>
#define VAL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define VAL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#endif

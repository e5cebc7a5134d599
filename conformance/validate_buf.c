/* Shadow buffers for the validation layer: the plugin writes into a copy
 * with guard bytes around it, so a write past the capacity, or any write on
 * a status that allows none, is seen whichever test made the call.
 *
 * Large shadows (logits rows) come from a few mmap'ed buffers kept per
 * thread and reused: a fresh allocation per eval() faulted in new pages on
 * every call, which made the layer's cost mostly system time and pushed a
 * heavy test past its deadline on a loaded machine. They are not on the
 * heap, so the exact heap counter of the leak tests does not see them. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>


#include "validate_internal.h"

#define POOL_MIN ((size_t)64 << 10) /* smaller shadows use malloc */
#define POOL_SLOTS 4

typedef struct pool_slot {
    unsigned char *mem;
    size_t cap;
    bool busy;
} pool_slot;

typedef struct pool {
    pool_slot slot[POOL_SLOTS];
} pool;

static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_free(void *p)
{
    pool *pl = p;
    for (int i = 0; i < POOL_SLOTS; i++)
        if (pl->slot[i].mem)
            munmap(pl->slot[i].mem, pl->slot[i].cap);
    munmap(pl, sizeof *pl);
}

static void pool_init(void)
{
    pthread_key_create(&pool_key, pool_free);
}

static pool *my_pool(void)
{
    pthread_once(&pool_once, pool_init);
    pool *pl = pthread_getspecific(pool_key);
    if (!pl) {
        void *m = mmap(NULL, sizeof *pl, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        VAL_UNPOISON(m, sizeof *pl);
        pl = m; /* mmap'ed pages are zero: every slot empty */
        pthread_setspecific(pool_key, pl);
    }
    return pl;
}

/* A free slot of at least n bytes, or NULL. */
static unsigned char *pool_take(size_t n)
{
    pool *pl = my_pool();
    if (!pl)
        return NULL;
    for (int i = 0; i < POOL_SLOTS; i++) {
        pool_slot *s = &pl->slot[i];
        if (s->busy)
            continue;
        if (s->cap < n) {
            if (s->mem)
                munmap(s->mem, s->cap);
            s->cap = 0;
            s->mem = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (s->mem == MAP_FAILED) {
                s->mem = NULL;
                return NULL;
            }
            VAL_UNPOISON(s->mem, n);
            s->cap = n;
        }
        s->busy = true;
        return s->mem;
    }
    return NULL;
}

static bool pool_give(unsigned char *m)
{
    /* The key exists only once a pool was made: before that, key 0 may be
     * another library's (the sanitizer runtime's), not an empty pool. */
    pthread_once(&pool_once, pool_init);
    pool *pl = pthread_getspecific(pool_key);
    for (int i = 0; pl && i < POOL_SLOTS; i++)
        if (pl->slot[i].mem == m && pl->slot[i].busy) {
            pl->slot[i].busy = false;
            return true;
        }
    return false;
}

bool val_buf_open(val_buf *b, size_t size)
{
    b->mem = NULL;
    b->size = size;
    if (size > VAL_SHADOW_MAX)
        return false;
    size_t n = size + 2 * VAL_GUARD;
    b->mem = n >= POOL_MIN ? pool_take(n) : NULL;
    if (!b->mem)
        b->mem = malloc(n);
    if (!b->mem)
        return false;
    memset(b->mem, VAL_PATTERN, n);
    return true;
}

void *val_buf_ptr(const val_buf *b)
{
    return b->mem + VAL_GUARD;
}

static bool all_pattern(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != VAL_PATTERN)
            return false;
    return true;
}

bool val_buf_guards_ok(const val_buf *b)
{
    return all_pattern(b->mem, VAL_GUARD) && all_pattern(b->mem + VAL_GUARD + b->size, VAL_GUARD);
}

size_t val_buf_changed_from(const val_buf *b, size_t from)
{
    const unsigned char *p = b->mem + VAL_GUARD;
    for (size_t i = from; i < b->size; i++)
        if (p[i] != VAL_PATTERN)
            return i;
    return SIZE_MAX;
}

void val_buf_close(val_buf *b)
{
    if (b->mem && !pool_give(b->mem))
        free(b->mem);
    b->mem = NULL;
}

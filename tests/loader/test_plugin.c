/* One small plugin, compiled once per variant with a -DVARIANT_<X> define
 * that breaks exactly one thing the loader must catch (see CMakeLists.txt).
 * Without a variant define it is a valid plugin. */
#include <inferlab/inferlab.h>

#include <signal.h>
#include <string.h>

#ifndef PLUGIN_NAME
#error "PLUGIN_NAME must be defined"
#endif

#if defined(VARIANT_ABI_MAJOR)
#define ENTRY_MAJOR 2
#define MANIFEST_ABI "2.0"
#else
#define ENTRY_MAJOR ILAB_ABI_MAJOR
#endif
#if defined(VARIANT_NEWER_MINOR)
#define ENTRY_MINOR 7
#define MANIFEST_ABI "1.7"
#elif defined(VARIANT_STATS_GOOD) || defined(VARIANT_STATS_SHORT)
#define ENTRY_MINOR 1 /* cache.stats is ABI 1.1's */
#define MANIFEST_ABI "1.1"
#else
#define ENTRY_MINOR 0 /* needs nothing past ABI 1.0 */
#endif
#ifndef MANIFEST_ABI
#define MANIFEST_ABI "1.0"
#endif
#if defined(VARIANT_STATS_GOOD) || defined(VARIANT_STATS_SHORT) || defined(VARIANT_STATS_OLD_ABI)
#define STATS "true"
#else
#define STATS "false"
#endif

#if defined(VARIANT_CAP_NULL)
#define FORK "true"
#else
#define FORK "false"
#endif

static const char manifest[] =
#if defined(VARIANT_NOT_YAML)
    "name: " PLUGIN_NAME "\nversion: [0.1.0\n  abi: {{\n";
#else
    "name: " PLUGIN_NAME "\n"
    "version: 0.1.0\n"
    "abi: " MANIFEST_ABI "\n"
#if !defined(VARIANT_MISSING_KEY)
    "description: A plugin for the loader tests.\n"
#endif
    "capabilities:\n"
    "  tokenizer: false\n"
    "  logits: full\n"
    "  topk_max: 0\n"
    "  sampling: host\n"
    "  cache: {fork: " FORK ", truncate: false, stats: " STATS "}\n"
    "  batching: {max_batch: 1}\n"
    "  streaming: false\n"
    "  cancel: false\n"
    "  max_context: 16\n"
    "  thread_safety: none\n"
    "config:\n"
    "  level:\n"
    "    type: int\n"
    "    default: 3\n"
    "    description: A number.\n";
#endif

#if defined(VARIANT_CTOR_SEGV)
/* Runs at dlopen, before the host has read a byte of the plugin. */
__attribute__((constructor)) static void crash_on_load(void)
{
    raise(SIGSEGV);
}
#endif

#if defined(VARIANT_UNRESOLVED)
/* Defined nowhere: linked with -z undefs, so only dlopen(RTLD_NOW) notices. */
extern int ilab_test_symbol_that_does_not_exist(void);
#endif

struct ilab_backend {
    int unused;
};

static ilab_status t_probe(const ilab_host_t *h, const ilab_config_entry_t *c, size_t n,
                           char *reason, size_t cap)
{
#if defined(VARIANT_UNRESOLVED)
    if (ilab_test_symbol_that_does_not_exist())
        return ILAB_INTERNAL;
#endif
    if (reason && cap)
        reason[0] = '\0';
    return ILAB_OK;
}

static ilab_status t_create(const ilab_host_t *h, const ilab_config_entry_t *c, size_t n,
                            char *error, size_t cap, ilab_backend_t **out)
{
    static ilab_backend_t one;
    *out = &one;
    return ILAB_OK;
}

static void t_destroy(ilab_backend_t *b) {}

static size_t t_last_error(const ilab_backend_t *b, char *buf, size_t cap)
{
    if (buf && cap)
        buf[0] = '\0';
    return 0;
}

static ilab_status t_model_info(ilab_backend_t *b, ilab_model_info_t *info)
{
    return ILAB_UNSUPPORTED;
}

static ilab_status t_tokenize(ilab_backend_t *b, const char *t, size_t l, uint32_t f, int32_t *o,
                              size_t c, size_t *n)
{
    return ILAB_UNSUPPORTED;
}
static ilab_status t_detokenize(ilab_backend_t *b, const int32_t *t, size_t n, char *o, size_t c,
                                size_t *l)
{
    return ILAB_UNSUPPORTED;
}
static ilab_status t_token_piece(ilab_backend_t *b, int32_t p, int32_t t, char *o, size_t c,
                                 size_t *l)
{
    return ILAB_UNSUPPORTED;
}
/* Sequence calls answer OK so tests can tell the plugin's member from a shim. */
static ilab_status t_seq_create(ilab_backend_t *b, ilab_seq_t *s)
{
    *s = 1;
    return ILAB_OK;
}
static ilab_status t_seq_free(ilab_backend_t *b, ilab_seq_t s) { return ILAB_OK; }
__attribute__((unused)) static ilab_status t_seq_fork(ilab_backend_t *b, ilab_seq_t p, ilab_seq_t *c) { return ILAB_UNSUPPORTED; }
static ilab_status t_seq_truncate(ilab_backend_t *b, ilab_seq_t s, int32_t n) { return ILAB_UNSUPPORTED; }
static ilab_status t_seq_length(ilab_backend_t *b, ilab_seq_t s, int32_t *l)
{
    *l = 0;
    return ILAB_OK;
}
static ilab_status t_eval(ilab_backend_t *b, const ilab_batch_item_t *const *i, size_t n)
{
    return ILAB_OK;
}
__attribute__((unused)) static ilab_status t_generate(ilab_backend_t *b, const ilab_generate_request_t *r,
                              ilab_event_fn fn, void *u)
{
    return ILAB_UNSUPPORTED;
}
__attribute__((unused)) static ilab_status t_cancel(ilab_backend_t *b, uint64_t id) { return ILAB_UNSUPPORTED; }
/* Answers OK with fixed numbers, so a test can tell it from the shim. */
__attribute__((unused)) static ilab_status t_cache_stats(ilab_backend_t *b, ilab_cache_stats_t *s)
{
    s->block_size = 4;
    s->total_positions = 64;
    s->free_positions = 60;
    return ILAB_OK;
}

static const ilab_backend_api_t api = {
#if defined(VARIANT_SHORT_TABLE)
    /* Built against an "older minor" that ended before generate/cancel. */
    .struct_size = offsetof(ilab_backend_api_t, generate),
#elif defined(VARIANT_ABI_1_0_TABLE) || defined(VARIANT_STATS_SHORT)
    /* Built against the ABI 1.0 header: the table ends before cache_stats. */
    .struct_size = offsetof(ilab_backend_api_t, cache_stats),
#else
    .struct_size = sizeof(ilab_backend_api_t),
#endif
    .probe = t_probe,
    .create = t_create,
    .destroy = t_destroy,
    .last_error = t_last_error,
    .model_info = t_model_info,
    .tokenize = t_tokenize,
    .detokenize = t_detokenize,
    .token_piece = t_token_piece,
    .seq_create = t_seq_create,
    .seq_free = t_seq_free,
#if defined(VARIANT_CAP_NULL)
    .seq_fork = NULL, /* the manifest declares cache.fork: true */
#else
    .seq_fork = t_seq_fork,
#endif
    .seq_truncate = t_seq_truncate,
    .seq_length = t_seq_length,
    .eval = t_eval,
#if defined(VARIANT_SHORT_TABLE)
    .generate = NULL, /* past struct_size: must never be read */
    .cancel = NULL,
#else
    .generate = t_generate,
    .cancel = t_cancel,
#endif
#if defined(VARIANT_SHORT_TABLE) || defined(VARIANT_ABI_1_0_TABLE) || defined(VARIANT_STATS_SHORT)
    .cache_stats = NULL, /* past struct_size: must never be read */
#else
    .cache_stats = t_cache_stats,
#endif
};

#if defined(VARIANT_NO_ENTRY)
/* The table exists but is not exported under the bootstrap name. */
ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry_v0 = {
#else
ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
#endif
    .struct_size = sizeof(ilab_plugin_entry_t),
    .abi_major = ENTRY_MAJOR,
    .abi_minor = ENTRY_MINOR,
    .name = PLUGIN_NAME,
    .version = "0.1.0",
    .manifest_yaml = manifest,
    .backend = &api,
};

/* Fuzz target: a plugin's manifest as the loader sees it.
 *
 * Input: 3 control bytes, then the manifest YAML. The control bytes shape the
 * bootstrap entry and backend table the manifest is cross-checked against:
 * byte 0 bits 0/1 give the entry a name/version other than the manifest's;
 * byte 1 = 0x10 | k sets member k to NULL; byte 2 = k < 16 ends the table
 * (struct_size) just before member k, as a plugin built for an older minor.
 *
 * Calls ilab_manifest_parse() and ilab_plugin_check_entry() — what
 * ilab_plugin_load() runs after dlsym — and asserts:
 *  - a parsed manifest keeps the schema (docs/manifest.md): names match
 *    [a-z0-9_]+, required strings non-empty, ints in range, enums valid, the
 *    cross-key rules, every config default valid for its type;
 *  - refusals come with a message;
 *  - the cross-check accepts exactly when this file's reading of the
 *    capability table in docs/manifest.md says it should;
 *  - every config default passes ilab_config_validate(), and
 *    ilab_config_with_defaults() gives one entry per key that has one. */
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "loader/manifest.h"
#include "loader/plugin_loader.h"

static ilab_status dummy_fn(void) { return ILAB_UNSUPPORTED; }

/* The members of ilab_backend_api_t in order (all function pointers). */
static const char *const member_names[] = {
    "probe", "create", "destroy", "last_error", "model_info", "tokenize", "detokenize",
    "token_piece", "seq_create", "seq_free", "seq_fork", "seq_truncate", "seq_length",
    "eval", "generate", "cancel", "cache_stats",
};
#define N_MEMBERS (sizeof member_names / sizeof member_names[0])

_Static_assert(offsetof(ilab_backend_api_t, cache_stats) ==
                   offsetof(ilab_backend_api_t, probe) + (N_MEMBERS - 1) * sizeof(void *),
               "member_names lists every member of ilab_backend_api_t");

static size_t member_offset(size_t i)
{
    return offsetof(ilab_backend_api_t, probe) + i * sizeof(void *);
}

static int member_index(const char *name)
{
    for (size_t i = 0; i < N_MEMBERS; i++)
        if (!strcmp(member_names[i], name))
            return (int)i;
    return -1;
}

static bool valid_name(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

static void check_schema(const ilab_manifest *m)
{
    FUZZ_CHECK(valid_name(m->name), "name '%s'", m->name ? m->name : "(null)");
    FUZZ_CHECK(m->version && m->version[0] >= '0' && m->version[0] <= '9', "version");
    FUZZ_CHECK(m->description && m->description[0], "description");
    FUZZ_CHECK(m->logits >= ILAB_LOGITS_NONE && m->logits <= ILAB_LOGITS_FULL, "logits %d",
               (int)m->logits);
    FUZZ_CHECK(m->sampling == ILAB_SAMPLING_HOST || m->sampling == ILAB_SAMPLING_BACKEND,
               "sampling %d", (int)m->sampling);
    FUZZ_CHECK(m->thread_safety >= ILAB_THREADS_NONE && m->thread_safety <= ILAB_THREADS_FULL,
               "thread_safety %d", (int)m->thread_safety);
    FUZZ_CHECK(m->topk_max >= 0, "topk_max %d", m->topk_max);
    FUZZ_CHECK(m->max_batch >= 1, "max_batch %d", m->max_batch);
    FUZZ_CHECK(m->max_context >= 0, "max_context %d", m->max_context);
    FUZZ_CHECK(m->sampling != ILAB_SAMPLING_HOST || m->logits == ILAB_LOGITS_FULL,
               "sampling host without logits full");
    FUZZ_CHECK(m->logits != ILAB_LOGITS_TOPK || m->topk_max >= 1, "topk without topk_max");
    FUZZ_CHECK(!m->tokenizer_text || (m->tokenizer && m->sampling == ILAB_SAMPLING_BACKEND),
               "tokenizer: text without sampling: backend");
    for (size_t i = 0; i < m->n_config; i++) {
        const ilab_config_key *k = &m->config[i];
        FUZZ_CHECK(valid_name(k->key), "config key '%s'", k->key ? k->key : "(null)");
        FUZZ_CHECK(k->description, "config key '%s' has no description", k->key);
        FUZZ_CHECK(k->type >= ILAB_CONFIG_STRING && k->type <= ILAB_CONFIG_BOOL, "type");
        FUZZ_CHECK(!k->default_value || ilab_config_value_valid(k->type, k->default_value, NULL, 0),
                   "config key '%s' default '%s' is not a %s", k->key, k->default_value,
                   ilab_config_type_name(k->type));
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(m->config[j].key, k->key), "config key '%s' twice", k->key);
        FUZZ_CHECK(ilab_manifest_config_key(m, k->key) == k, "lookup of '%s'", k->key);
    }
}

static void check_config(const ilab_manifest *m)
{
    ilab_config_entry_t user[64];
    size_t n_user = 0, n_defaults = 0;
    for (size_t i = 0; i < m->n_config && n_user < 64; i++)
        if (m->config[i].default_value) {
            user[n_user++] = (ilab_config_entry_t){m->config[i].key, m->config[i].default_value};
        }
    for (size_t i = 0; i < m->n_config; i++)
        n_defaults += m->config[i].default_value != NULL;
    char err[512];
    FUZZ_CHECK(ilab_config_validate(m, user, n_user, err, sizeof err) == ILAB_OK,
               "defaults refused: %s", err);
    ilab_config_entry_t bogus = {"no such key!", "1"};
    FUZZ_CHECK(ilab_config_validate(m, &bogus, 1, err, sizeof err) == ILAB_INVALID_ARGUMENT &&
                   err[0], "an undeclared key was accepted");
    ilab_config_entry_t *out = NULL;
    size_t n_out = 0;
    FUZZ_CHECK(ilab_config_with_defaults(m, NULL, 0, &out, &n_out) == ILAB_OK, "with_defaults");
    FUZZ_CHECK(n_out == n_defaults, "%zu entries for %zu defaults", n_out, n_defaults);
    ilab_config_entries_free(out, n_out);
}

/* docs/manifest.md, "What each capability requires". */
static bool table_satisfies(const ilab_manifest *m, const ilab_backend_api_t *t)
{
    const char *need[N_MEMBERS + 8];
    size_t n = 0;
    static const char *const always[] = {"probe", "create", "destroy", "last_error", "model_info"};
    for (size_t i = 0; i < 5; i++)
        need[n++] = always[i];
    if (m->tokenizer) {
        need[n++] = "tokenize";
        need[n++] = "detokenize";
        need[n++] = "token_piece";
    }
    if (m->logits == ILAB_LOGITS_FULL) {
        need[n++] = "seq_create";
        need[n++] = "seq_free";
        need[n++] = "seq_length";
        need[n++] = "eval";
    }
    if (m->cache_fork)
        need[n++] = "seq_fork";
    if (m->cache_truncate)
        need[n++] = "seq_truncate";
    if (m->sampling == ILAB_SAMPLING_BACKEND)
        need[n++] = "generate";
    if (m->cancel)
        need[n++] = "cancel";
    if (m->cache_stats)
        need[n++] = "cache_stats";
    for (size_t i = 0; i < n; i++)
        if (member_offset((size_t)member_index(need[i])) + sizeof(void *) > t->struct_size)
            return false;
    /* Every needed member is set; any other may be NULL, and the host shims
     * it (ADR 0022). */
    for (size_t i = 0; i < n; i++) {
        void *p;
        memcpy(&p, (const char *)t + member_offset((size_t)member_index(need[i])), sizeof p);
        if (!p)
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    uint8_t flags = data[0], null_member = data[1], cut = data[2];
    char *yaml = fuzz_strndup(data + 3, size - 3);
    if (!yaml)
        return 0;

    char err[1024];
    ilab_manifest *m = NULL;
    ilab_status st = ilab_manifest_parse(yaml, err, sizeof err, &m);
    FUZZ_CHECK(st == ILAB_OK || st == ILAB_INVALID_ARGUMENT, "status %s", ilab_status_name(st));
    FUZZ_CHECK(st == ILAB_OK || (err[0] && !m), "refusal without a message");
    if (m) {
        check_schema(m);
        check_config(m);
    }

    /* The table: every member set, then one NULL and/or a short struct_size. */
    ilab_backend_api_t table;
    memset(&table, 0, sizeof table);
    void (*fn)(void) = (void (*)(void))dummy_fn;
    for (size_t i = 0; i < N_MEMBERS; i++)
        memcpy((char *)&table + member_offset(i), &fn, sizeof fn);
    table.struct_size = sizeof table;
    if ((null_member & 0xf0) == 0x10 && (null_member & 0x0f) < N_MEMBERS)
        memset((char *)&table + member_offset(null_member & 0x0f), 0, sizeof(void *));
    if (cut < N_MEMBERS)
        table.struct_size = (uint32_t)member_offset(cut);

    ilab_plugin_entry_t entry = {
        .struct_size = sizeof entry,
        .abi_major = ILAB_ABI_MAJOR,
        /* The manifest's minor (a plugin needing 1.0 or 1.1), or the host's. */
        .abi_minor = (m && !(flags & 4)) ? m->abi_minor : ILAB_ABI_MINOR,
        .name = (m && !(flags & 1)) ? m->name : "some_other_plugin",
        .version = (m && !(flags & 2)) ? m->version : "9.9.9-other",
        .manifest_yaml = yaml,
        .backend = &table,
    };
    ilab_manifest *checked = NULL;
    st = ilab_plugin_check_entry("fuzz.so", &entry, err, sizeof err, &checked);
    bool expect = m && !strcmp(entry.name, m->name) && !strcmp(entry.version, m->version) &&
                  m->abi_major == ILAB_ABI_MAJOR && m->abi_minor == entry.abi_minor &&
                  entry.abi_minor <= ILAB_ABI_MINOR &&
                  table_satisfies(m, &table);
    FUZZ_CHECK((st == ILAB_OK) == expect, "cross-check %s (%s), reference says %s",
               ilab_status_name(st), err, expect ? "accept" : "refuse");
    FUZZ_CHECK(st == ILAB_OK || (err[0] && strstr(err, "fuzz.so") && !checked),
               "refusal does not name the file: '%s'", err);
    if (checked) {
        FUZZ_CHECK(!strcmp(checked->name, m->name) && checked->n_config == m->n_config,
                   "the second parse differs");
    }
    ilab_manifest_free(checked);
    ilab_manifest_free(m);
    free(yaml);
    return 0;
}

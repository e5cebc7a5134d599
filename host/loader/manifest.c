/* The capability manifest: libyaml document -> ilab_manifest, validated
 * against schema 1 (docs/manifest.md). Every error names the key path and the
 * line, because the reader is a plugin author staring at a YAML string. */
#include "manifest.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* Parsing state: the document and where to put the first error. */
typedef struct parse_ctx {
    yaml_document_t *doc;
    char *err;
    size_t err_cap;
} parse_ctx;

static bool fail(parse_ctx *c, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool fail(parse_ctx *c, const yaml_node_t *node, const char *fmt, ...)
{
    size_t used = 0;
    if (node && c->err_cap > 0) {
        int n = snprintf(c->err, c->err_cap, "line %zu: ", (size_t)node->start_mark.line + 1);
        used = n > 0 && (size_t)n < c->err_cap ? (size_t)n : 0;
    }
    if (c->err_cap > used) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + used, c->err_cap - used, fmt, ap);
        va_end(ap);
    }
    return false;
}

static const char *node_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE: return "a scalar";
    case YAML_SEQUENCE_NODE: return "a list";
    case YAML_MAPPING_NODE: return "a mapping";
    default: return "empty";
    }
}

static const char *scalar(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static bool want_scalar(parse_ctx *c, const yaml_node_t *n, const char *key)
{
    if (n->type != YAML_SCALAR_NODE)
        return fail(c, n, "key '%s' must be a scalar, got %s", key, node_kind(n));
    return true;
}

static bool want_mapping(parse_ctx *c, const yaml_node_t *n, const char *key)
{
    if (n->type != YAML_MAPPING_NODE)
        return fail(c, n, "key '%s' must be a mapping, got %s", key, node_kind(n));
    return true;
}

static bool parse_bool_text(const char *s, bool *out)
{
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
        *out = true;
        return true;
    }
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
        *out = false;
        return true;
    }
    return false;
}

static bool parse_int_text(const char *s, long long *out)
{
    if (!*s || isspace((unsigned char)*s))
        return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

static bool get_bool(parse_ctx *c, const yaml_node_t *n, const char *key, bool *out)
{
    if (!want_scalar(c, n, key))
        return false;
    if (!parse_bool_text(scalar(n), out))
        return fail(c, n, "key '%s' must be a bool (true or false), got '%s'", key, scalar(n));
    return true;
}

static bool get_int(parse_ctx *c, const yaml_node_t *n, const char *key, int min, int *out)
{
    long long v;
    if (!want_scalar(c, n, key))
        return false;
    if (!parse_int_text(scalar(n), &v))
        return fail(c, n, "key '%s' must be an int, got '%s'", key, scalar(n));
    if (v < min || v > INT_MAX)
        return fail(c, n, "key '%s' must be an int >= %d, got %lld", key, min, v);
    *out = (int)v;
    return true;
}

/* One of `choices` (NULL-terminated); *out = its index. */
static bool get_enum(parse_ctx *c, const yaml_node_t *n, const char *key,
                     const char *const *choices, int *out)
{
    if (!want_scalar(c, n, key))
        return false;
    for (int i = 0; choices[i]; i++)
        if (!strcmp(scalar(n), choices[i])) {
            *out = i;
            return true;
        }
    char list[128] = "";
    for (int i = 0; choices[i]; i++) {
        strncat(list, i ? " | " : "", sizeof list - strlen(list) - 1);
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
    }
    return fail(c, n, "key '%s' must be one of %s, got '%s'", key, list, scalar(n));
}

static bool get_string(parse_ctx *c, const yaml_node_t *n, const char *key, bool non_empty,
                       char **out)
{
    if (!want_scalar(c, n, key))
        return false;
    if (non_empty && !*scalar(n))
        return fail(c, n, "key '%s' must not be empty", key);
    free(*out);
    *out = strdup(scalar(n));
    if (!*out)
        return fail(c, n, "out of memory");
    return true;
}

static bool valid_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_'))
            return false;
    return true;
}

/* A numeric identifier: digits, no leading zero unless it is "0". */
static const char *semver_number(const char *s)
{
    if (!isdigit((unsigned char)*s))
        return NULL;
    if (*s == '0' && isdigit((unsigned char)s[1]))
        return NULL;
    while (isdigit((unsigned char)*s))
        s++;
    return s;
}

/* Dot-separated [0-9A-Za-z-]+ identifiers, as in semver pre-release/build. */
static const char *semver_idents(const char *s)
{
    for (;;) {
        const char *start = s;
        while (isalnum((unsigned char)*s) || *s == '-')
            s++;
        if (s == start)
            return NULL;
        if (*s != '.')
            return s;
        s++;
    }
}

static bool valid_semver(const char *s)
{
    for (int i = 0; i < 3; i++) {
        if (!(s = semver_number(s)))
            return false;
        if (i < 2 && *s++ != '.')
            return false;
    }
    if (*s == '-' && !(s = semver_idents(s + 1)))
        return false;
    if (*s == '+' && !(s = semver_idents(s + 1)))
        return false;
    return *s == '\0';
}

bool ilab_config_value_valid(ilab_config_type type, const char *value, char *err, size_t err_cap)
{
    const char *why = NULL;
    if (!value) {
        why = "no value";
    } else if (type == ILAB_CONFIG_INT) {
        long long v;
        if (!parse_int_text(value, &v))
            why = "not an int";
    } else if (type == ILAB_CONFIG_FLOAT) {
        char *end = NULL;
        errno = 0;
        double d = strtod(value, &end);
        if (!*value || isspace((unsigned char)*value) || *end || errno || !isfinite(d))
            why = "not a finite float";
    } else if (type == ILAB_CONFIG_BOOL) {
        bool b;
        if (!parse_bool_text(value, &b))
            why = "not a bool (true or false)";
    }
    if (why && err && err_cap)
        snprintf(err, err_cap, "'%s' is %s", value ? value : "(null)", why);
    return why == NULL;
}

/* Walks a mapping node: calls `each` for every key, rejecting duplicates and
 * non-scalar keys. `path` prefixes key names in messages ("capabilities."). */
typedef bool (*pair_fn)(parse_ctx *c, const char *path, const char *key,
                        yaml_node_t *value, void *out);

static bool each_pair(parse_ctx *c, yaml_node_t *map, const char *path, pair_fn each, void *out)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        if (!k || k->type != YAML_SCALAR_NODE)
            return fail(c, k, "a key under '%s' is not a scalar", *path ? path : "(top level)");
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *prev = yaml_document_get_node(c->doc, q->key);
            if (prev && prev->type == YAML_SCALAR_NODE && !strcmp(scalar(prev), scalar(k)))
                return fail(c, k, "duplicate key '%s%s'", path, scalar(k));
        }
        if (!each(c, path, scalar(k), v, out))
            return false;
    }
    return true;
}

/* Required keys: bit i set when key i was seen. */
static bool check_required(parse_ctx *c, const yaml_node_t *map, const char *path,
                           const char *const *keys, unsigned seen)
{
    for (int i = 0; keys[i]; i++)
        if (!(seen & (1u << i)))
            return fail(c, map, "missing required key '%s%s'", path, keys[i]);
    return true;
}

static int key_index(const char *const *keys, const char *key)
{
    for (int i = 0; keys[i]; i++)
        if (!strcmp(keys[i], key))
            return i;
    return -1;
}

/* --- capabilities --------------------------------------------------------- */

static const char *const cap_keys[] = {"tokenizer", "logits", "topk_max", "sampling", "cache",
                                       "batching", "streaming", "cancel", "max_context",
                                       "thread_safety", "chat", NULL};
/* chat came with ABI 1.2: manifests written for 1.0 and 1.1 do not have it. */
static const char *const cap_required[] = {"tokenizer", "logits", "topk_max", "sampling", "cache",
                                           "batching", "streaming", "cancel", "max_context",
                                           "thread_safety", NULL};
static const char *const cache_keys[] = {"fork", "truncate", "stats", NULL};
/* cache.stats came with ABI 1.1: manifests written for 1.0 do not have it. */
static const char *const cache_required[] = {"fork", "truncate", NULL};
static const char *const batching_keys[] = {"max_batch", NULL};
static const char *const logits_names[] = {"none", "topk", "full", NULL};
static const char *const sampling_names[] = {"host", "backend", NULL};
static const char *const threads_names[] = {"none", "sequence", "full", NULL};

typedef struct seen_manifest {
    ilab_manifest *m;
    unsigned seen;
} seen_manifest;

static bool unknown_key(parse_ctx *c, const yaml_node_t *v, const char *path, const char *key)
{
    return fail(c, v, "unknown key '%s%s'", path, key);
}

static bool cache_pair(parse_ctx *c, const char *path, const char *key, yaml_node_t *v, void *out)
{
    seen_manifest *s = out;
    int i = key_index(cache_keys, key);
    if (i < 0)
        return unknown_key(c, v, path, key);
    s->seen |= 1u << i;
    static const char *const names[] = {"capabilities.cache.fork", "capabilities.cache.truncate",
                                        "capabilities.cache.stats"};
    bool *fields[] = {&s->m->cache_fork, &s->m->cache_truncate, &s->m->cache_stats};
    return get_bool(c, v, names[i], fields[i]);
}

static bool batching_pair(parse_ctx *c, const char *path, const char *key, yaml_node_t *v,
                          void *out)
{
    seen_manifest *s = out;
    if (key_index(batching_keys, key) < 0)
        return unknown_key(c, v, path, key);
    s->seen |= 1u;
    return get_int(c, v, "capabilities.batching.max_batch", 1, &s->m->max_batch);
}

/* `keys`: the required keys (each_pair's callback knows the optional ones). */
static bool sub_mapping(parse_ctx *c, yaml_node_t *v, const char *path, const char *const *keys,
                        pair_fn each, ilab_manifest *m)
{
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)strlen(path) - 1, path); /* without the dot */
    if (!want_mapping(c, v, key))
        return false;
    seen_manifest s = {m, 0};
    return each_pair(c, v, path, each, &s) && check_required(c, v, path, keys, s.seen);
}

/* `tokenizer: true | false | text`: "text" (schema 1, later addition) is a
 * tokenizer whose text is whole code points only (docs/contract.md TOK-10).
 * A host that predates it refuses the value, which is what it should do: it
 * would take the pieces for bytes. */
static bool get_tokenizer(parse_ctx *c, const yaml_node_t *v, const char *key, ilab_manifest *m)
{
    if (!want_scalar(c, v, key))
        return false;
    m->tokenizer_text = !strcmp(scalar(v), "text");
    if (m->tokenizer_text)
        m->tokenizer = true;
    else if (!parse_bool_text(scalar(v), &m->tokenizer))
        return fail(c, v, "key '%s' must be true, false or text, got '%s'", key, scalar(v));
    return true;
}

static bool cap_pair(parse_ctx *c, const char *path, const char *key, yaml_node_t *v, void *out)
{
    seen_manifest *s = out;
    ilab_manifest *m = s->m;
    int i = key_index(cap_keys, key), e = 0;
    if (i < 0)
        return unknown_key(c, v, path, key);
    s->seen |= 1u << i;
    char full[64];
    snprintf(full, sizeof full, "%s%s", path, key);
    bool ok = true;
    switch (i) {
    case 0: ok = get_tokenizer(c, v, full, m); break;
    case 1: ok = get_enum(c, v, full, logits_names, &e); m->logits = (ilab_logits_kind)e; break;
    case 2: ok = get_int(c, v, full, 0, &m->topk_max); break;
    case 3: ok = get_enum(c, v, full, sampling_names, &e); m->sampling = (ilab_sampling_owner)e; break;
    case 4: ok = sub_mapping(c, v, "capabilities.cache.", cache_required, cache_pair, m); break;
    case 5: ok = sub_mapping(c, v, "capabilities.batching.", batching_keys, batching_pair, m); break;
    case 6: ok = get_bool(c, v, full, &m->streaming); break;
    case 7: ok = get_bool(c, v, full, &m->cancel); break;
    case 8: ok = get_int(c, v, full, 0, &m->max_context); break;
    case 9: ok = get_enum(c, v, full, threads_names, &e); m->thread_safety = (ilab_thread_safety)e; break;
    case 10: ok = get_bool(c, v, full, &m->chat); break;
    }
    return ok;
}

/* --- config --------------------------------------------------------------- */

static const char *const config_entry_keys[] = {"type", "description", "default", NULL};
static const char *const config_type_names[] = {"string", "int", "float", "bool", NULL};

typedef struct config_key_ctx {
    ilab_config_key *k;
    unsigned seen;
    yaml_node_t *default_node;
} config_key_ctx;

static bool config_entry_pair(parse_ctx *c, const char *path, const char *key, yaml_node_t *v,
                              void *out)
{
    config_key_ctx *ck = out;
    int i = key_index(config_entry_keys, key), e = 0;
    if (i < 0)
        return unknown_key(c, v, path, key);
    ck->seen |= 1u << i;
    char full[160];
    snprintf(full, sizeof full, "%s%s", path, key);
    switch (i) {
    case 0:
        if (!get_enum(c, v, full, config_type_names, &e))
            return false;
        ck->k->type = (ilab_config_type)e;
        return true;
    case 1: return get_string(c, v, full, false, &ck->k->description);
    default:
        ck->default_node = v;
        return get_string(c, v, full, false, &ck->k->default_value);
    }
}

static bool config_pair(parse_ctx *c, const char *path, const char *key, yaml_node_t *v, void *out)
{
    ilab_manifest *m = out;
    char full[128];
    snprintf(full, sizeof full, "%s%s", path, key);
    if (!valid_name(key))
        return fail(c, v, "config key '%s' must match [a-z0-9_]+", key);
    if (!want_mapping(c, v, full))
        return false;
    ilab_config_key *grown = realloc(m->config, (m->n_config + 1) * sizeof *grown);
    if (!grown)
        return fail(c, v, "out of memory");
    m->config = grown;
    ilab_config_key *k = &m->config[m->n_config++];
    memset(k, 0, sizeof *k);
    if (!(k->key = strdup(key)))
        return fail(c, v, "out of memory");
    char sub[160];
    snprintf(sub, sizeof sub, "%s.", full);
    config_key_ctx ck = {k, 0, NULL};
    static const char *const required[] = {"type", "description", NULL};
    if (!each_pair(c, v, sub, config_entry_pair, &ck) || !check_required(c, v, sub, required, ck.seen))
        return false;
    char why[160];
    if (k->default_value && !ilab_config_value_valid(k->type, k->default_value, why, sizeof why))
        return fail(c, ck.default_node, "key '%sdefault': %s, but the key's type is %s", sub, why,
                    ilab_config_type_name(k->type));
    return true;
}

/* --- top level ------------------------------------------------------------ */

static const char *const top_keys[] = {"name", "version", "abi", "description", "capabilities",
                                       "config", NULL};

static bool parse_abi(parse_ctx *c, const yaml_node_t *v, ilab_manifest *m)
{
    if (!want_scalar(c, v, "abi"))
        return false;
    const char *s = scalar(v);
    unsigned major, minor;
    int used = 0;
    if (sscanf(s, "%u.%u%n", &major, &minor, &used) != 2 || s[used] != '\0' ||
        !isdigit((unsigned char)s[0]))
        return fail(c, v, "key 'abi' must be \"MAJOR.MINOR\" (e.g. 1.0), got '%s'", s);
    m->abi_major = major;
    m->abi_minor = minor;
    return true;
}

static bool top_pair(parse_ctx *c, const char *path, const char *key, yaml_node_t *v, void *out)
{
    seen_manifest *s = out;
    ilab_manifest *m = s->m;
    int i = key_index(top_keys, key);
    if (i < 0)
        return unknown_key(c, v, path, key);
    s->seen |= 1u << i;
    switch (i) {
    case 0:
        if (!get_string(c, v, "name", true, &m->name))
            return false;
        if (!valid_name(m->name))
            return fail(c, v, "key 'name' must match [a-z0-9_]+, got '%s'", m->name);
        return true;
    case 1:
        if (!get_string(c, v, "version", true, &m->version))
            return false;
        if (!valid_semver(m->version))
            return fail(c, v, "key 'version' must be semver MAJOR.MINOR.PATCH[-pre][+build], got '%s'",
                        m->version);
        return true;
    case 2: return parse_abi(c, v, m);
    case 3: return get_string(c, v, "description", true, &m->description);
    case 4: {
        if (!want_mapping(c, v, "capabilities"))
            return false;
        seen_manifest cs = {m, 0};
        return each_pair(c, v, "capabilities.", cap_pair, &cs) &&
               check_required(c, v, "capabilities.", cap_required, cs.seen);
    }
    default:
        if (v->type == YAML_SCALAR_NODE && !*scalar(v))
            return true; /* "config:" with nothing under it */
        if (!want_mapping(c, v, "config"))
            return false;
        return each_pair(c, v, "config.", config_pair, m);
    }
}

/* Rules that span keys (docs/manifest.md). */
static bool check_consistency(parse_ctx *c, const yaml_node_t *root, const ilab_manifest *m)
{
    if (m->sampling == ILAB_SAMPLING_HOST && m->logits != ILAB_LOGITS_FULL)
        return fail(c, root, "capabilities: 'sampling: host' requires 'logits: full' (the host samples "
                             "from eval() logits), got 'logits: %s'", ilab_logits_kind_name(m->logits));
    if (m->logits == ILAB_LOGITS_TOPK && m->topk_max < 1)
        return fail(c, root, "capabilities: 'logits: topk' requires 'topk_max' >= 1");
    /* A 1.0 host cannot call cache_stats(): the plugin must say it needs 1.1. */
    if (m->cache_stats && m->abi_major == 1 && m->abi_minor < 1)
        return fail(c, root, "capabilities: 'cache.stats' is an ABI 1.1 capability (cache_stats()), "
                             "but 'abi' is %u.%u: declare abi 1.1", m->abi_major, m->abi_minor);
    /* A 1.1 host has no eog_ids()/chat_template() and would take the
     * PARSE_SPECIAL bit for an unknown one. */
    if (m->chat && m->abi_major == 1 && m->abi_minor < 2)
        return fail(c, root, "capabilities: 'chat' is an ABI 1.2 capability (eog_ids(), "
                             "chat_template()), but 'abi' is %u.%u: declare abi 1.2",
                    m->abi_major, m->abi_minor);
    if (m->chat && !m->tokenizer)
        return fail(c, root, "capabilities: 'chat' requires a tokenizer (it reports token ids and "
                             "parses special tokens in tokenize())");
    /* The host's own sampling turns tokens into text with token_piece(),
     * which a text tokenizer cannot give byte for byte. */
    if (m->tokenizer_text && m->sampling == ILAB_SAMPLING_HOST)
        return fail(c, root, "capabilities: 'tokenizer: text' requires 'sampling: backend' (with "
                             "'sampling: host' the host builds the output text from token_piece(), "
                             "whose text pieces are not byte-exact)");
    if (m->cache_stats && m->logits != ILAB_LOGITS_FULL)
        return fail(c, root, "capabilities: 'cache.stats' requires 'logits: full' (it reports the "
                             "cache of the sequences eval() fills), got 'logits: %s'",
                    ilab_logits_kind_name(m->logits));
    return true;
}

ilab_status ilab_manifest_parse(const char *yaml, char *err, size_t err_cap, ilab_manifest **out)
{
    if (err && err_cap)
        err[0] = '\0';
    if (!yaml || !out) {
        if (err && err_cap)
            snprintf(err, err_cap, "no manifest text");
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_manifest *m = calloc(1, sizeof *m);
    if (!m)
        return ILAB_OUT_OF_MEMORY;

    yaml_parser_t parser;
    yaml_document_t doc;
    char dummy[1];
    parse_ctx c = {&doc, err ? err : dummy, err ? err_cap : sizeof dummy};
    bool ok = false, have_doc = false;

    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, strlen(yaml));
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(c.err, c.err_cap, "line %zu: not valid YAML: %s%s%s",
                 (size_t)parser.problem_mark.line + 1, parser.problem ? parser.problem : "parse error",
                 parser.context ? " " : "", parser.context ? parser.context : "");
        goto done;
    }
    have_doc = true;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        fail(&c, NULL, "the manifest is empty");
        goto done;
    }
    if (root->type != YAML_MAPPING_NODE) {
        fail(&c, root, "the manifest must be a mapping of keys (name, version, ...), got %s",
             node_kind(root));
        goto done;
    }
    seen_manifest s = {m, 0};
    static const char *const required[] = {"name", "version", "abi", "description", "capabilities", NULL};
    ok = each_pair(&c, root, "", top_pair, &s) && check_required(&c, root, "", required, s.seen) &&
         check_consistency(&c, root, m);
done:
    if (have_doc)
        yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (!ok) {
        ilab_manifest_free(m);
        return ILAB_INVALID_ARGUMENT;
    }
    *out = m;
    return ILAB_OK;
}

void ilab_manifest_free(ilab_manifest *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_config; i++) {
        free(m->config[i].key);
        free(m->config[i].default_value);
        free(m->config[i].description);
    }
    free(m->config);
    free(m->name);
    free(m->version);
    free(m->description);
    free(m);
}

const ilab_config_key *ilab_manifest_config_key(const ilab_manifest *m, const char *key)
{
    for (size_t i = 0; m && key && i < m->n_config; i++)
        if (!strcmp(m->config[i].key, key))
            return &m->config[i];
    return NULL;
}

const char *ilab_logits_kind_name(ilab_logits_kind k)
{
    return k == ILAB_LOGITS_FULL ? "full" : k == ILAB_LOGITS_TOPK ? "topk" : "none";
}

const char *ilab_thread_safety_name(ilab_thread_safety t)
{
    return t == ILAB_THREADS_FULL ? "full" : t == ILAB_THREADS_SEQUENCE ? "sequence" : "none";
}

const char *ilab_config_type_name(ilab_config_type t)
{
    return t >= ILAB_CONFIG_STRING && t <= ILAB_CONFIG_BOOL ? config_type_names[t] : "unknown";
}

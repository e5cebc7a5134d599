/* Catalog entries as JSON (catalog_json.h). */
#include "catalog_json.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "sha256.h"

static json_t *capabilities_json(const ilab_manifest *m)
{
    return json_pack("{s:b, s:b, s:s, s:i, s:s, s:{s:b, s:b, s:b}, s:{s:i}, s:b, s:b, s:i, s:s, s:b}",
                     "tokenizer", m->tokenizer, "tokenizer_text", m->tokenizer_text, "logits", ilab_logits_kind_name(m->logits),
                     "topk_max", m->topk_max, "sampling",
                     m->sampling == ILAB_SAMPLING_BACKEND ? "backend" : "host", "cache", "fork",
                     m->cache_fork, "truncate", m->cache_truncate, "stats", m->cache_stats,
                     "batching", "max_batch",
                     m->max_batch, "streaming", m->streaming, "cancel", m->cancel, "max_context",
                     m->max_context, "thread_safety", ilab_thread_safety_name(m->thread_safety), "chat", m->chat);
}

static json_t *config_json(const ilab_manifest *m)
{
    json_t *keys = json_array();
    for (size_t i = 0; i < m->n_config; i++) {
        const ilab_config_key *k = &m->config[i];
        json_array_append_new(keys, json_pack("{s:s, s:s, s:o, s:s}", "key", k->key, "type",
                                              ilab_config_type_name(k->type), "default",
                                              k->default_value ? json_string(k->default_value)
                                                               : json_null(),
                                              "description", k->description ? k->description : ""));
    }
    return keys;
}

json_t *ilab_catalog_row_json(const ilab_catalog *c, const ilab_catalog_entry *e)
{
    json_t *row = json_pack("{s:s, s:s, s:s}", "path", e->path, "state",
                            ilab_plugin_state_name(e->state), "reason", e->reason);
    if (e->state == ILAB_PLUGIN_SHADOWED)
        json_object_set_new(row, "shadowed_by",
                            json_string(ilab_catalog_at(c, e->winner)->path));
    const ilab_manifest *m = e->manifest;
    if (!m)
        return row;
    char abi[32];
    snprintf(abi, sizeof abi, "%u.%u", m->abi_major, m->abi_minor);
    json_object_set_new(row, "name", json_string(m->name));
    json_object_set_new(row, "version", json_string(m->version));
    json_object_set_new(row, "abi", json_string(abi));
    json_object_set_new(row, "capabilities", capabilities_json(m));
    json_object_set_new(row, "description", json_string(m->description));
    json_object_set_new(row, "config", config_json(m));
    json_object_set_new(row, "manifest", json_string(e->manifest_yaml));
    return row;
}

/* The file's SHA-256, as inferlab-conformance's reports name it. */
static json_t *file_sha256(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return json_null();
    ilab_sha256 s;
    ilab_sha256_init(&s);
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        ilab_sha256_update(&s, buf, n);
    bool ok = !ferror(f);
    fclose(f);
    if (!ok)
        return json_null();
    char hex[65];
    ilab_sha256_final_hex(&s, hex);
    return json_string(hex);
}

char *ilab_catalog_status_json(const ilab_catalog *c)
{
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < ilab_catalog_size(c); i++) {
        const ilab_catalog_entry *e = ilab_catalog_at(c, i);
        json_t *row = ilab_catalog_row_json(c, e);
        if (row)
            json_object_set_new(row, "sha256", file_sha256(e->path));
        json_array_append_new(rows, row);
    }
    char *text = rows ? json_dumps(rows, JSON_COMPACT) : NULL;
    json_decref(rows);
    return text;
}

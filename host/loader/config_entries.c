/* Plugin configuration: user key/value pairs checked against the manifest's
 * `config` section, then merged with its defaults for probe()/create(). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin_loader.h"

/* "a, b, c" of the declared keys, for messages that say what would work. */
static void declared_keys(const ilab_manifest *m, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (size_t i = 0; i < m->n_config; i++) {
        strncat(buf, i ? ", " : "", cap - strlen(buf) - 1);
        strncat(buf, m->config[i].key, cap - strlen(buf) - 1);
    }
    if (!m->n_config)
        snprintf(buf, cap, "none");
}

ilab_status ilab_config_validate(const ilab_manifest *m, const ilab_config_entry_t *user,
                                 size_t n_user, char *err, size_t err_cap)
{
    if (!m || (n_user && !user)) {
        if (err && err_cap)
            snprintf(err, err_cap, "config: no manifest or entries");
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < n_user; i++) {
        const char *key = user[i].key ? user[i].key : "(null)";
        const ilab_config_key *k = ilab_manifest_config_key(m, user[i].key);
        if (!k) {
            char keys[256];
            declared_keys(m, keys, sizeof keys);
            if (err && err_cap)
                snprintf(err, err_cap, "plugin '%s': unknown config key '%s' (declared keys: %s)",
                         m->name, key, keys);
            return ILAB_INVALID_ARGUMENT;
        }
        char why[256];
        if (!ilab_config_value_valid(k->type, user[i].value, why, sizeof why)) {
            if (err && err_cap)
                snprintf(err, err_cap, "plugin '%s': config key '%s' must be of type %s: %s",
                         m->name, key, ilab_config_type_name(k->type), why);
            return ILAB_INVALID_ARGUMENT;
        }
    }
    return ILAB_OK;
}

ilab_status ilab_config_with_defaults(const ilab_manifest *m, const ilab_config_entry_t *user,
                                      size_t n_user, ilab_config_entry_t **out, size_t *n_out)
{
    if (!m || !out || !n_out || (n_user && !user))
        return ILAB_INVALID_ARGUMENT;
    /* Manifest order, one entry per key: the user's last value, else the
     * default; a key with neither is left out. */
    ilab_config_entry_t *entries = calloc(m->n_config ? m->n_config : 1, sizeof *entries);
    if (!entries)
        return ILAB_OUT_OF_MEMORY;
    size_t n = 0;
    for (size_t i = 0; i < m->n_config; i++) {
        const char *value = m->config[i].default_value;
        for (size_t u = 0; u < n_user; u++)
            if (user[u].key && !strcmp(user[u].key, m->config[i].key))
                value = user[u].value;
        if (!value)
            continue;
        entries[n].key = strdup(m->config[i].key);
        entries[n].value = strdup(value);
        n++;
        if (!entries[n - 1].key || !entries[n - 1].value) {
            ilab_config_entries_free(entries, n);
            return ILAB_OUT_OF_MEMORY;
        }
    }
    *out = entries;
    *n_out = n;
    return ILAB_OK;
}

void ilab_config_entries_free(ilab_config_entry_t *entries, size_t n)
{
    if (!entries)
        return;
    for (size_t i = 0; i < n; i++) {
        free((char *)entries[i].key);
        free((char *)entries[i].value);
    }
    free(entries);
}

/* The capability manifest, parsed (schema: docs/manifest.md). */
#ifndef ILAB_HOST_MANIFEST_H
#define ILAB_HOST_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>

#include "inferlab/inferlab.h"

typedef enum ilab_logits_kind { ILAB_LOGITS_NONE, ILAB_LOGITS_TOPK, ILAB_LOGITS_FULL } ilab_logits_kind;
typedef enum ilab_sampling_owner { ILAB_SAMPLING_HOST, ILAB_SAMPLING_BACKEND } ilab_sampling_owner;
typedef enum ilab_thread_safety { ILAB_THREADS_NONE, ILAB_THREADS_SEQUENCE, ILAB_THREADS_FULL } ilab_thread_safety;
typedef enum ilab_config_type { ILAB_CONFIG_STRING, ILAB_CONFIG_INT, ILAB_CONFIG_FLOAT, ILAB_CONFIG_BOOL } ilab_config_type;

typedef struct ilab_config_key {
    char *key;
    ilab_config_type type;
    char *default_value; /* NULL when the manifest gives none */
    char *description;
} ilab_config_key;

typedef struct ilab_manifest {
    char *name;
    char *version;
    unsigned abi_major, abi_minor;
    char *description;

    bool tokenizer;      /* tokenize/detokenize/token_piece work ("true" or "text") */
    bool tokenizer_text; /* "tokenizer: text": pieces are text, not bytes (contract TOK-10) */
    ilab_logits_kind logits;
    int topk_max;
    ilab_sampling_owner sampling;
    bool cache_fork;
    bool cache_truncate;
    bool cache_stats; /* optional key (ABI 1.1); false when absent */
    bool chat;        /* optional key (ABI 1.2): eog_ids(), chat_template(), PARSE_SPECIAL */
    int max_batch;
    bool streaming;
    bool cancel;
    int max_context;
    ilab_thread_safety thread_safety;

    ilab_config_key *config; /* owned */
    size_t n_config;
} ilab_manifest;

/* Parse and validate `yaml` against the schema. On failure returns
 * ILAB_INVALID_ARGUMENT and writes a message naming the key (and line) into
 * `err`. The result is owned by the caller: ilab_manifest_free(). */
ilab_status ilab_manifest_parse(const char *yaml, char *err, size_t err_cap,
                                ilab_manifest **out);
void ilab_manifest_free(ilab_manifest *m);

/* Config key lookup; NULL when the manifest does not declare it. */
const ilab_config_key *ilab_manifest_config_key(const ilab_manifest *m, const char *key);

/* Check that `value` parses as `type`; on failure writes why into err. */
bool ilab_config_value_valid(ilab_config_type type, const char *value,
                             char *err, size_t err_cap);

const char *ilab_logits_kind_name(ilab_logits_kind k);
const char *ilab_thread_safety_name(ilab_thread_safety t);
const char *ilab_config_type_name(ilab_config_type t);

#endif

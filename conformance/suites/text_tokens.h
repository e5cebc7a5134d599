/* Text tokenizers (`tokenizer: text`, docs/contract.md TOK-10): the checks
 * that stand in for the byte-exact ones. A token is *whole* when
 * detokenize([t]) holds no U+FFFD; the pieces of a run of whole tokens
 * concatenate to its text (TOK-4's text form). */
#ifndef ILAB_CONFORMANCE_TEXT_TOKENS_H
#define ILAB_CONFORMANCE_TEXT_TOKENS_H

#include "suites.h"

/* RFC 3629 UTF-8: no overlong forms, surrogates or code points past
 * U+10FFFF, no truncated sequence. */
bool conf_utf8_valid(const char *s, size_t n);
/* The bytes hold U+FFFD (EF BF BD). */
bool conf_has_replacement(const char *s, size_t n);

/* Whether each id is whole, asked once per id (a detokenize() each). */
typedef struct conf_whole {
    conf_env *env;
    signed char *known; /* vocab_size entries: 0 not asked, 1 whole, -1 not whole */
} conf_whole;

bool conf_whole_init(conf_whole *w, conf_env *env);
void conf_whole_free(conf_whole *w);
/* *whole for id t (in range); false with msg when detokenize() failed. */
bool conf_whole_get(conf_whole *w, int32_t t, bool *whole, char *msg, size_t cap);

/* TOK-4 for a text tokenizer over t[0..n): every maximal run of whole ids,
 * taken as a sequence of its own, has pieces (with -1 before its first)
 * concatenating to its detokenize(); every piece and text is valid UTF-8.
 * `what` names the input in the message. *runs counts the runs checked. */
bool conf_whole_runs_concatenate(conf_whole *w, const int32_t *t, size_t n, const char *what,
                                 size_t *runs, char *msg, size_t cap);

/* The output text of a stream (STR-2) is defined for a text tokenizer
 * when the prompt's last token `prev` (or -1) and every emitted token are
 * whole: *defined says whether it is. Byte tokenizers: always defined. */
bool conf_output_text_defined(conf_env *env, int32_t prev, const int32_t *t, size_t n, bool *defined,
                              char *msg, size_t cap);

/* Skip a byte-exact check for a text tokenizer, naming the capability it
 * needs and what checks the text form instead. */
#define CONF_SKIP_IF_TEXT(env, instead)                                                              \
    do {                                                                                             \
        if ((env)->m->tokenizer_text) {                                                              \
            snprintf(msg, cap, "capability tokenizer: true (byte-exact pieces) not declared: "      \
                               "tokenizer: text (TOK-10); %s", instead);                             \
            return CONF_SKIP;                                                                        \
        }                                                                                            \
    } while (0)

#endif

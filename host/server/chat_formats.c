/* The well-known chat templates, rendered natively (chat_formats.h).
 *
 * Written from the behaviour llama.cpp documents and tests for
 * llama_chat_apply_template(); tests/server/test_chat_formats.c holds every
 * render to the outputs llama.cpp really produced. Each template is one
 * function of a family; `v` selects the variant. Role names and markers are
 * template text; message content is always a content segment (trimmed where
 * the template trims it). */
#include "chat_formats.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* --- the render ---------------------------------------------------------------- */

static bool push(ilab_chat_segs *r, ilab_chat_seg_kind kind, const char *s, size_t len)
{
    if (r->failed)
        return false;
    if (!len)
        return true;
    ilab_chat_segment *last = r->n ? &r->seg[r->n - 1] : NULL;
    if (last && last->kind == kind) { /* adjacent text of one kind is one segment */
        char *grown = realloc(last->text, last->len + len + 1);
        if (!grown)
            return !(r->failed = true);
        memcpy(grown + last->len, s, len);
        last->len += len;
        grown[last->len] = '\0';
        last->text = grown;
        return true;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        ilab_chat_segment *seg = realloc(r->seg, cap * sizeof *seg);
        if (!seg)
            return !(r->failed = true);
        r->seg = seg;
        r->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return !(r->failed = true);
    memcpy(copy, s, len);
    copy[len] = '\0';
    r->seg[r->n++] = (ilab_chat_segment){kind, copy, len};
    return true;
}

static void T(ilab_chat_segs *r, const char *s) { push(r, ILAB_CHAT_SEG_TEMPLATE, s, strlen(s)); }
static void C(ilab_chat_segs *r, const char *s) { push(r, ILAB_CHAT_SEG_CONTENT, s, strlen(s)); }

/* Content without leading and trailing ASCII whitespace (as C's isspace in
 * the "C" locale: space, \t, \n, \v, \f, \r). */
static void CT(ilab_chat_segs *r, const char *s)
{
    size_t b = 0, e = strlen(s);
    while (b < e && isspace((unsigned char)s[b]))
        b++;
    while (e > b && isspace((unsigned char)s[e - 1]))
        e--;
    push(r, ILAB_CHAT_SEG_CONTENT, s + b, e - b);
}

bool ilab_chat_segs_content(ilab_chat_segs *r, const char *text, size_t len)
{
    return push(r, ILAB_CHAT_SEG_CONTENT, text, len);
}

char *ilab_chat_segs_join(const ilab_chat_segs *r, size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < r->n; i++)
        total += r->seg[i].len;
    char *out = malloc(total + 1), *p = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < r->n; i++) {
        memcpy(p, r->seg[i].text, r->seg[i].len);
        p += r->seg[i].len;
    }
    *p = '\0';
    if (len)
        *len = total;
    return out;
}

void ilab_chat_segs_free(ilab_chat_segs *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->seg[i].text);
    free(r->seg);
    *r = (ilab_chat_segs){0};
}

typedef const ilab_chat_message chat_msg;
#define IS(m, r) (!strcmp((m)->role, r))
#define EACH(i) for (size_t i = 0; i < n; i++)

/* --- the families ------------------------------------------------------------- */

/* Every turn "<open><role><mid><content><close>", then the generation prompt. */
typedef struct simple_format {
    const char *open, *mid, *close, *gen;
    bool trim;
} simple_format;

static const simple_format simple[] = {
    /* 0 chatml */ {"<|im_start|>", "\n", "<|im_end|>\n", "<|im_start|>assistant\n", false},
    /* 1 phi3 */ {"<|", "|>\n", "<|end|>\n", "<|assistant|>\n", false},
    /* 2 phi4 */ {"<|im_start|>", "<|im_sep|>", "<|im_end|>", "<|im_start|>assistant<|im_sep|>", false},
    /* 3 falcon3 */ {"<|", "|>\n", "\n", "<|assistant|>\n", false},
    /* 4 zephyr */ {"<|", "|>\n", "<|endoftext|>\n", "<|assistant|>\n", false},
    /* 5 llama3 */ {"<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>",
                    "<|start_header_id|>assistant<|end_header_id|>\n\n", true},
    /* 6 chatglm4 body */ {"<|", "|>\n", "", "<|assistant|>\n", false},
    /* 7 glmedge */ {"<|", "|>\n", "", "<|assistant|>", false},
    /* 8 granite */ {"<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>\n",
                     "<|start_of_role|>assistant<|end_of_role|>", false},
    /* 9 megrez */ {"<|role_start|>", "<|role_end|>", "<|turn_end|>",
                    "<|role_start|>assistant<|role_end|>", false},
    /* 10 llama4 */ {"<|header_start|>", "<|header_end|>\n\n", "<|eot|>",
                     "<|header_start|>assistant<|header_end|>\n\n", true},
    /* 11 solar-open */ {"<|begin|>", "<|content|>", "<|end|>", "<|begin|>assistant", false},
    /* 12 chatglm3 body */ {"<|", "|>\n ", "", "<|assistant|>", false},
};

static void render_simple(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    const simple_format *f = &simple[v];
    if (v == 6)
        T(r, "[gMASK]<sop>");
    if (v == 12)
        T(r, "[gMASK]sop");
    EACH(i) {
        T(r, f->open);
        T(r, m[i].role);
        T(r, f->mid);
        (f->trim ? CT : C)(r, m[i].content);
        T(r, f->close);
    }
    if (add)
        T(r, f->gen);
}

/* Granite 4.x: as granite, with the tool-call role; the roles here never
 * include it, so the text is granite's. */

/* Roles mapped to fixed markers: before/after the content per role. */
typedef struct role_marks {
    const char *sys[2], *user[2], *asst[2];
    const char *gen;
    bool trim;
} role_marks;

static const role_marks marked[] = {
    /* 0 deepseek */ {{"", ""}, {"### Instruction:\n", "\n"}, {"### Response:\n", "\n<|EOT|>\n"},
                      "### Response:\n", false},
    /* 1 command-r */ {{"<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|END_OF_TURN_TOKEN|>"},
                       {"<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "<|END_OF_TURN_TOKEN|>"},
                       {"<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"},
                       "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", true},
    /* 2 deepseek2 */ {{"", "\n\n"}, {"User: ", "\n\n"}, {"Assistant: ", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
                       "Assistant:", false},
    /* 3 deepseek3 */ {{"", "\n\n"}, {"<\xef\xbd\x9cUser\xef\xbd\x9c>", ""},
                       {"<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
                       "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", false},
    /* 4 exaone3 */ {{"[|system|]", "[|endofturn|]\n"}, {"[|user|]", "\n"}, {"[|assistant|]", "[|endofturn|]\n"},
                     "[|assistant|]", true},
    /* 5 exaone-moe */ {{"<|system|>\n", "<|endofturn|>\n"}, {"<|user|>\n", "<|endofturn|>\n"},
                        {"<|assistant|>\n", "<|endofturn|>\n"}, "<|assistant|>\n", true},
    /* 6 vicuna */ {{"", "\n\n"}, {"USER: ", "\n"}, {"ASSISTANT: ", "</s>\n"}, "ASSISTANT:", false},
    /* 7 vicuna-orca */ {{"SYSTEM: ", "\n"}, {"USER: ", "\n"}, {"ASSISTANT: ", "</s>\n"}, "ASSISTANT:", false},
    /* 8 dots1 */ {{"<|system|>", "<|endofsystem|>"}, {"<|userprompt|>", "<|endofuserprompt|>"},
                   {"<|response|>", "<|endofresponse|>"}, "<|response|>", false},
    /* 9 kimi-k2 */ {{"<|im_system|>system<|im_middle|>", "<|im_end|>"}, {"<|im_user|>user<|im_middle|>", "<|im_end|>"},
                     {"<|im_assistant|>assistant<|im_middle|>", "<|im_end|>"},
                     "<|im_assistant|>assistant<|im_middle|>", false},
    /* 10 smolvlm body */ {{"", "\n\n"}, {"User: ", "<end_of_utterance>\n"}, {"Assistant: ", "<end_of_utterance>\n"},
                           "Assistant:", false},
    /* 11 openai-moe (gpt-oss) */ {{"<|start|>system<|message|>", "<|end|>"}, {"<|start|>user<|message|>", "<|end|>"},
                                   {"<|start|>assistant<|message|>", "<|return|>"}, "<|start|>assistant", false},
    /* 12 exaone4 */ {{"[|system|]", "[|endofturn|]\n"}, {"[|user|]", "\n"}, {"[|assistant|]", "[|endofturn|]\n"},
                      "[|assistant|]", true},
};

static void render_marked(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    const role_marks *f = &marked[v];
    if (v == 10)
        T(r, "<|im_start|>");
    EACH(i) {
        const char *const *mk = IS(&m[i], "system") ? f->sys : IS(&m[i], "user") ? f->user : f->asst;
        T(r, mk[0]);
        (f->trim ? CT : C)(r, m[i].content);
        T(r, mk[1]);
    }
    if (add)
        T(r, f->gen);
}

/* llama2 and its variants: 0 llama2, 1 -sys, 2 -sys-bos, 3 -sys-strip. */
static void render_llama2(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)add; /* llama2 has no generation prompt: "[/INST]" already opens the reply */
    bool inside = true;
    T(r, "[INST] ");
    EACH(i) {
        if (!inside) {
            inside = true;
            T(r, v == 2 ? "<s>[INST] " : "[INST] ");
        }
        void (*content)(ilab_chat_segs *, const char *) = v == 3 ? CT : C;
        if (IS(&m[i], "system")) {
            T(r, v ? "<<SYS>>\n" : "");
            content(r, m[i].content);
            T(r, v ? "\n<</SYS>>\n\n" : "\n");
        } else if (IS(&m[i], "user")) {
            content(r, m[i].content);
            T(r, " [/INST]");
        } else {
            content(r, m[i].content);
            T(r, "</s>");
            inside = false;
        }
    }
}

/* Mistral: 0 v1, 1 v3, 2 v3-tekken, 3 v7, 4 v7-tekken. */
static void render_mistral(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)add;
    if (v >= 3) {
        const char *sp = v == 3 ? " " : "";
        EACH(i) {
            if (IS(&m[i], "system")) {
                T(r, "[SYSTEM_PROMPT]"), T(r, sp), C(r, m[i].content), T(r, "[/SYSTEM_PROMPT]");
            } else if (IS(&m[i], "user")) {
                T(r, "[INST]"), T(r, sp), C(r, m[i].content), T(r, "[/INST]");
            } else {
                T(r, sp), C(r, m[i].content), T(r, "</s>");
            }
        }
        return;
    }
    const char *lead = v == 0 ? " " : "", *trail = v == 2 ? "" : " ";
    bool inside = false;
    EACH(i) {
        if (!inside) {
            T(r, lead), T(r, "[INST]"), T(r, trail);
            inside = true;
        }
        if (IS(&m[i], "system")) {
            C(r, m[i].content), T(r, "\n\n");
        } else if (IS(&m[i], "user")) {
            C(r, m[i].content), T(r, lead), T(r, "[/INST]");
        } else {
            T(r, trail), (v == 1 ? CT : C)(r, m[i].content), T(r, "</s>");
            inside = false;
        }
    }
}

/* gemma (v 0) and orion (v 1): no system role; the system messages' text
 * (trimmed for gemma) waits for the next user turn and opens it. */
static bool pending_text(chat_msg *m, size_t from, size_t to, bool trim)
{
    for (size_t k = from; k < to; k++) {
        if (!IS(&m[k], "system"))
            continue;
        for (const char *p = m[k].content; *p; p++)
            if (!trim || !isspace((unsigned char)*p))
                return true;
    }
    return false;
}

static void flush_system(ilab_chat_segs *r, chat_msg *m, size_t from, size_t to, bool trim)
{
    for (size_t k = from; k < to; k++)
        if (IS(&m[k], "system"))
            (trim ? CT : C)(r, m[k].content);
    T(r, "\n\n");
}

static void render_merged_system(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    size_t from = 0; /* system messages from here on are still pending */
    bool trim = v == 0;
    EACH(i) {
        if (IS(&m[i], "system"))
            continue;
        bool user = IS(&m[i], "user");
        if (v == 0)
            T(r, "<start_of_turn>"), T(r, user ? m[i].role : "model"), T(r, "\n");
        else if (user)
            T(r, "Human: ");
        if (user || v == 0) {
            /* gemma opens any non-model turn with it; orion a user turn */
            if ((v == 1 || strcmp(m[i].role, "assistant")) && pending_text(m, from, i, trim)) {
                flush_system(r, m, from, i, trim);
                from = i;
            } else if (v == 1 || strcmp(m[i].role, "assistant")) {
                from = i;
            }
        }
        if (v == 0)
            CT(r, m[i].content), T(r, "<end_of_turn>\n");
        else if (user)
            C(r, m[i].content), T(r, "\n\nAssistant: </s>");
        else
            C(r, m[i].content), T(r, "</s>");
    }
    if (add && v == 0)
        T(r, "<start_of_turn>model\n");
}

static void render_monarch(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)v;
    EACH(i) {
        T(r, i ? "<s>" : ""), T(r, m[i].role), T(r, "\n"), C(r, m[i].content), T(r, "</s>\n");
    }
    if (add)
        T(r, "<s>assistant\n");
}

static void render_openchat(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)v;
    EACH(i) {
        if (IS(&m[i], "system")) {
            C(r, m[i].content), T(r, "<|end_of_turn|>");
            continue;
        }
        char role[32];
        size_t len = strlen(m[i].role);
        if (len >= sizeof role)
            len = sizeof role - 1;
        memcpy(role, m[i].role, len);
        role[len] = '\0';
        role[0] = (char)toupper((unsigned char)role[0]);
        T(r, "GPT4 Correct "), T(r, role), T(r, ": "), C(r, m[i].content), T(r, "<|end_of_turn|>");
    }
    if (add)
        T(r, "GPT4 Correct Assistant:");
}

static void render_minicpm(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)add, (void)v;
    EACH(i) {
        if (IS(&m[i], "user"))
            T(r, "<\xe7\x94\xa8\xe6\x88\xb7>"), CT(r, m[i].content), T(r, "<AI>");
        else
            CT(r, m[i].content);
    }
}

static void render_deepseek_ocr(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)add, (void)v;
    EACH(i) C(r, m[i].content);
}

static void render_rwkv(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)add, (void)v;
    EACH(i) {
        if (IS(&m[i], "system")) {
            T(r, "System: "), CT(r, m[i].content), T(r, "\n\n");
        } else if (IS(&m[i], "user")) {
            T(r, "User: "), CT(r, m[i].content), T(r, "\n\n");
            if (i == n - 1)
                T(r, "Assistant:");
        } else {
            T(r, "Assistant: "), CT(r, m[i].content), T(r, "\n\n");
        }
    }
}

static void render_gigachat(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)v;
    bool sys = n && IS(&m[0], "system");
    T(r, "<s>");
    if (sys)
        C(r, m[0].content), T(r, "<|message_sep|>");
    for (size_t i = sys ? 1 : 0; i < n; i++) {
        if (IS(&m[i], "user"))
            T(r, "user<|role_sep|>"), C(r, m[i].content),
                T(r, "<|message_sep|>available functions<|role_sep|>[]<|message_sep|>");
        else if (IS(&m[i], "assistant"))
            T(r, "assistant<|role_sep|>"), C(r, m[i].content), T(r, "<|message_sep|>");
    }
    if (add)
        T(r, "assistant<|role_sep|>");
}

static void render_yandex(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)v;
    EACH(i) {
        if (IS(&m[i], "user"))
            T(r, " \xd0\x9f\xd0\xbe\xd0\xbb\xd1\x8c\xd0\xb7\xd0\xbe\xd0\xb2\xd0\xb0\xd1\x82\xd0\xb5\xd0\xbb\xd1\x8c: "),
                C(r, m[i].content), T(r, "\n\n");
        else if (IS(&m[i], "assistant"))
            T(r, " \xd0\x90\xd1\x81\xd1\x81\xd0\xb8\xd1\x81\xd1\x82\xd0\xb5\xd0\xbd\xd1\x82: "), C(r, m[i].content),
                T(r, "\n\n");
    }
    if (add)
        T(r, " \xd0\x90\xd1\x81\xd1\x81\xd0\xb8\xd1\x81\xd1\x82\xd0\xb5\xd0\xbd\xd1\x82:[SEP]");
}

/* Bailing: 0 bailing, 1 bailing-think, 2 bailing2. The role in capitals,
 * "user" as HUMAN. */
static void render_bailing(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    if (v == 2 && !(n && IS(&m[0], "system")))
        T(r, "<role>SYSTEM</role>detailed thinking off<|role_end|>");
    EACH(i) {
        char role[32];
        if (IS(&m[i], "user")) {
            strcpy(role, "HUMAN");
        } else {
            size_t k = 0;
            for (; m[i].role[k] && k < sizeof role - 1; k++)
                role[k] = (char)toupper((unsigned char)m[i].role[k]);
            role[k] = '\0';
        }
        T(r, "<role>"), T(r, role), T(r, "</role>"), C(r, m[i].content);
        if (v == 2)
            T(r, "<|role_end|>");
    }
    if (add) {
        T(r, "<role>ASSISTANT</role>");
        if (v == 1)
            T(r, "<think>");
    }
}

static void render_hunyuan_moe(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)add, (void)v;
    EACH(i) {
        if (IS(&m[i], "system"))
            T(r, "<|startoftext|>"), C(r, m[i].content), T(r, "<|extra_4|>");
        else if (IS(&m[i], "assistant"))
            C(r, m[i].content), T(r, "<|eos|>");
        else
            T(r, "<|startoftext|>"), C(r, m[i].content), T(r, "<|extra_0|>");
    }
}

#define HY_ASSISTANT "<\xef\xbd\x9chy_Assistant\xef\xbd\x9c>"
#define HY_USER "<\xef\xbd\x9chy_User\xef\xbd\x9c>"
#define HY_HOLDER(d) "<\xef\xbd\x9chy_place\xe2\x96\x81holder\xe2\x96\x81no\xe2\x96\x81" d "\xef\xbd\x9c>"

/* Hunyuan: 0 dense, 1 vl. */
static void render_hunyuan(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)add;
    if (v == 1)
        T(r, "<\xef\xbd\x9chy_begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    EACH(i) {
        if (i == 0 && IS(&m[i], "system")) {
            C(r, m[i].content), T(r, HY_HOLDER("3"));
            if (v == 1)
                continue;
        }
        if (v == 0 && IS(&m[i], "assistant"))
            T(r, HY_ASSISTANT), C(r, m[i].content), T(r, HY_HOLDER("2"));
        else if (v == 0 && IS(&m[i], "user"))
            T(r, HY_USER), C(r, m[i].content), T(r, HY_ASSISTANT);
        else if (v == 1 && IS(&m[i], "user"))
            C(r, m[i].content), T(r, HY_USER);
        else if (v == 1 && IS(&m[i], "assistant"))
            C(r, m[i].content), T(r, HY_ASSISTANT);
    }
}

static void render_seed_oss(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)v;
    EACH(i) {
        bool asst = IS(&m[i], "assistant");
        T(r, "<seed:bos>"), T(r, m[i].role), T(r, "\n"), (asst ? CT : C)(r, m[i].content), T(r, "<seed:eos>");
    }
    if (add)
        T(r, "<seed:bos>assistant\n");
}

static void render_grok2(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)v;
    EACH(i) {
        if (IS(&m[i], "system"))
            T(r, "System: "), CT(r, m[i].content), T(r, "<|separator|>\n\n");
        else if (IS(&m[i], "user"))
            T(r, "Human: "), CT(r, m[i].content), T(r, "<|separator|>\n\n");
        else
            T(r, "Assistant: "), C(r, m[i].content), T(r, "<|separator|>\n\n");
    }
    if (add)
        T(r, "Assistant:");
}

#define PANGU_OPEN "[unused9]"
#define PANGU_CLOSE "[unused10]"
#define PANGU_SYS "\xe7\xb3\xbb\xe7\xbb\x9f\xef\xbc\x9a"  /* 系统： */
#define PANGU_USER "\xe7\x94\xa8\xe6\x88\xb7\xef\xbc\x9a" /* 用户： */
#define PANGU_ASST "\xe5\x8a\xa9\xe6\x89\x8b\xef\xbc\x9a" /* 助手： */

static void render_pangu(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)v;
    EACH(i) {
        if (i == 0 && !IS(&m[i], "system"))
            T(r, PANGU_OPEN PANGU_SYS PANGU_CLOSE);
        const char *who = IS(&m[i], "system") ? PANGU_SYS : IS(&m[i], "user") ? PANGU_USER : PANGU_ASST;
        T(r, PANGU_OPEN), T(r, who), C(r, m[i].content), T(r, PANGU_CLOSE);
    }
    if (add)
        T(r, PANGU_OPEN PANGU_ASST);
}

/* The default model's own plain template (docs/chat-template.md): every
 * message "role: content\n", then "assistant:". */
static void render_plain(ilab_chat_segs *r, chat_msg *m, size_t n, bool add, int v)
{
    (void)v;
    EACH(i) T(r, m[i].role), T(r, ": "), C(r, m[i].content), T(r, "\n");
    if (add)
        T(r, "assistant:");
}

/* --- the table ---------------------------------------------------------------- */

typedef void render_fn(ilab_chat_segs *, chat_msg *, size_t, bool, int);

struct ilab_chat_format {
    const char *name;
    render_fn *render;
    int variant;
};

static const ilab_chat_format formats[] = {
    {"plain", render_plain, 0},
    {"chatml", render_simple, 0},
    {"llama2", render_llama2, 0},
    {"llama2-sys", render_llama2, 1},
    {"llama2-sys-bos", render_llama2, 2},
    {"llama2-sys-strip", render_llama2, 3},
    {"mistral-v1", render_mistral, 0},
    {"mistral-v3", render_mistral, 1},
    {"mistral-v3-tekken", render_mistral, 2},
    {"mistral-v7", render_mistral, 3},
    {"mistral-v7-tekken", render_mistral, 4},
    {"phi3", render_simple, 1},
    {"phi4", render_simple, 2},
    {"falcon3", render_simple, 3},
    {"zephyr", render_simple, 4},
    {"monarch", render_monarch, 0},
    {"gemma", render_merged_system, 0},
    {"orion", render_merged_system, 1},
    {"openchat", render_openchat, 0},
    {"vicuna", render_marked, 6},
    {"vicuna-orca", render_marked, 7},
    {"deepseek", render_marked, 0},
    {"deepseek2", render_marked, 2},
    {"deepseek3", render_marked, 3},
    {"deepseek-ocr", render_deepseek_ocr, 0},
    {"command-r", render_marked, 1},
    {"llama3", render_simple, 5},
    {"chatglm3", render_simple, 12},
    {"chatglm4", render_simple, 6},
    {"glmedge", render_simple, 7},
    {"minicpm", render_minicpm, 0},
    {"exaone3", render_marked, 4},
    {"exaone4", render_marked, 12},
    {"exaone-moe", render_marked, 5},
    {"rwkv-world", render_rwkv, 0},
    {"granite", render_simple, 8},
    {"granite-4.0", render_simple, 8},
    {"granite-4.1", render_simple, 8},
    {"gigachat", render_gigachat, 0},
    {"megrez", render_simple, 9},
    {"yandex", render_yandex, 0},
    {"bailing", render_bailing, 0},
    {"bailing-think", render_bailing, 1},
    {"bailing2", render_bailing, 2},
    {"llama4", render_simple, 10},
    {"smolvlm", render_marked, 10},
    {"dots1", render_marked, 8},
    {"hunyuan-moe", render_hunyuan_moe, 0},
    {"gpt-oss", render_marked, 11},
    {"hunyuan-dense", render_hunyuan, 0},
    {"hunyuan-vl", render_hunyuan, 1},
    {"kimi-k2", render_marked, 9},
    {"seed_oss", render_seed_oss, 0},
    {"grok-2", render_grok2, 0},
    {"pangu-embedded", render_pangu, 0},
    {"solar-open", render_simple, 11},
};
#define N_FORMATS (sizeof formats / sizeof formats[0])

const char *const ilab_chat_format_names[] = {
    "plain", "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
    "mistral-v3", "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "phi3", "phi4", "falcon3",
    "zephyr", "monarch", "gemma", "orion", "openchat", "vicuna", "vicuna-orca", "deepseek",
    "deepseek2", "deepseek3", "deepseek-ocr", "command-r", "llama3", "chatglm3", "chatglm4",
    "glmedge", "minicpm", "exaone3", "exaone4", "exaone-moe", "rwkv-world", "granite",
    "granite-4.0", "granite-4.1", "gigachat", "megrez", "yandex", "bailing", "bailing-think",
    "bailing2", "llama4", "smolvlm", "dots1", "hunyuan-moe", "gpt-oss", "hunyuan-dense",
    "hunyuan-vl", "kimi-k2", "seed_oss", "grok-2", "pangu-embedded", "solar-open", NULL};

const ilab_chat_format *ilab_chat_format_named(const char *name)
{
    for (size_t i = 0; name && i < N_FORMATS; i++)
        if (!strcmp(formats[i].name, name))
            return &formats[i];
    return NULL;
}

const char *ilab_chat_format_name(const ilab_chat_format *f) { return f ? f->name : NULL; }

bool ilab_chat_format_render(const ilab_chat_format *f, const ilab_chat_message *msgs, size_t n,
                             bool add_generation_prompt, ilab_chat_segs *out)
{
    f->render(out, msgs, n, add_generation_prompt, f->variant);
    return !out->failed;
}

/* --- detection (as llama.cpp's llm_chat_detect_template) ----------------------- */

static bool has(const char *t, const char *needle) { return strstr(t, needle) != NULL; }

static const char *detect_mistral_llama2(const char *t)
{
    if (has(t, "[SYSTEM_PROMPT]"))
        return "mistral-v7";
    if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) {
        if (has(t, " [INST]"))
            return "mistral-v1";
        if (has(t, "\"[INST]\""))
            return "mistral-v3-tekken";
        return "mistral-v3";
    }
    if (has(t, "content.strip()"))
        return "llama2-sys-strip";
    if (has(t, "bos_token + '[INST]"))
        return "llama2-sys-bos";
    return has(t, "<<SYS>>") ? "llama2-sys" : "llama2";
}

#define FW_BAR "\xef\xbd\x9c" /* U+FF5C, the bar of DeepSeek's and Hunyuan's markers */
#define SPM_SPACE "\xe2\x96\x81" /* U+2581 */

/* Marker strings in the order llama.cpp tries them: the first rule that
 * matches wins. Each rule: up to three substrings that must all be present. */
typedef struct detect_rule {
    const char *all[3];
    const char *name;
} detect_rule;

static const detect_rule rules[] = {
    {{"<|assistant|>", "<|end|>"}, "phi3"},
    {{"[gMASK]<sop>"}, "chatglm4"},
    {{"<|assistant|>", "<|user|>", "<|tool_declare|>"}, "exaone-moe"},
    {{"<|assistant|>", "<|user|>", "</s>"}, "falcon3"},
    {{"<|assistant|>", "<|user|>"}, "glmedge"},
    {{"<|{{ item['role'] }}|>", "<|begin_of_image|>"}, "glmedge"},
    {{"<|user|>", "<|endoftext|>"}, "zephyr"},
    {{"bos_token + message['role']"}, "monarch"},
    {{"<start_of_turn>"}, "gemma"},
    {{"'\\n\\nAssistant: ' + eos_token"}, "orion"},
    {{"GPT4 Correct "}, "openchat"},
    {{"USER: ", "ASSISTANT: ", "SYSTEM: "}, "vicuna-orca"},
    {{"USER: ", "ASSISTANT: "}, "vicuna"},
    {{"### Instruction:", "<|EOT|>"}, "deepseek"},
    {{"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"}, "command-r"},
    {{"<|start_header_id|>", "<|end_header_id|>"}, "llama3"},
    {{"[gMASK]sop"}, "chatglm3"},
    {{"<\xe7\x94\xa8\xe6\x88\xb7>"}, "minicpm"},
    {{"'Assistant: ' + message['content'] + eos_token"}, "deepseek2"},
    {{"<" FW_BAR "Assistant" FW_BAR ">", "<" FW_BAR "User" FW_BAR ">",
      "<" FW_BAR "end" SPM_SPACE "of" SPM_SPACE "sentence" FW_BAR ">"}, "deepseek3"},
    {{"[|system|]", "[|assistant|]", "[|endofturn|]"}, NULL}, /* exaone3/4: below */
    {{"rwkv-world"}, "rwkv-world"},
    {{"{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"}, "rwkv-world"},
    {{"<|start_of_role|>"}, NULL}, /* granite: below */
    {{"message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]"},
     "gigachat"},
    {{"<|role_start|>"}, "megrez"},
    {{" \xd0\x90\xd1\x81\xd1\x81\xd0\xb8\xd1\x81\xd1\x82\xd0\xb5\xd0\xbd\xd1\x82:"}, "yandex"},
    {{"<role>ASSISTANT</role>", "'HUMAN'"}, "bailing"},
    {{"<role>ASSISTANT</role>", "\"HUMAN\"", "<think>"}, "bailing-think"},
    {{"<role>ASSISTANT</role>", "<role>HUMAN</role>", "<|role_end|>"}, "bailing2"},
    {{"<|header_start|>", "<|header_end|>"}, "llama4"},
    {{"<|endofuserprompt|>"}, "dots1"},
    {{"<|extra_0|>", "<|extra_4|>"}, "hunyuan-moe"},
    {{"<|start|>", "<|channel|>"}, "gpt-oss"},
    {{"<" FW_BAR "hy_Assistant" FW_BAR ">", "<" FW_BAR "hy_begin" SPM_SPACE "of" SPM_SPACE "sentence" FW_BAR ">"},
     "hunyuan-vl"},
    {{"<" FW_BAR "hy_Assistant" FW_BAR ">",
      "<" FW_BAR "hy_place" SPM_SPACE "holder" SPM_SPACE "no" SPM_SPACE "3" FW_BAR ">"}, "hunyuan-dense"},
    {{"<|im_assistant|>assistant<|im_middle|>"}, "kimi-k2"},
    {{"<seed:bos>"}, "seed_oss"},
    {{"'Assistant: '  + message['content'] + '<|separator|>"}, "grok-2"},
    {{"[unused9]\xe7\xb3\xbb\xe7\xbb\x9f\xef\xbc\x9a[unused10]"}, "pangu-embedded"},
    {{"<|begin|>", "<|end|>", "<|content|>"}, "solar-open"},
};

static bool rule_matches(const char *t, const detect_rule *r)
{
    for (int k = 0; k < 3 && r->all[k]; k++)
        if (!has(t, r->all[k]))
            return false;
    return true;
}

static const char *detect_name(const char *t)
{
    if (has(t, "<|im_start|>"))
        return has(t, "<|im_sep|>") ? "phi4" : has(t, "<end_of_utterance>") ? "smolvlm" : "chatml";
    if (!strncmp(t, "mistral", 7) || has(t, "[INST]"))
        return detect_mistral_llama2(t);
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        if (!rule_matches(t, &rules[i]))
            continue;
        if (rules[i].name)
            return rules[i].name;
        if (has(t, "[|system|]")) /* the EXAONE rule */
            return has(t, "[|tool|]") ? "exaone4" : "exaone3";
        if (has(t, "<tool_call>") || has(t, "<tools>")) /* the granite rule */
            return has(t, "g4_default_system_message") ? "granite-4.0" : "granite-4.1";
        return "granite";
    }
    return NULL;
}

const ilab_chat_format *ilab_chat_format_detect(const char *template_text)
{
    if (!template_text)
        return NULL;
    /* A name is itself (llama.cpp's names only: "plain" is this host's). */
    const ilab_chat_format *f = ilab_chat_format_named(template_text);
    if (f && strcmp(f->name, "plain") && strcmp(f->name, "dots1"))
        return f;
    return ilab_chat_format_named(detect_name(template_text));
}

/* Fuzz target: torchlike's tokens through its backend table, with the
 * embedded default vocabulary — the tokenize/detokenize/token_piece calls
 * the host makes (CLI tokenize, the server, the engine's streaming).
 *
 * Input: a control byte, then bytes used three ways: as text, as an array of
 * token ids (int32, either raw or folded into [-4, vocab + 4) so the range
 * edges are hit), and as (prev, token) pairs.
 *
 * Asserts (backend.h, TOK-1..4):
 *  - tokenize: ids in [0, vocab); BOS/EOS first/last exactly when asked; a
 *    short buffer gives BUFFER_TOO_SMALL with the same count;
 *  - round trip: detokenize(tokenize(text)) == text, byte for byte;
 *  - detokenize of any id array: INVALID_ARGUMENT exactly when an id is out
 *    of range, else the concatenation of token_piece() over the array; a
 *    short buffer gives BUFFER_TOO_SMALL and the exact length needed;
 *  - token_piece of any pair: INVALID_ARGUMENT exactly when token or
 *    prev_token (other than -1) is out of range; NUL-terminated; sizes as
 *    for detokenize. */
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "inferlab/inferlab.h"

extern const ilab_plugin_entry_t ilab_plugin_entry;

static const ilab_backend_api_t *api;
static ilab_backend_t *backend;
static ilab_model_info_t info;

static void quiet_log(const ilab_host_t *host, ilab_log_level level, const char *plugin,
                      const char *message)
{
    (void)host, (void)level, (void)plugin, (void)message;
}

static uint64_t zero_clock(const ilab_host_t *host)
{
    (void)host;
    return 0;
}

/* The host table a plugin is given (ABI-3: create() refuses a NULL host). */
static const ilab_host_t host = {
    .struct_size = sizeof(ilab_host_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = ILAB_ABI_MINOR,
    .log = quiet_log,
    .now_ns = zero_clock,
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    api = ilab_plugin_entry.backend;
    ilab_config_entry_t cfg[] = {{"threads", "1"}, {"max_sequences", "1"}};
    char err[512] = "";
    ilab_status st = api->create(&host, cfg, 2, err, sizeof err, &backend);
    FUZZ_CHECK(st == ILAB_OK, "create: %s", err);
    info.struct_size = sizeof info;
    FUZZ_CHECK(api->model_info(backend, &info) == ILAB_OK, "model_info");
    FUZZ_CHECK(info.vocab_size > 3, "vocab_size %d", info.vocab_size);
    return 0;
}

static bool in_range(int32_t t) { return t >= 0 && t < info.vocab_size; }

/* token_piece over ids, concatenated, or false when an id is out of range. */
static bool pieces(const int32_t *ids, size_t n, char **out, size_t *out_len)
{
    size_t cap = 64, len = 0;
    char *buf = malloc(cap);
    FUZZ_CHECK(buf, "oom");
    for (size_t i = 0; i < n; i++) {
        if (!in_range(ids[i])) {
            free(buf);
            return false;
        }
        char piece[256];
        size_t pl = 0;
        ilab_status st = api->token_piece(backend, i ? ids[i - 1] : -1, ids[i], piece,
                                          sizeof piece, &pl);
        FUZZ_CHECK(st == ILAB_OK, "token_piece(%d): %s", ids[i], ilab_status_name(st));
        FUZZ_CHECK(piece[pl] == '\0', "piece not NUL-terminated");
        if (len + pl + 1 > cap) {
            cap = 2 * (len + pl + 1);
            buf = realloc(buf, cap);
            FUZZ_CHECK(buf, "oom");
        }
        memcpy(buf + len, piece, pl);
        len += pl;
    }
    *out = buf;
    *out_len = len;
    return true;
}

static void check_detokenize(const int32_t *ids, size_t n, const char *want, size_t want_len,
                             bool expect_ok)
{
    size_t cap = want_len + 1, len = 0;
    char *text = malloc(cap);
    FUZZ_CHECK(text, "oom");
    ilab_status st = api->detokenize(backend, ids, n, text, cap, &len);
    if (!expect_ok) {
        FUZZ_CHECK(st == ILAB_INVALID_ARGUMENT, "out-of-range id gave %s", ilab_status_name(st));
        free(text);
        return;
    }
    FUZZ_CHECK(st == ILAB_OK, "detokenize: %s", ilab_status_name(st));
    FUZZ_CHECK(len == want_len && !memcmp(text, want, len) && text[len] == '\0',
               "detokenize gives %zu bytes, the pieces %zu", len, want_len);
    size_t need = 0;
    st = api->detokenize(backend, ids, n, text, want_len, &need);
    FUZZ_CHECK(st == ILAB_BUFFER_TOO_SMALL && need == want_len,
               "a %zu-byte buffer gave %s and need %zu", want_len, ilab_status_name(st), need);
    free(text);
}

/* Lead and continuation bytes in order (the refusal's precondition). */
static bool well_formed(const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > len)
            return false;
        for (size_t k = 1; k < n; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
        i += n;
    }
    return true;
}

static void check_text(const char *text, size_t len, uint32_t flags)
{
    /* at most three ids a byte (an escaped space by byte fallback), plus
     * the dummy prefix's three, BOS and EOS */
    size_t cap = 3 * len + 5, n = 0, n_short = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    FUZZ_CHECK(ids, "oom");
    ilab_status st = api->tokenize(backend, text, len, flags, ids, cap, &n);
    /* TOK-5: ill-formed UTF-8 round-trips or is refused; so is U+2581,
     * which SentencePiece reads as a space (llama.cpp's ids); nothing else */
    FUZZ_CHECK(st == ILAB_OK || (st == ILAB_INVALID_ARGUMENT &&
                                 (!well_formed((const unsigned char *)text, len) ||
                                  memmem(text, len, "\xe2\x96\x81", 3))),
               "tokenize: %s", ilab_status_name(st));
    if (st != ILAB_OK) {
        free(ids);
        return;
    }
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(in_range(ids[i]), "id %d out of range", ids[i]);
    bool bos = flags & ILAB_TOKENIZE_ADD_BOS, eos = flags & ILAB_TOKENIZE_ADD_EOS;
    FUZZ_CHECK(n >= (size_t)bos + (size_t)eos, "too few ids");
    FUZZ_CHECK(!bos || ids[0] == info.bos_id, "no BOS first");
    FUZZ_CHECK(!eos || ids[n - 1] == info.eos_id, "no EOS last");
    for (size_t i = bos; i < n - eos; i++)
        FUZZ_CHECK(ids[i] != info.bos_id && ids[i] != info.eos_id, "BOS/EOS inside the text");
    if (n > 0) {
        int32_t *short_ids = malloc(n * sizeof *short_ids);
        FUZZ_CHECK(short_ids, "oom");
        st = api->tokenize(backend, text, len, flags, short_ids, n - 1, &n_short);
        free(short_ids);
        FUZZ_CHECK(st == ILAB_BUFFER_TOO_SMALL, "%zu ids into %zu: %s", n, n - 1,
                   ilab_status_name(st));
        FUZZ_CHECK(n_short == n, "short buffer says %zu ids, %zu with room", n_short, n);
    }
    char *joined;
    size_t joined_len;
    FUZZ_CHECK(pieces(ids, n, &joined, &joined_len), "pieces");
    FUZZ_CHECK(joined_len == len && !memcmp(joined, text, len),
               "round trip: %zu bytes in, %zu bytes back", len, joined_len);
    check_detokenize(ids, n, joined, joined_len, true);
    free(joined);
    free(ids);
}

static void check_ids(const int32_t *ids, size_t n)
{
    char *joined = NULL;
    size_t joined_len = 0;
    bool ok = pieces(ids, n, &joined, &joined_len);
    check_detokenize(ids, n, joined, joined_len, ok);
    free(joined);
}

static void check_pair(int32_t prev, int32_t token)
{
    bool ok = in_range(token) && (prev == -1 || in_range(prev));
    char piece[256];
    size_t len = 0, need = 0;
    ilab_status st = api->token_piece(backend, prev, token, piece, sizeof piece, &len);
    FUZZ_CHECK(ok ? st == ILAB_OK : st == ILAB_INVALID_ARGUMENT, "token_piece(%d, %d): %s", prev,
               token, ilab_status_name(st));
    if (!ok)
        return;
    FUZZ_CHECK(piece[len] == '\0' && len < sizeof piece, "piece");
    st = api->token_piece(backend, prev, token, piece, len, &need);
    FUZZ_CHECK(st == ILAB_BUFFER_TOO_SMALL && need == len, "a %zu-byte buffer gave %s, need %zu",
               len, ilab_status_name(st), need);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t ctl = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    check_text(text, len, ctl & 3);

    size_t n = len / 4;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    FUZZ_CHECK(ids, "oom");
    memcpy(ids, text, n * 4);
    if (ctl & 4)
        for (size_t i = 0; i < n; i++)
            ids[i] = (int32_t)((uint32_t)ids[i] % (uint32_t)(info.vocab_size + 8)) - 4;
    check_ids(ids, n);
    for (size_t i = 0; i + 1 < n; i += 2)
        check_pair(ids[i], ids[i + 1]);
    if (n == 1)
        check_pair(-1, ids[0]);
    free(ids);
    return 0;
}

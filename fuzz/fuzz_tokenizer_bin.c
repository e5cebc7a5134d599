/* Fuzz target: the llama2.c tokenizer.bin loader, and the BPE encoder over
 * whatever vocabulary it accepts.
 *
 * Input: a control byte, then the tokenizer.bin bytes. The model's
 * vocab_size passed to tl_tokenizer_load() (what create() calls for the
 * embedded tokenizer, and tl_tokenizer_load_file() for a user's) is the
 * entry count this file's own reading of the format finds, or one off it
 * when the control byte says so.
 *
 * Asserts: the loader accepts exactly the files the reference reading
 * accepts, with the same pieces and scores; refusals name the file; every
 * byte-fallback id maps to its "<0xHH>" piece; encoding the file's own bytes
 * (a text full of odd pieces) gives ids in range, the same ids whatever the
 * output capacity, and BOS/EOS where asked; each piece lies in the
 * tokenizer's storage. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "tokenizer.h"

#define LABEL "fuzz-tokenizer.bin"

/* Entries in the file, counted through the length fields (-1 when they run
 * past its end); *valid says whether the file is well-formed: max_token_length
 * in 1..65536, no entry longer than it, at least <unk>, BOS and EOS. Counting
 * malformed files too lets the loader be asked with the count it would find,
 * so its own checks are what refuse them. */
static int reference_count(const uint8_t *p, size_t size, bool *valid)
{
    *valid = false;
    if (size < 4)
        return -1;
    int32_t max_len;
    memcpy(&max_len, p, 4);
    bool ok = max_len >= 1 && max_len <= 65536;
    size_t at = 4;
    int count = 0;
    while (at < size) {
        if (size - at < 8)
            return -1;
        int32_t len;
        memcpy(&len, p + at + 4, 4);
        if (len < 0 || (size_t)len > size - at - 8)
            return -1;
        ok = ok && len <= max_len;
        at += 8 + (size_t)len;
        count++;
    }
    *valid = ok && count >= 3;
    return count;
}

static void check_same(const tl_tokenizer *t, const uint8_t *p)
{
    size_t at = 4;
    for (int i = 0; i < t->vocab_size; i++) {
        float score;
        int32_t len;
        memcpy(&score, p + at, 4);
        memcpy(&len, p + at + 4, 4);
        FUZZ_CHECK(t->piece_len[i] == len && !memcmp(t->pieces[i], p + at + 8, (size_t)len) &&
                       t->pieces[i][len] == '\0', "piece %d differs", i);
        FUZZ_CHECK(!memcmp(&t->scores[i], &score, 4), "score %d differs", i);
        at += 8 + (size_t)len;
    }
    for (int b = 0; b < 256; b++) {
        int id = t->byte_id[b];
        if (id < 0)
            continue;
        char want[7];
        snprintf(want, sizeof want, "<0x%02X>", b);
        FUZZ_CHECK(id < t->vocab_size && t->piece_len[id] == 6 && !memcmp(t->pieces[id], want, 6),
                   "byte_id[%d] = %d", b, id);
    }
}

static void check_encode(const tl_tokenizer *t, const char *text, size_t len)
{
    /* At most three ids a byte (a space, escaped to U+2581, by byte
     * fallback), plus the dummy prefix's three, BOS and EOS. */
    size_t cap = 3 * len + 5, n = 0, n_small = 0;
    int32_t *ids = malloc(cap * sizeof *ids), small[4];
    if (!ids)
        return;
    FUZZ_CHECK(tl_tokenizer_encode(t, text, len, 1, 1, ids, cap, &n) == ILAB_OK, "encode");
    FUZZ_CHECK(n >= 2 && n <= cap, "%zu ids for %zu bytes", n, len);
    FUZZ_CHECK(ids[0] == t->bos_id && ids[n - 1] == t->eos_id, "BOS/EOS");
    FUZZ_CHECK(tl_tokenizer_encode(t, text, len, 1, 1, small, 4, &n_small) == ILAB_OK, "encode");
    FUZZ_CHECK(n_small == n, "needed %zu ids with a short buffer, %zu with room", n_small, n);
    for (size_t i = 0; i < n && i < 4; i++)
        FUZZ_CHECK(small[i] == ids[i], "id %zu differs with a short buffer", i);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < t->vocab_size, "id %d out of range", ids[i]);
        const char *p;
        size_t pl;
        tl_tokenizer_piece(t, i ? ids[i - 1] : -1, ids[i], &p, &pl);
        bool in_piece = p >= t->pieces[ids[i]] && p + pl <= t->pieces[ids[i]] + t->piece_len[ids[i]];
        FUZZ_CHECK(in_piece || pl <= 1, "piece of %d points elsewhere", ids[i]);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t ctl = data[0];
    size_t n = size - 1;
    uint8_t *file = malloc(n ? n : 1); /* exact size, so ASan sees the end */
    if (!file)
        return 0;
    memcpy(file, data + 1, n);

    bool valid;
    int count = reference_count(file, n, &valid);
    int expected_vocab = count + ((ctl & 1) ? ((ctl & 2) ? 1 : -1) : 0);
    bool expect = valid && expected_vocab == count;

    tl_tokenizer t;
    char err[1024] = "";
    ilab_status st = tl_tokenizer_load(file, n, LABEL, expected_vocab, "fuzz.bin", &t, err,
                                       sizeof err);
    FUZZ_CHECK(st == ILAB_OK || st == ILAB_INVALID_ARGUMENT, "status %s", ilab_status_name(st));
    FUZZ_CHECK((st == ILAB_OK) == expect, "loader %s; reference count %d, vocab %d (%s)",
               st == ILAB_OK ? "accepted" : "refused", count, expected_vocab, err);
    if (st != ILAB_OK) {
        FUZZ_CHECK(strstr(err, LABEL) != NULL, "refusal '%s' does not name the file", err);
        free(file);
        return 0;
    }
    FUZZ_CHECK(t.vocab_size == count, "vocab_size %d", t.vocab_size);
    check_same(&t, file);
    check_encode(&t, (const char *)file, n < 512 ? n : 512);
    tl_tokenizer_free(&t);
    free(file);
    return 0;
}

/* Text streaming tests: stop strings across token boundaries, UTF-8
 * hold-back, and metrics exposition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "ilab_skip.h"

#include "inferlab/generate.h"
#include "runtime/metrics.h"
#include "runtime/text_stream.h"

/* Feed pieces; collect what is emitted; return whether a stop matched. */
static bool feed(ilab_text_stream *ts, const char *const *pieces, size_t n, char *out, size_t cap,
                 size_t *emitted_at_stop)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const char *d;
        size_t dl;
        bool stop = ilab_text_stream_push(ts, pieces[i], strlen(pieces[i]), false, &d, &dl);
        assert_true(len + dl < cap);
        memcpy(out + len, d, dl);
        len += dl;
        out[len] = '\0';
        if (stop) {
            if (emitted_at_stop)
                *emitted_at_stop = i;
            return true;
        }
    }
    const char *d;
    size_t dl;
    ilab_text_stream_flush(ts, &d, &dl);
    memcpy(out + len, d, dl);
    out[len + dl] = '\0';
    return false;
}

static void stop_string_across_token_boundaries_is_trimmed(void **state)
{
    (void)state;
    const char *stop[] = {"END"};
    ilab_text_stream ts;
    assert_true(ilab_text_stream_init(&ts, stop, 1));
    const char *pieces[] = {"Hello E", "N", "D and more"};
    char out[64];
    size_t at = 99;
    assert_true(feed(&ts, pieces, 3, out, sizeof out, &at));
    assert_string_equal(out, "Hello ");
    assert_int_equal(at, 2);
    ilab_text_stream_free(&ts);
}

static void held_prefix_is_released_when_it_cannot_be_a_stop(void **state)
{
    (void)state;
    const char *stop[] = {"\n\n", "STOP"};
    ilab_text_stream ts;
    assert_true(ilab_text_stream_init(&ts, stop, 2));
    const char *d;
    size_t dl;
    assert_false(ilab_text_stream_push(&ts, "ab\n", 3, false, &d, &dl));
    assert_int_equal(dl, 2); /* "\n" held: it may start "\n\n" */
    assert_memory_equal(d, "ab", 2);
    assert_false(ilab_text_stream_push(&ts, "cST", 3, false, &d, &dl));
    assert_int_equal(dl, 2); /* "\nc" released, "ST" held */
    assert_memory_equal(d, "\nc", 2);
    assert_true(ilab_text_stream_push(&ts, "OP", 2, false, &d, &dl));
    assert_true(ts.stopped);
    assert_int_equal(dl, 0);
    ilab_text_stream_free(&ts);
}

static void earliest_stop_wins(void **state)
{
    (void)state;
    const char *stop[] = {"xyz", "b"};
    ilab_text_stream ts;
    assert_true(ilab_text_stream_init(&ts, stop, 2));
    const char *pieces[] = {"axyzb"};
    char out[32];
    assert_true(feed(&ts, pieces, 1, out, sizeof out, NULL));
    assert_string_equal(out, "a");
    ilab_text_stream_free(&ts);
}

/* STR-6: the shortest text holding a stop string ends the stream, cut
 * before the longest occurrence ending there. One push that completes
 * "bc" inside "abcd" cuts at "a", not before "abcd" (it starts first but
 * ends later); two ending together cut before the longer. */
static void stop_ending_first_wins_inside_another(void **state)
{
    (void)state;
    const char *stop[] = {"abcd", "bc"};
    ilab_text_stream ts;
    assert_true(ilab_text_stream_init(&ts, stop, 2));
    const char *pieces[] = {"x", "abcd"};
    char out[32];
    assert_true(feed(&ts, pieces, 2, out, sizeof out, NULL));
    assert_string_equal(out, "xa");
    ilab_text_stream_free(&ts);
    const char *same_end[] = {"cd", "abcd"};
    assert_true(ilab_text_stream_init(&ts, same_end, 2));
    assert_true(feed(&ts, pieces, 2, out, sizeof out, NULL));
    assert_string_equal(out, "x");
    ilab_text_stream_free(&ts);
}

static void no_stop_strings_text_passes_through(void **state)
{
    (void)state;
    ilab_text_stream ts;
    assert_true(ilab_text_stream_init(&ts, NULL, 0));
    const char *pieces[] = {"one ", "two", " three"};
    char out[32];
    assert_false(feed(&ts, pieces, 3, out, sizeof out, NULL));
    assert_string_equal(out, "one two three");
    ilab_text_stream_free(&ts);
}

static void utf8_code_points_are_never_split(void **state)
{
    (void)state;
    /* "é" = C3 A9, "€" = E2 82 AC, "😀" = F0 9F 98 80, fed one byte a time. */
    const char *text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";
    size_t n = strlen(text);
    ilab_text_stream ts;
    assert_true(ilab_text_stream_init(&ts, NULL, 0));
    char out[64];
    size_t len = 0;
    size_t expect_emit[] = {1, 0, 2, 0, 0, 3, 0, 0, 0, 4, 1};
    for (size_t i = 0; i < n; i++) {
        const char *d;
        size_t dl;
        assert_false(ilab_text_stream_push(&ts, text + i, 1, false, &d, &dl));
        assert_int_equal(dl, expect_emit[i]);
        memcpy(out + len, d, dl);
        len += dl;
    }
    assert_int_equal(len, n);
    assert_memory_equal(out, text, n);
    ilab_text_stream_free(&ts);
}

static void invalid_utf8_passes_through_and_flush_releases_partial(void **state)
{
    (void)state;
    assert_int_equal(ilab_utf8_incomplete_tail("\xE2\x82", 2), 2);
    assert_int_equal(ilab_utf8_incomplete_tail("\x80\x80", 2), 0);   /* stray continuations */
    assert_int_equal(ilab_utf8_incomplete_tail("ab\xFF", 3), 0);      /* never a lead byte */
    assert_int_equal(ilab_utf8_incomplete_tail("\xF0\x9F\x98", 3), 3);
    assert_int_equal(ilab_utf8_incomplete_tail("\xC3\xA9", 2), 0);

    ilab_text_stream ts;
    assert_true(ilab_text_stream_init(&ts, NULL, 0));
    const char *d;
    size_t dl;
    assert_false(ilab_text_stream_push(&ts, "x\xE2\x82", 3, false, &d, &dl));
    assert_int_equal(dl, 1);
    ilab_text_stream_flush(&ts, &d, &dl); /* generation ended mid code point */
    assert_int_equal(dl, 2);
    assert_memory_equal(d, "\xE2\x82", 2);
    ilab_text_stream_free(&ts);
}

/* The edges mutation testing found unchecked (scripts/mutations.tsv ts02
 * ts06): C0 and C1 can never start a character (overlong), so nothing is
 * held for them; an empty stop string is dropped, not matched at once. */
static void overlong_leads_and_empty_stop_strings(void **state)
{
    (void)state;
    assert_int_equal(ilab_utf8_incomplete_tail("a\xC0", 2), 0);
    assert_int_equal(ilab_utf8_incomplete_tail("a\xC1", 2), 0);
    assert_int_equal(ilab_utf8_incomplete_tail("a\xC2", 2), 1); /* U+0080's lead */

    ilab_text_stream ts;
    const char *stop[] = {"", "END"};
    assert_true(ilab_text_stream_init(&ts, stop, 2));
    const char *pieces[] = {"once ", "upon"};
    char out[64];
    assert_false(feed(&ts, pieces, 2, out, sizeof out, NULL));
    assert_string_equal(out, "once upon");
    ilab_text_stream_free(&ts);
}

static void final_push_releases_held_stop_prefix(void **state)
{
    (void)state;
    const char *stop[] = {"</s>"};
    ilab_text_stream ts;
    assert_true(ilab_text_stream_init(&ts, stop, 1));
    const char *d;
    size_t dl;
    assert_false(ilab_text_stream_push(&ts, "ok </", 5, false, &d, &dl));
    assert_int_equal(dl, 3);
    assert_false(ilab_text_stream_push(&ts, "s", 1, true, &d, &dl));
    assert_int_equal(dl, 3);
    assert_memory_equal(d, "</s", 3);
    ilab_text_stream_free(&ts);
}

/* Property check over many random streams: the concatenated deltas equal
 * the whole text cut at the earliest stop string (or all of it), and no
 * delta but a final flush ends inside a UTF-8 code point. */
static void random_streams_match_a_reference(void **state)
{
    (void)state;
    static const char *alphabet[] = {"a", "b", " ", "\n", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                     "ab", "ba"};
    uint64_t seed = 12345;
    for (int round = 0; round < 2000; round++) {
        char text[512];
        size_t text_len = 0;
        /* random text; split into random byte pieces */
        int n_sym = 1 + (int)((seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 59);
        for (int i = 0; i < n_sym * 3; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const char *s = alphabet[(seed >> 33) % (sizeof alphabet / sizeof alphabet[0])];
            memcpy(text + text_len, s, strlen(s));
            text_len += strlen(s);
        }
        /* the last two nest: "b a" ends inside "ab ab" */
        const char *stops[4] = {"ba ", "\xC3\xA9\n", "ab ab", "b a"};
        size_t n_stop = (size_t)(round % 5); /* 0 to 4 stop strings */
        ilab_text_stream ts;
        assert_true(ilab_text_stream_init(&ts, stops, n_stop));
        char out[1024];
        size_t out_len = 0, pos = 0;
        bool stopped = false;
        while (pos < text_len && !stopped) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            size_t len = 1 + (seed >> 61);
            if (len > text_len - pos)
                len = text_len - pos;
            const char *d;
            size_t dl;
            stopped = ilab_text_stream_push(&ts, text + pos, len, false, &d, &dl);
            memcpy(out + out_len, d, dl);
            out_len += dl;
            assert_int_equal(ilab_utf8_incomplete_tail(out, out_len), 0);
            pos += len;
        }
        if (!stopped) {
            const char *d;
            size_t dl;
            ilab_text_stream_flush(&ts, &d, &dl);
            memcpy(out + out_len, d, dl);
            out_len += dl;
        }
        /* reference: the shortest prefix holding a stop string, cut before
         * the longest one ending there */
        size_t cut = text_len;
        for (size_t end = 1; end <= text_len && cut == text_len; end++)
            for (size_t k = 0; k < n_stop; k++) {
                size_t sl = strlen(stops[k]);
                if (sl <= end && end - sl < cut && memcmp(text + end - sl, stops[k], sl) == 0)
                    cut = end - sl;
            }
        assert_int_equal(stopped, cut < text_len);
        assert_int_equal(out_len, cut);
        assert_memory_equal(out, text, cut);
        ilab_text_stream_free(&ts);
    }
}

static void metrics_render_names_every_series(void **state)
{
    (void)state;
    ilab_metrics_reset();
    ilab_metrics_observe_ttft(0.003);
    ilab_metrics_observe_itl(0.002);
    ilab_metrics_observe_e2e(0.5);
    ilab_metrics_add_prompt_tokens(7);
    ilab_metrics_add_generation_tokens(5);
    ilab_metrics_move_request(0, 6);  /* six submitted */
    ilab_metrics_move_request(3, -3); /* three admitted */
    ilab_metrics_end_request(ILAB_FINISH_LENGTH, -1, 0);
    ilab_metrics_add_kv_capacity(1000);
    ilab_metrics_add_kv_positions(250);
    char *text = ilab_metrics_render();
    assert_non_null(text);
    const char *expect[] = {
        "inferlab:time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n",
        "inferlab:time_to_first_token_seconds_bucket{le=\"0.001\"} 0\n",
        "inferlab:time_to_first_token_seconds_count 1\n",
        "inferlab:inter_token_latency_seconds_bucket{le=\"+Inf\"} 1\n",
        "inferlab:e2e_request_latency_seconds_sum 0.5\n",
        "inferlab:num_requests_running 2\n",
        "inferlab:num_requests_waiting 3\n",
        "inferlab:kv_cache_usage_ratio 0.25\n",
        "inferlab:prompt_tokens_total 7\n",
        "inferlab:generation_tokens_total 5\n",
        "inferlab:request_success_total{finished_reason=\"length\"} 1\n",
        "inferlab:request_success_total{finished_reason=\"stop\"} 0\n",
        "# TYPE inferlab:e2e_request_latency_seconds histogram\n",
    };
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        if (!strstr(text, expect[i]))
            fail_msg("missing from /metrics: %s", expect[i]);
    free(text);
    ilab_metrics_reset();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stop_string_across_token_boundaries_is_trimmed),
        cmocka_unit_test(held_prefix_is_released_when_it_cannot_be_a_stop),
        cmocka_unit_test(earliest_stop_wins),
        cmocka_unit_test(stop_ending_first_wins_inside_another),
        cmocka_unit_test(no_stop_strings_text_passes_through),
        cmocka_unit_test(utf8_code_points_are_never_split),
        cmocka_unit_test(invalid_utf8_passes_through_and_flush_releases_partial),
        cmocka_unit_test(final_push_releases_held_stop_prefix),
        cmocka_unit_test(overlong_leads_and_empty_stop_strings),
        cmocka_unit_test(random_streams_match_a_reference),
        cmocka_unit_test(metrics_render_names_every_series),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}

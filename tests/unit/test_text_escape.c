/* test_text_escape.c - generated text made safe for a terminal: control characters and bytes that
 * are not UTF-8 become \xNN, \n \t and well-formed characters pass unchanged, and a text cut into
 * pieces at every place (a character split between tokens) escapes as the whole text does. */
#include <stdlib.h> // malloc, free
#include <string.h> // memcmp, memset

#include "test_util.h"   // CHECK
#include "text_escape.h" // lz_text_escape

enum { POISON = 0x5A };

/* Escapes the pieces s[cut[k], cut[k+1]) one push each, then finishes; returns a malloc'd NUL-ended
 * result. Each output buffer starts poisoned, so a byte counted but never written shows. */
static char *escape_pieces(const char *s, size_t n, const size_t *cut, int n_cut) {
    char *all = malloc(LZ_TEXT_ESCAPE_BOUND(n) + 1), *room = malloc(LZ_TEXT_ESCAPE_BOUND(n));
    size_t o = 0, from = 0;
    lz_text_escape e = {.n_held = 0};
    for (int k = 0; k <= n_cut; k++) {
        const size_t to = k < n_cut ? cut[k] : n;
        memset(room, POISON, LZ_TEXT_ESCAPE_BOUND(to - from));
        const size_t w = lz_text_escape_push(&e, s + from, to - from, room);
        CHECK_MSG(w <= LZ_TEXT_ESCAPE_BOUND(to - from), "%zu bytes from %zu", w, to - from);
        memcpy(all + o, room, w);
        o += w, from = to;
    }
    memset(room, POISON, LZ_TEXT_ESCAPE_BOUND(0));
    const size_t w = lz_text_escape_finish(&e, room);
    CHECK(w <= LZ_TEXT_ESCAPE_BOUND(0) && e.n_held == 0);
    memcpy(all + o, room, w);
    all[o + w] = '\0';
    free(room);
    return all;
}

static void expect(const char *s, size_t n, const char *want) {
    char *got = escape_pieces(s, n, NULL, 0);
    CHECK_MSG(strcmp(got, want) == 0, "got '%s', want '%s'", got, want);
    free(got);
}
#define EXPECT(lit, want) expect(lit, sizeof(lit) - 1, want)

static void test_printable_unchanged(void) {
    EXPECT("Lizards bask.\n\tIn the sun \\x41 ~", "Lizards bask.\n\tIn the sun \\x41 ~");
    EXPECT("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\xA6\x8E \xC2\xA0|", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\xA6\x8E \xC2\xA0|");
    EXPECT("\xEF\xBF\xBD\xF4\x8F\xBF\xBF\xED\x9F\xBF", "\xEF\xBF\xBD\xF4\x8F\xBF\xBF\xED\x9F\xBF"); // the edges
}

static void test_controls(void) {
    EXPECT("a\x01" "b\x1B[31mc\rd\x7F" "e\a\b\v\f", "a\\x01b\\x1B[31mc\\x0Dd\\x7Fe\\x07\\x08\\x0B\\x0C");
    EXPECT("a\0b", "a\\x00b");
    EXPECT("\xC2\x9B" "2J\xC2\x80\xC2\x9F", "\\xC2\\x9B2J\\xC2\\x80\\xC2\\x9F"); // C1: CSI, PAD, APC
}

static void test_invalid(void) {
    EXPECT("\x80x\xFF\xFE", "\\x80x\\xFF\\xFE");                 // stray continuation, never-valid bytes
    EXPECT("\xC0\xAF\xE0\x80\xAF", "\\xC0\\xAF\\xE0\\x80\\xAF"); // overlong
    EXPECT("\xED\xA0\x80", "\\xED\\xA0\\x80");                   // a surrogate
    EXPECT("\xF4\x90\x80\x80", "\\xF4\\x90\\x80\\x80");          // beyond U+10FFFF
    EXPECT("\xF0\x9F\xA6" "a", "\\xF0\\x9F\\xA6a");              // truncated by a character
    EXPECT("\xE2\x82\xE2\x82\xAC", "\\xE2\\x82\xE2\x82\xAC");    // truncated by another start
    EXPECT("end \xF0\x9F\xA6", "end \\xF0\\x9F\\xA6");           // truncated by the end
}

/* Every cut into two and three pieces, and byte by byte, escapes as the whole does. */
static void test_pieces(void) {
    static const char s[] = "\xC3\xA9t\xC3\x1B\xE2\x82\xAC\xF0\x9F\xA6\x8E\xE2\x82\xC2\x9B\n\xF0\x9F\xA6\xF0\x9F\xA6\x8E"
                            "\xED\xA0\x80\xC3\xA9";
    const size_t n = sizeof s - 1;
    char *whole = escape_pieces(s, n, NULL, 0);
    CHECK_MSG(strcmp(whole, "\xC3\xA9t\\xC3\\x1B\xE2\x82\xAC\xF0\x9F\xA6\x8E\\xE2\\x82\\xC2\\x9B\n\\xF0\\x9F\\xA6"
                            "\xF0\x9F\xA6\x8E\\xED\\xA0\\x80\xC3\xA9") == 0, "whole: '%s'", whole);
    int differ = 0;
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            const size_t cut[2] = {a, b};
            char *got = escape_pieces(s, n, cut, 2);
            differ += strcmp(got, whole) != 0;
            free(got);
        }
    CHECK_MSG(differ == 0, "%d of the cuts into three pieces differ", differ);
    size_t bytes[sizeof s];
    for (size_t k = 0; k < n; k++)
        bytes[k] = k + 1;
    char *one_by_one = escape_pieces(s, n, bytes, (int)n);
    CHECK_MSG(strcmp(one_by_one, whole) == 0, "byte by byte: '%s'", one_by_one);
    free(one_by_one);
    free(whole);
}

/* A held start, then pieces that complete it or prove it invalid. */
static void test_held(void) {
    lz_text_escape e = {.n_held = 0};
    char out[64];
    memset(out, POISON, sizeof out);
    CHECK(lz_text_escape_push(&e, "ab\xF0\x9F", 4, out) == 2 && memcmp(out, "ab", 2) == 0 && e.n_held == 2);
    CHECK(lz_text_escape_push(&e, "", 0, out) == 0 && e.n_held == 2);
    CHECK(lz_text_escape_push(&e, "\xA6", 1, out) == 0 && e.n_held == 3);
    CHECK(lz_text_escape_push(&e, "\x8E!", 2, out) == 5 && memcmp(out, "\xF0\x9F\xA6\x8E!", 5) == 0 && e.n_held == 0);
    CHECK(lz_text_escape_push(&e, "\xC3", 1, out) == 0 && e.n_held == 1);
    CHECK(lz_text_escape_push(&e, "A", 1, out) == 5 && memcmp(out, "\\xC3A", 5) == 0 && e.n_held == 0);
    CHECK(lz_text_escape_push(&e, "\xE2\x82", 2, out) == 0);
    CHECK(lz_text_escape_finish(&e, out) == 8 && memcmp(out, "\\xE2\\x82", 8) == 0 && e.n_held == 0);
    CHECK(lz_text_escape_finish(&e, out) == 0);
}

/* The bound holds for the worst input: every byte escaped, with 3 held before. */
static void test_bound(void) {
    lz_text_escape e = {.n_held = 0};
    char worst[64], out[LZ_TEXT_ESCAPE_BOUND(64)];
    memset(worst, 0xFF, sizeof worst);
    CHECK(lz_text_escape_push(&e, "\xF0\x9F\xA6", 3, out) == 0 && e.n_held == 3);
    CHECK(lz_text_escape_push(&e, worst, sizeof worst, out) == 4 * (3 + sizeof worst));
}

int main(void) {
    test_printable_unchanged();
    test_controls();
    test_invalid();
    test_pieces();
    test_held();
    test_bound();
    return lz_test_finish("test_text_escape");
}

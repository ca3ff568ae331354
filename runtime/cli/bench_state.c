/* bench_state.c - `lizard bench --state`: how big one sequence's state is
 * as a session message (by layer kind) and how fast it moves, in GB/s of
 * message bytes: serialise (device -> packed SequenceState with its checksum,
 * in memory), restore (checks -> device, from memory), and the same through
 * a file (atomic write with fsync; read back), at each --context. */
#include <stdio.h>  // printf, fprintf, snprintf
#include <stdlib.h> // calloc, free, getenv, mkdtemp
#include <unistd.h> // unlink, rmdir

#include "bench_state.h"
#include "clock.h"       // lz_now_seconds
#include "median.h"      // lz_median
#include "session_buf.h" // lz_session_save_slot, lz_session_view
#include "state_io.h"    // lz_state_io_restore

enum { REPEATS = 5 };
enum { SERIALISE, RESTORE, FILE_SAVE, FILE_LOAD, PHASES };
static const char *phase_names[PHASES] = {"serialise", "restore", "file_save", "file_load"};

/* Device -> message in b. */
static lz_status serialise(const lz_model *m, const lz_state *st, int32_t *tokens, int context, lz_session_buf *b) {
    Lizard__SequenceState msg = LIZARD__SEQUENCE_STATE__INIT;
    msg.position = (uint64_t)context;
    msg.n_tokens = (size_t)context;
    msg.tokens = tokens;
    return lz_session_save_slot(m, st, 0, false, &msg, b);
}

/* Message in b -> device, every check on the way. */
static lz_status restore(const lz_model *m, lz_state *st, const lz_session_buf *b, int context) {
    Lizard__SequenceState *msg = NULL;
    LZ_TRY(lz_session_view(b->data, b->len, "bench state", NULL, &msg));
    lz_status s = msg->n_stages == 1 ? LZ_OK : lz_fail(LZ_ERR_INTERNAL, "bench state: %zu stages", msg->n_stages);
    if (s == LZ_OK)
        s = lz_state_io_restore(m, st, 0, (uint64_t)context, msg->stages[0]->layers, msg->stages[0]->n_layers);
    lz_session_view_free(msg);
    return s;
}

/* One round of the four phases, each timed into t[phase]. */
static lz_status round_trip(const lz_model *m, lz_state *st, int32_t *tokens, int context, const char *path,
                            lz_session_buf *b, double t[PHASES]) {
    double t0 = lz_now_seconds();
    LZ_TRY(serialise(m, st, tokens, context, b));
    t[SERIALISE] = lz_now_seconds() - t0;
    t0 = lz_now_seconds();
    LZ_TRY(restore(m, st, b, context));
    t[RESTORE] = lz_now_seconds() - t0;
    t0 = lz_now_seconds();
    LZ_TRY(serialise(m, st, tokens, context, b));
    LZ_TRY(lz_session_write_file(path, b->data, b->len));
    t[FILE_SAVE] = lz_now_seconds() - t0;
    t0 = lz_now_seconds();
    LZ_TRY(lz_session_buf_read_file(path, b));
    LZ_TRY(restore(m, st, b, context));
    t[FILE_LOAD] = lz_now_seconds() - t0;
    return LZ_OK;
}

/* Message bytes by layer kind: [0] softmax KV, [1] Lizard. */
static lz_status kind_bytes(const lz_session_buf *b, size_t out[2]) {
    Lizard__SequenceState *msg = NULL;
    LZ_TRY(lz_session_view(b->data, b->len, "bench state", NULL, &msg));
    out[0] = out[1] = 0;
    for (size_t i = 0; i < msg->stages[0]->n_layers; i++) {
        const Lizard__LayerState *l = msg->stages[0]->layers[i];
        out[l->kind == LIZARD__LAYER_STATE__KIND__SOFTMAX ? 0 : 1] += l->k.len + l->v.len + l->s.len + l->z.len;
    }
    lz_session_view_free(msg);
    return LZ_OK;
}

static void report(int context, size_t len, const size_t kinds[2], double rate[PHASES], FILE *json) {
    printf("state   context %7d  message %10zu bytes (softmax KV %zu, Lizard %zu)  GB/s: serialise %6.2f  restore "
           "%6.2f  file save %6.2f  file load %6.2f\n",
           context, len, kinds[0], kinds[1], rate[SERIALISE], rate[RESTORE], rate[FILE_SAVE], rate[FILE_LOAD]);
    if (!json)
        return;
    fprintf(json, "{\"kind\": \"state\", \"context\": %d, \"message_bytes\": %zu, \"softmax_bytes\": %zu, "
                  "\"lizard_bytes\": %zu", context, len, kinds[0], kinds[1]);
    for (int p = 0; p < PHASES; p++)
        fprintf(json, ", \"%s_gb_s\": %.3f", phase_names[p], rate[p]);
    fprintf(json, "}\n");
}

/* The medians of REPEATS rounds (after one untimed: the buffer and the file's pages in place). */
static lz_status measure(const lz_model *m, lz_state *st, int32_t *tokens, int context, const char *path,
                         lz_session_buf *b, FILE *json) {
    double t[REPEATS][PHASES], warm[PHASES];
    LZ_TRY(round_trip(m, st, tokens, context, path, b, warm));
    for (int r = 0; r < REPEATS; r++)
        LZ_TRY(round_trip(m, st, tokens, context, path, b, t[r]));
    size_t kinds[2];
    LZ_TRY(kind_bytes(b, kinds));
    double rate[PHASES];
    for (int p = 0; p < PHASES; p++) {
        double col[REPEATS];
        for (int r = 0; r < REPEATS; r++)
            col[r] = t[r][p];
        rate[p] = (double)b->len / lz_median(col, REPEATS) / 1e9;
    }
    report(context, b->len, kinds, rate, json);
    return LZ_OK;
}

lz_status lz_bench_state(const lz_model *m, int context, FILE *json) {
    lz_state st;
    lz_status s = lz_state_create(&st, m, 1, context + 1);
    if (s != LZ_OK) {
        printf("state   context %7d  does not fit: %s\n", context, lz_error_message());
        lz_error_clear();
        return LZ_OK;
    }
    st.slot_pos[0] = context; // as if `context` tokens were prefilled: the message has their size
    int32_t *tokens = calloc((size_t)context + 1, sizeof(int32_t));
    const char *tmp = getenv("TMPDIR");
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/lizard-bench-state-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    const bool have_dir = mkdtemp(dir) != NULL;
    snprintf(path, sizeof path, "%s/state.lzs", dir);
    lz_session_buf b;
    lz_session_buf_init(&b, m);
    s = !tokens ? lz_fail(LZ_ERR_NOMEM, "bench: out of memory")
        : !have_dir ? lz_fail(LZ_ERR_IO, "bench: cannot make a temp folder under %s", tmp && *tmp ? tmp : "/tmp")
                    : measure(m, &st, tokens, context, path, &b, json);
    if (have_dir) {
        unlink(path);
        rmdir(dir);
    }
    if (s == LZ_ERR_INPUT) { // too big for a message: say so, and go on with the other contexts
        printf("state   context %7d  refused: %s\n", context, lz_error_message());
        lz_error_clear();
        s = LZ_OK;
    }
    lz_session_buf_free(&b);
    free(tokens);
    lz_state_free(&st, m);
    return s;
}

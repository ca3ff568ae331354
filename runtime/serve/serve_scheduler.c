/* serve_scheduler.c - continuous batching (see serve_scheduler.h). */
#include "serve_scheduler.h"

#include <stdio.h>  // fprintf, snprintf
#include <stdlib.h> // malloc, calloc, realloc, free
#include <string.h> // memcpy, strcmp
#include <time.h>   // clock_gettime

#include "clock.h"          // lz_now_seconds
#include "engine_session.h" // lz_engine_save_stages, lz_engine_restore_stages
#include "session_chunks.h" // lz_session_pack_any
#include "session_file.h"   // lz_session_parse

static bool on_token(void *ctx, int slot, int32_t id, lz_gen_end end);
static void on_logits(void *ctx, int slot, float *logits);
static void on_fail(void *ctx, int slot);

lz_status serve_scheduler_init(serve_scheduler *s, lz_engine *e, const char *model_dir,
                               const lz_generation_config *gen, serve_metrics *metrics,
                               const serve_scheduler_options *opt) {
    memset(s, 0, sizeof *s);
    s->e = e;
    s->model_dir = model_dir;
    s->gen = gen;
    s->metrics = metrics;
    s->max_batch = opt->max_batch;
    s->prefix_min_tokens = opt->prefix_min_tokens;
    s->drain_timeout = opt->drain_timeout;
    s->q_cap = opt->queue_size;
    for (int i = 0; i < lz_engine_config(e)->num_hidden_layers; i++)
        s->context_bounded |= lz_engine_config(e)->softmax_layer[i];
    lz_session_fingerprint(&e->model, model_dir, s->fingerprint);
    s->queue = calloc((size_t)s->q_cap, sizeof(serve_job *));
    s->seqs = calloc((size_t)opt->max_batch, sizeof(serve_seq));
    if (!s->queue || !s->seqs) {
        serve_scheduler_free(s);
        return lz_fail(LZ_ERR_NOMEM, "lizard serve: out of memory for %d sequences", opt->max_batch);
    }
    if (pthread_mutex_init(&s->mu, NULL) != 0 || pthread_cond_init(&s->wake, NULL) != 0) {
        serve_scheduler_free(s);
        return lz_fail(LZ_ERR_INTERNAL, "lizard serve: cannot create the queue's lock");
    }
    const lz_gen_callbacks cb = {on_token, on_logits, on_fail, s};
    lz_status st = lz_gen_init(&s->loop, e, gen, &cb);
    s->loop.prefill_budget = e->opt.prefill_chunk; // decoding sequences wait one step at most
    if (st == LZ_OK)
        st = serve_sessions_init(&s->sessions, opt->session_memory, opt->session_dir);
    if (st == LZ_OK)
        st = serve_prefix_init(&s->prefix, opt->prefix_entries);
    if (st != LZ_OK)
        serve_scheduler_free(s);
    return st;
}

static void free_seq(serve_scheduler *s, int slot) {
    serve_seq *q = &s->seqs[slot];
    lz_gen_stop(&s->loop, slot);
    free(q->feed);
    free(q->history);
    free(q->session_backup);
    *q = (serve_seq){0};
}

void serve_scheduler_free(serve_scheduler *s) {
    for (int i = 0; s->queue && i < s->q_len; i++)
        serve_job_release(s->queue[i]);
    for (int i = 0; s->seqs && i < s->max_batch; i++) {
        serve_job_release(s->seqs[i].job);
        free_seq(s, i);
    }
    serve_sessions_free(&s->sessions);
    serve_prefix_free(&s->prefix);
    lz_gen_free(&s->loop);
    free(s->queue), free(s->seqs);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    memset(s, 0, sizeof *s);
}

int serve_scheduler_submit(serve_scheduler *s, serve_job *j) {
    pthread_mutex_lock(&s->mu);
    int status = s->draining ? 503 : s->q_len == s->q_cap ? 429 : 0;
    if (status == 0) {
        pthread_mutex_lock(&j->mu);
        j->refs++;
        pthread_mutex_unlock(&j->mu);
        s->queue[s->q_len++] = j;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    return status;
}

/* ---- one sequence ------------------------------------------------------- */

static lz_status history_add(serve_seq *q, const int32_t *ids, int n) {
    if (q->n_history + n > q->cap_history) {
        const int cap = (q->n_history + n) * 2 + 16;
        int32_t *grown = realloc(q->history, sizeof(int32_t) * (size_t)cap);
        if (!grown)
            return lz_fail(LZ_ERR_NOMEM, "sequence history: out of memory");
        q->history = grown, q->cap_history = cap;
    }
    if (n > 0)
        memcpy(q->history + q->n_history, ids, sizeof(int32_t) * (size_t)n);
    q->n_history += n;
    return LZ_OK;
}

/* The engine's message after a failed call, as a job's error; the slot is emptied. */
static void fail_seq(serve_scheduler *s, int slot, int http_status, const char *type, const char *code) {
    serve_seq *q = &s->seqs[slot];
    serve_job_fail(q->job, http_status, type, code, "%s", lz_error_message());
    lz_error_clear();
    if (q->session_backup) { // the session is as it was before this request
        serve_sessions_put_back(&s->sessions, q->job->session, q->session_backup, q->session_backup_len);
        q->session_backup = NULL;
    }
    serve_job_release(q->job);
    free_seq(s, slot);
}

/* A stored session of either format (one message or chunked) into `slot`;
 * *saved may point into buf, which must outlive it. */
static lz_status restore_packed(serve_scheduler *s, int slot, const uint8_t *buf, size_t len, const char *what,
                                lz_session_loaded *saved) {
    LZ_TRY(lz_session_parse(buf, len, what, s->fingerprint, saved));
    lz_status st = lz_engine_restore_stages(s->e, slot, saved->msg);
    if (st != LZ_OK)
        lz_session_loaded_free(saved);
    return st;
}

/* feed = the saved sequence's pending token, what closes its turn (chat, when
 * it did not end at eos), then the new prompt; history = the saved tokens. */
static lz_status continue_session(const serve_scheduler *s, serve_seq *q, const Lizard__SequenceState *saved) {
    const serve_job *j = q->job;
    const bool pending = saved->has_pending && saved->n_tokens > 0;
    const int32_t last = pending ? saved->tokens[saved->n_tokens - 1] : -1;
    const bool close_turn = pending && !lz_generation_config_is_eos(s->gen, last);
    const int32_t *prompt = j->prompt_cont ? j->prompt_cont : j->prompt;
    const int n_prompt = j->prompt_cont ? j->n_prompt_cont : j->n_prompt;
    q->n_feed = (pending ? 1 : 0) + (close_turn ? j->n_turn_end : 0) + n_prompt;
    q->feed = malloc(sizeof(int32_t) * (size_t)(q->n_feed ? q->n_feed : 1));
    if (!q->feed)
        return lz_fail(LZ_ERR_NOMEM, "session %s: out of memory", serve_session_shown(j->session));
    int at = 0;
    if (pending)
        q->feed[at++] = last;
    if (close_turn && j->n_turn_end > 0)
        memcpy(q->feed + at, j->turn_end, sizeof(int32_t) * (size_t)j->n_turn_end), at += j->n_turn_end;
    if (n_prompt > 0)
        memcpy(q->feed + at, prompt, sizeof(int32_t) * (size_t)n_prompt);
    return history_add(q, (const int32_t *)saved->tokens, (int)saved->n_tokens - (pending ? 1 : 0));
}

/* A fresh sequence: from a cached prefix of its prompt, else from nothing. */
static lz_status start_fresh(serve_scheduler *s, serve_seq *q, int slot, int *cached) {
    const serve_job *j = q->job;
    int from = 0;
    if (s->prefix.cap > 0) {
        const serve_prefix_entry *hit = serve_prefix_find(&s->prefix, j->prompt, j->n_prompt);
        lz_session_loaded msg;
        if (hit && restore_packed(s, slot, hit->buf, hit->len, "prefix cache", &msg) == LZ_OK) {
            from = hit->n;
            lz_session_loaded_free(&msg);
        } else if (hit) {
            lz_error_clear(); // a cached state that does not restore is a miss
        }
        serve_metrics_prefix(s->metrics, from > 0);
        q->cache_prompt = j->n_prompt >= s->prefix_min_tokens && !serve_prefix_has(&s->prefix, j->prompt, j->n_prompt);
    }
    if (from == 0)
        LZ_TRY(lz_engine_reset_slot(s->e, slot));
    *cached = from;
    q->n_feed = j->n_prompt - from;
    q->feed = malloc(sizeof(int32_t) * (size_t)(q->n_feed ? q->n_feed : 1));
    if (!q->feed)
        return lz_fail(LZ_ERR_NOMEM, "prompt: out of memory");
    memcpy(q->feed, j->prompt + from, sizeof(int32_t) * (size_t)q->n_feed);
    return history_add(q, j->prompt, from);
}

/* Every id a sequence is fed must be one of the model's: a bad one fails this
 * sequence alone here, where it would otherwise fail the whole batched step. */
static lz_status check_feed(const serve_scheduler *s, const serve_seq *q) {
    const int V = lz_engine_config(s->e)->vocab_size;
    for (int i = 0; i < q->n_feed; i++)
        if (q->feed[i] < 0 || q->feed[i] >= V)
            return lz_fail(LZ_ERR_INPUT, "prompt: token %d is not in the model's vocabulary (vocab_size %d)",
                           q->feed[i], V);
    return LZ_OK;
}

/* Places a queued job in `slot`: its state, what to feed, its sampler. */
static void admit(serve_scheduler *s, int slot, serve_job *j) {
    serve_seq *q = &s->seqs[slot];
    *q = (serve_seq){.job = j};
    lz_status st = LZ_OK;
    lz_session_loaded loaded = {NULL, NULL, false}; // points into q->session_backup
    int cached = 0;
    if (j->session)
        st = serve_sessions_take(&s->sessions, j->session, &q->session_backup, &q->session_backup_len);
    if (st == LZ_OK && q->session_backup)
        st = restore_packed(s, slot, q->session_backup, q->session_backup_len, serve_session_shown(j->session),
                            &loaded);
    const Lizard__SequenceState *saved = loaded.msg;
    if (st == LZ_OK)
        st = saved ? continue_session(s, q, saved) : start_fresh(s, q, slot, &cached);
    const int position = saved ? (int)saved->position : cached;
    lz_session_loaded_free(&loaded);
    if (st == LZ_OK)
        st = check_feed(s, q);
    lz_gen_seq seq = {.feed = q->feed, .n_feed = q->n_feed, .max_tokens = j->max_tokens, .ignore_eos = j->ignore_eos,
                      .host_logits = j->n_logit_bias > 0};
    if (st == LZ_OK)
        st = lz_sampler_init(&seq.sampler, &j->sampling, lz_engine_config(s->e)->vocab_size);
    if (st != LZ_OK)
        return fail_seq(s, slot, st == LZ_ERR_INPUT ? 400 : 500, st == LZ_ERR_INPUT ? "invalid_request_error" : "server_error", NULL);
    if (q->n_feed == 0) {
        lz_fail(LZ_ERR_INPUT, "prompt: no tokens to feed (an empty prompt and nothing pending in session %s)",
                j->session ? serve_session_shown(j->session) : "-");
        return fail_seq(s, slot, 400, "invalid_request_error", NULL);
    }
    if (s->context_bounded && (long)position + q->n_feed + j->max_tokens > s->e->opt.max_context) {
        lz_fail(LZ_ERR_INPUT, "context: %d held + %d prompt + %d max_tokens tokens exceed the %d the server keeps "
                "(--max-context)", position, q->n_feed, j->max_tokens, s->e->opt.max_context);
        return fail_seq(s, slot, 400, "invalid_request_error", "context_length_exceeded");
    }
    if (lz_gen_start(&s->loop, slot, seq) != LZ_OK)
        return fail_seq(s, slot, 500, "server_error", NULL);
    serve_job_admitted(j, q->n_feed + cached, cached);
    serve_metrics_tokens(s->metrics, q->n_feed + cached, 0);
}

/* The state of a finished sequence under its session name: every token, the
 * last sampled one pending (not yet fed), as `lizard generate --session` does. */
static lz_status save_session(serve_scheduler *s, int slot) {
    serve_seq *q = &s->seqs[slot];
    Lizard__SequenceState msg = LIZARD__SEQUENCE_STATE__INIT;
    Lizard__SamplerState sampling;
    lz_session_sampler_save(&msg, &sampling, &s->loop.seqs[slot].sampler);
    msg.fingerprint = (ProtobufCBinaryData){LZ_FINGERPRINT_BYTES, s->fingerprint};
    msg.position = (uint64_t)lz_engine_position(s->e, slot);
    msg.tokens = q->history;
    msg.n_tokens = (size_t)q->n_history;
    msg.has_pending = s->loop.seqs[slot].n_generated > 0;
    uint8_t *buf = NULL;
    size_t len = 0;
    lz_status st = lz_engine_save_stages(s->e, slot, &msg);
    if (st == LZ_OK) // chunked beyond 2 GiB: the bytes of a version-3 file
        st = lz_session_pack_any(&msg, &buf, &len);
    lz_engine_free_stages(&msg);
    if (st == LZ_OK)
        st = serve_sessions_put(&s->sessions, q->job->session, buf, len);
    else
        free(buf);
    return st;
}

static void finish_seq(serve_scheduler *s, int slot, bool at_eos) {
    serve_seq *q = &s->seqs[slot];
    if (q->job->session) {
        if (save_session(s, slot) != LZ_OK)
            return fail_seq(s, slot, 500, "server_error", "session_not_saved");
        free(q->session_backup); // superseded
        q->session_backup = NULL;
    }
    serve_metrics_observe(s->metrics, &s->metrics->latency, lz_now_seconds() - q->job->t_submit);
    serve_job_finish(q->job, at_eos);
    serve_job_release(q->job);
    free_seq(s, slot);
}

/* The state at the prompt's end, for prompts that extend it (the cache is
 * an optimisation: the request goes on without it). */
static void cache_prompt(serve_scheduler *s, int slot) {
    const serve_job *j = s->seqs[slot].job;
    Lizard__SequenceState msg = LIZARD__SEQUENCE_STATE__INIT;
    msg.fingerprint = (ProtobufCBinaryData){LZ_FINGERPRINT_BYTES, s->fingerprint};
    msg.position = (uint64_t)lz_engine_position(s->e, slot);
    msg.tokens = j->prompt;
    msg.n_tokens = (size_t)j->n_prompt;
    uint8_t *buf = NULL;
    size_t len = 0;
    lz_status st = lz_engine_save_stages(s->e, slot, &msg);
    if (st == LZ_OK)
        st = lz_session_pack(&msg, &buf, &len);
    lz_engine_free_stages(&msg);
    if (st == LZ_OK)
        st = serve_prefix_put(&s->prefix, j->prompt, j->n_prompt, buf, len);
    else
        free(buf);
    if (st != LZ_OK)
        lz_error_clear();
}

/* A new token of the sequence in `slot`: to its job, then on or done. */
static bool on_token(void *ctx, int slot, int32_t id, lz_gen_end end) {
    serve_scheduler *s = ctx;
    serve_seq *q = &s->seqs[slot];
    const bool first = s->loop.seqs[slot].n_generated == 1; // its prompt is all fed
    if (first && history_add(q, q->feed, q->n_feed) != LZ_OK)
        return fail_seq(s, slot, 500, "server_error", NULL), false;
    if (first && q->cache_prompt)
        cache_prompt(s, slot);
    const double now = lz_now_seconds();
    serve_metrics_observe(s->metrics, first ? &s->metrics->ttft : &s->metrics->itl,
                          now - (first ? q->job->t_submit : q->t_last));
    serve_metrics_tokens(s->metrics, 0, 1);
    q->t_last = now;
    if (history_add(q, &id, 1) != LZ_OK)
        return fail_seq(s, slot, 500, "server_error", NULL), false;
    if (!serve_job_push(q->job, id)) {
        serve_job_release(q->job); // the push failed the job
        free_seq(s, slot);
        return false;
    }
    if (end != LZ_GEN_GOES_ON || serve_job_cancelled(q->job))
        return finish_seq(s, slot, end == LZ_GEN_EOS), false;
    return true;
}

static void on_logits(void *ctx, int slot, float *logits) {
    serve_job_bias_logits(((serve_scheduler *)ctx)->seqs[slot].job, logits);
}

static void on_fail(void *ctx, int slot) { fail_seq(ctx, slot, 500, "server_error", NULL); }

/* ---- the loop ------------------------------------------------------------ */

static bool session_busy(const serve_scheduler *s, const char *name) {
    for (int i = 0; name && i < s->max_batch; i++)
        if (s->seqs[i].job && s->seqs[i].job->session && strcmp(s->seqs[i].job->session, name) == 0)
            return true;
    return false;
}

/* Queued jobs into free slots, in order; a job whose session is in use waits. */
static void admit_queued(serve_scheduler *s) {
    serve_job *taken[s->max_batch > 0 ? s->max_batch : 1];
    int slots[s->max_batch > 0 ? s->max_batch : 1], n = 0, free_slot = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->q_len;) {
        while (free_slot < s->max_batch && s->seqs[free_slot].job)
            free_slot++;
        if (free_slot == s->max_batch)
            break;
        serve_job *j = s->queue[i];
        bool busy = session_busy(s, j->session);
        for (int k = 0; !busy && k < n; k++)
            busy = j->session && taken[k]->session && strcmp(taken[k]->session, j->session) == 0;
        if (busy) {
            i++;
            continue;
        }
        memmove(s->queue + i, s->queue + i + 1, sizeof(serve_job *) * (size_t)(s->q_len - i - 1));
        s->q_len--;
        taken[n] = j;
        slots[n++] = free_slot;
        s->seqs[free_slot].job = j; // reserved until admit() fills it
    }
    pthread_mutex_unlock(&s->mu);
    for (int k = 0; k < n; k++) {
        if (serve_job_cancelled(taken[k])) { // the client left while it waited
            serve_job_finish(taken[k], false);
            serve_job_release(taken[k]);
            s->seqs[slots[k]].job = NULL;
            continue;
        }
        admit(s, slots[k], taken[k]);
    }
}

/* Jobs cancelled (the client left, or a stop string matched): one whose
 * prompt is still being fed fails (its session stays as it was), one that is
 * generating finishes with what it has. */
static void drop_cancelled(serve_scheduler *s) {
    for (int i = 0; i < s->max_batch; i++) {
        if (!s->seqs[i].job || !serve_job_cancelled(s->seqs[i].job))
            continue;
        if (!lz_gen_prefilling(&s->loop, i)) {
            finish_seq(s, i, false);
            continue;
        }
        lz_fail(LZ_ERR_INPUT, "cancelled by the client");
        fail_seq(s, i, 499, "invalid_request_error", "cancelled");
    }
}

static int running(const serve_scheduler *s) {
    int n = 0;
    for (int i = 0; i < s->max_batch; i++)
        n += s->seqs[i].job != NULL;
    return n;
}

static void publish_gauges(serve_scheduler *s, int queued) {
    size_t bytes = 0;
    int n = 0;
    for (int i = 0; i < s->max_batch; i++)
        if (s->seqs[i].job) {
            const lz_state_bytes b = lz_state_bytes_at(&s->e->model, lz_engine_position(s->e, i));
            bytes += b.softmax_kv + b.lizard_gla + b.lizard_window;
            n++;
        }
    serve_metrics_gauges(s->metrics, queued, n, bytes);
    serve_metrics_sessions(s->metrics, s->sessions.n, s->sessions.on_disk, s->sessions.bytes);
}

/* Sleeps until a job arrives or 100 ms pass (to notice *stop). */
static int wait_for_work(serve_scheduler *s, volatile sig_atomic_t *stop) {
    pthread_mutex_lock(&s->mu);
    if (*stop && !s->draining) {
        s->draining = true;
        fprintf(stderr, "lizard serve: draining: %d running, %d queued; they go on for up to %g s (--drain-timeout), "
                "a second signal ends them now\n", running(s), s->q_len, s->drain_timeout);
    }
    if (s->q_len == 0 && running(s) == 0 && !s->draining) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L)
            until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->wake, &s->mu, &until); // a timeout is fine: we look again
    }
    const int queued = s->q_len;
    pthread_mutex_unlock(&s->mu);
    return queued;
}

/* The end of a drain: queued jobs get 503, prefilling ones fail the same way
 * (their sessions stay as they were), generating ones finish with what they
 * have (finish_reason "length"; their sessions are saved). */
static void end_all(serve_scheduler *s, const char *why) {
    pthread_mutex_lock(&s->mu);
    const int queued = s->q_len;
    for (int i = 0; i < s->q_len; i++) {
        serve_job_fail(s->queue[i], 503, "server_error", "shutting_down", "the server shut down (%s) before this "
                       "request started", why);
        serve_job_release(s->queue[i]);
    }
    s->q_len = 0;
    pthread_mutex_unlock(&s->mu);
    int cut = 0;
    for (int i = 0; i < s->max_batch; i++) {
        serve_seq *q = &s->seqs[i];
        if (!q->job)
            continue;
        cut++;
        if (!lz_gen_prefilling(&s->loop, i)) {
            finish_seq(s, i, false);
            continue;
        }
        lz_fail(LZ_ERR_INTERNAL, "the server shut down (%s) before this prompt was read", why);
        fail_seq(s, i, 503, "server_error", "shutting_down");
    }
    fprintf(stderr, "lizard serve: %s: %d running sequences ended, %d queued requests refused\n", why, cut, queued);
}

static void step_mark(serve_scheduler *s, bool begins) {
    pthread_mutex_lock(&s->mu);
    s->step_since = begins ? lz_now_seconds() : 0;
    pthread_mutex_unlock(&s->mu);
}

double serve_scheduler_step_seconds(serve_scheduler *s) {
    pthread_mutex_lock(&s->mu);
    const double since = s->step_since;
    pthread_mutex_unlock(&s->mu);
    return since > 0 ? lz_now_seconds() - since : 0;
}

lz_status serve_scheduler_run(serve_scheduler *s, volatile sig_atomic_t *stop) {
    double deadline = 0; // of the drain, once it began
    for (;;) {
        const int queued = wait_for_work(s, stop);
        if (s->draining && deadline == 0)
            deadline = lz_now_seconds() + s->drain_timeout;
        step_mark(s, true);
        if (s->draining && (*stop >= 2 || lz_now_seconds() >= deadline))
            end_all(s, *stop >= 2 ? "a second signal" : "--drain-timeout");
        pthread_mutex_lock(&s->mu);
        const bool over = s->draining && s->q_len == 0 && running(s) == 0;
        pthread_mutex_unlock(&s->mu);
        if (over) {
            step_mark(s, false);
            break;
        }
        if (queued > 0)
            admit_queued(s);
        drop_cancelled(s);
        if (lz_gen_round(&s->loop) != LZ_OK) // a failed step has failed its jobs already
            lz_error_clear();
        step_mark(s, false);
        pthread_mutex_lock(&s->mu);
        const int left = s->q_len;
        pthread_mutex_unlock(&s->mu);
        publish_gauges(s, left);
    }
    lz_status st = serve_sessions_flush(&s->sessions);
    publish_gauges(s, 0);
    return st;
}

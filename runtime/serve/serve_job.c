/* serve_job.c - the request shared by an HTTP thread and the engine thread. */
#include "serve_job.h"

#include <stdarg.h> // va_list
#include <stdio.h>  // vsnprintf
#include <stdlib.h> // calloc, realloc, free

serve_job *serve_job_new(void) {
    serve_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    if (pthread_mutex_init(&j->mu, NULL) != 0) {
        free(j);
        return NULL;
    }
    if (pthread_cond_init(&j->cond, NULL) != 0) {
        pthread_mutex_destroy(&j->mu);
        free(j);
        return NULL;
    }
    j->refs = 1;
    return j;
}

void serve_job_release(serve_job *j) {
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    const int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0)
        return;
    pthread_cond_destroy(&j->cond);
    pthread_mutex_destroy(&j->mu);
    free(j->prompt);
    free(j->prompt_cont);
    free(j->turn_end);
    free(j->session);
    free(j->logit_bias);
    free(j->tokens);
    free(j);
}

void serve_job_admitted(serve_job *j, int prompt_tokens, int cached_tokens) {
    pthread_mutex_lock(&j->mu);
    j->admitted = true;
    j->prompt_tokens = prompt_tokens;
    j->cached_tokens = cached_tokens;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->mu);
}

bool serve_job_push(serve_job *j, int32_t id) {
    pthread_mutex_lock(&j->mu);
    bool ok = true;
    if (j->n_tokens == j->cap_tokens) {
        const int cap = j->cap_tokens ? 2 * j->cap_tokens : 64;
        int32_t *grown = realloc(j->tokens, sizeof(int32_t) * (size_t)cap);
        if (grown)
            j->tokens = grown, j->cap_tokens = cap;
        ok = grown != NULL;
    }
    if (ok)
        j->tokens[j->n_tokens++] = id;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->mu);
    if (!ok)
        serve_job_fail(j, 500, "server_error", NULL, "out of memory for generated tokens");
    return ok;
}

void serve_job_finish(serve_job *j, bool stopped_at_eos) {
    pthread_mutex_lock(&j->mu);
    j->done = true;
    j->stopped_at_eos = stopped_at_eos;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->mu);
}

void serve_job_bias_logits(const serve_job *j, float *logits) {
    for (int i = 0; i < j->n_logit_bias; i++)
        logits[j->logit_bias[i].id] += j->logit_bias[i].bias;
}

void serve_job_fail(serve_job *j, int http_status, const char *type, const char *code, const char *fmt, ...) {
    pthread_mutex_lock(&j->mu);
    if (!j->failed) {
        j->failed = j->done = true;
        j->http_status = http_status;
        j->error_type = type;
        j->error_code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->error, sizeof j->error, fmt, ap);
        va_end(ap);
    }
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->mu);
}

bool serve_job_cancelled(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    const bool c = j->cancel;
    pthread_mutex_unlock(&j->mu);
    return c;
}

void serve_job_cancel(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    j->cancel = true;
    pthread_mutex_unlock(&j->mu);
}

/* finetune_pipeline.c - a fine-tuning batch as micro-batches through the
 * ranks (finetune_run.h): under mpirun -np P rank r runs a contiguous range of
 * layers; the micro-batches are scheduled 1F1B (rank r runs P - 1 - r
 * forwards ahead, then one forward and one backward in turn, then the
 * remaining backwards): hidden states go forward and their gradients back,
 * through host memory and MPI (handoff.h; each send goes without waiting, so
 * that two ranks sending to each other never wait on each other). One process
 * is the pipeline of one rank: forward, head, backward of each micro-batch.
 *
 * Every sum that crosses ranks is made in a fixed order (each tensor's
 * gradient by its owner over the micro-batches in order, the loss on the last
 * rank in order, the gradient norm from per-tensor sums), so with the same
 * micro-batches P ranks give one process's numbers: bit for bit on the CPU,
 * to rounding on a GPU. */
#include <math.h>   // sqrt, isfinite
#include <stdlib.h> // calloc, free

#include "finetune_run.h"
#include "handoff.h"   // lz_handoff_send, lz_handoff_recv, lz_handoff_wait
#include "mpi_world.h" // lz_world_sum, lz_world_broadcast, LZ_TAG_*

void lz_ft_stage_range(int n_layers, int size, int rank, int *first, int *last) {
    const int base = n_layers / size, extra = n_layers % size; // the first `extra` ranks take one more
    *first = rank * base + (rank < extra ? rank : extra);
    *last = *first + base + (rank < extra ? 1 : 0);
}

enum { FORWARD, BACKWARD, DIRECTIONS };

typedef struct {
    lz_finetune_run *r;
    lz_ft_model *m;
    int rank, size, M;
    const int32_t *ids; /* [batch, T] */
    bool learn;
    long step;
    float grad_scale;
    double loss;                         /* the last rank's sum, in order */
    lz_batch b;                          /* the micro-batch's shape (every micro-batch has it) */
    float *staging;                      /* host fp32 [N, C] for receives */
    MPI_Request req[DIRECTIONS];         /* the send in flight in each direction */
    float *sent[DIRECTIONS];             /* its private host copy */
} schedule;

static size_t values(const schedule *s) { return (size_t)s->b.n_tokens * s->m->cfg.hidden_size; }

static lz_handoff handoff_of(schedule *s, int dir) {
    return (lz_handoff){.ops = s->m->ops, .be = s->m->be, .f32 = dir == BACKWARD, .staging = s->staging,
                        .pending = &s->req[dir], .pending_buf = &s->sent[dir]};
}

static int tag_of(int dir) { return dir == BACKWARD ? LZ_TAG_GRADIENTS : LZ_TAG_ACTIVATIONS; }

/* Waits for the send in flight in direction dir and frees its copy. */
static lz_status finish_send(schedule *s, int dir) {
    const int to = dir == BACKWARD ? s->rank - 1 : s->rank + 1;
    const lz_status st = lz_handoff_wait(&s->req[dir], to, tag_of(dir), (uint64_t)s->step);
    free(s->sent[dir]);
    s->sent[dir] = NULL;
    return st;
}

static lz_status send_on(schedule *s, int dir, const void *x) {
    LZ_TRY(finish_send(s, dir));
    const lz_handoff h = handoff_of(s, dir);
    return lz_handoff_send(&h, x, values(s), dir == BACKWARD ? s->rank - 1 : s->rank + 1, tag_of(dir),
                           (uint64_t)s->step);
}

static lz_status receive(schedule *s, int dir, void *x) {
    const lz_handoff h = handoff_of(s, dir);
    return lz_handoff_recv(&h, x, values(s), dir == BACKWARD ? s->rank + 1 : s->rank - 1, tag_of(dir),
                           (uint64_t)s->step);
}

static lz_step_part part_of(const schedule *s) {
    return (lz_step_part){.embed = s->rank == 0, .first = s->m->first, .last = s->m->last, .head = false};
}

static void *const *saves_of(const schedule *s, int i) {
    return s->m->saves + (size_t)(i % s->m->in_flight) * s->m->cfg.num_hidden_layers;
}

/* Micro-batch i enters this rank's layers: its ids (the first rank embeds them), its dropout. */
static lz_status begin(schedule *s, int i, const int32_t *ids) {
    lz_ft_model *m = s->m;
    lz_ft_params_set_dropout(&m->params, (uint64_t)s->step, i * m->micro, m->micro);
    return lz_train_begin(&m->model, &m->state, &m->ws, &m->work, s->rank == 0 ? ids : NULL, &s->b);
}

static lz_status forward(schedule *s, int i) {
    lz_ft_model *m = s->m;
    const int32_t *ids = s->ids + (size_t)i * m->micro * m->T;
    LZ_TRY(begin(s, i, ids));
    if (s->rank > 0)
        LZ_TRY(receive(s, FORWARD, m->ws.x));
    const lz_step_part part = part_of(s);
    LZ_TRY(lz_train_forward(&m->model, &m->state, &m->ws, &m->work, ids, &s->b, &part, saves_of(s, i), NULL,
                            NULL));
    if (s->rank < s->size - 1)
        return send_on(s, FORWARD, m->ws.x);
    for (int q = 0; q < m->micro; q++) // each token predicts the next; a sequence's last predicts nothing
        for (int t = 0; t < m->T; t++)
            m->targets[(size_t)q * m->T + t] = t + 1 < m->T ? ids[(size_t)q * m->T + t + 1] : -1;
    double loss;
    LZ_TRY(lz_train_head(&m->model, &m->ws, &m->work, &s->b, m->targets, s->grad_scale, s->learn, &loss));
    s->loss += loss;
    return LZ_OK;
}

static lz_status backward(schedule *s, int i) {
    lz_ft_model *m = s->m;
    LZ_TRY(begin(s, i, s->ids + (size_t)i * m->micro * m->T));
    if (s->rank < s->size - 1)
        LZ_TRY(receive(s, BACKWARD, m->work.dx));
    const lz_step_part part = part_of(s);
    LZ_TRY(lz_train_backward(&m->model, &m->state, &m->ws, &m->work, &s->b, &part, saves_of(s, i)));
    return s->rank > 0 ? send_on(s, BACKWARD, m->work.dx) : LZ_OK;
}

static lz_status run_schedule(schedule *s) {
    const int M = s->M;
    if (!s->learn) {
        for (int i = 0; i < M; i++)
            LZ_TRY(forward(s, i));
        return LZ_OK;
    }
    const int ahead = s->size - 1 - s->rank < M ? s->size - 1 - s->rank : M;
    for (int i = 0; i < ahead; i++)
        LZ_TRY(forward(s, i));
    for (int i = ahead; i < M; i++) {
        LZ_TRY(forward(s, i));
        LZ_TRY(backward(s, i - ahead));
    }
    for (int i = M - ahead; i < M; i++)
        LZ_TRY(backward(s, i));
    return LZ_OK;
}

lz_status lz_ft_pipeline_batch(lz_finetune_run *r, const int32_t *ids, bool learn, long step, float grad_scale,
                               double *loss_sum) {
    lz_ft_model *m = &r->m;
    schedule s = {.r = r, .m = m, .rank = r->rank, .size = r->size, .M = (int)(r->a.batch / m->micro), .ids = ids,
                  .learn = learn, .step = step, .grad_scale = grad_scale};
    s.b = (lz_batch){m->micro, m->micro * m->T, m->slot, m->start, m->len, m->pos, m->token_pos};
    for (int d = 0; d < DIRECTIONS; d++)
        s.req[d] = MPI_REQUEST_NULL;
    if (learn)
        LZ_TRY(lz_ft_params_zero_grads(&m->params, &m->model));
    if (s.size > 1 && !(s.staging = malloc(sizeof(float) * values(&s))))
        return lz_fail(LZ_ERR_NOMEM, "pipeline buffers: out of memory");
    lz_status st = run_schedule(&s);
    for (int d = 0; d < DIRECTIONS; d++) { // (after a failure too: the copies go next)
        const lz_status done = finish_send(&s, d);
        st = st == LZ_OK ? done : st;
    }
    free(s.staging);
    LZ_TRY(st);
    if (s.size > 1)
        LZ_TRY(lz_world_broadcast(&s.loss, sizeof s.loss, s.size - 1));
    *loss_sum = s.loss;
    return LZ_OK;
}

lz_status lz_ft_grad_norm(lz_finetune_run *r, double *norm, int *bad_layer) {
    lz_ft_model *m = &r->m;
    const lz_ft_params *p = &m->params;
    const int np = p->n_params;
    double *part = calloc((size_t)np + 1, sizeof(double)), total = 0;
    const float **g = calloc((size_t)np + 1, sizeof *g);
    size_t *n = calloc((size_t)np + 1, sizeof *n);
    lz_status s = part && g && n ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "gradient norm: out of memory");
    for (int i = 0; s == LZ_OK && i < np; i++) // a tensor another rank owns, or a frozen one, sums nothing here
        if (p->params[i].owned && !p->params[i].frozen)
            g[i] = p->params[i].g, n[i] = p->params[i].n;
    if (s == LZ_OK && np > 0)
        s = m->ops->backward->sum_squares(m->be, part, g, n, np); // one wait for all of them
    if (s == LZ_OK && r->size > 1)
        s = lz_world_sum(part, np); // one owner each: the sums are exact
    *bad_layer = -1;
    for (int i = 0; s == LZ_OK && i < np; i++) { // then added in the tensors' order
        total += part[i];
        if (!isfinite(part[i]) && *bad_layer < 0)
            *bad_layer = p->params[i].layer;
    }
    free(part), free(g), free(n);
    *norm = sqrt(total);
    return s;
}

lz_status lz_ft_share_params(lz_finetune_run *r) {
    lz_ft_model *m = &r->m;
    LZ_TRY(lz_ft_params_download(&m->params, &m->model));
    for (int i = 0; r->size > 1 && i < m->params.n_params; i++) {
        lz_ft_param *q = &m->params.params[i];
        if (q->frozen)
            continue;
        int owner;
        for (owner = 0; owner < r->size; owner++) {
            int first, last;
            lz_ft_stage_range(m->cfg.num_hidden_layers, r->size, owner, &first, &last);
            if (q->layer >= first && q->layer < last)
                break;
        }
        for (int k = 0; k < LZ_FT_PARTS; k++)
            LZ_TRY(lz_world_broadcast(q->host[k], sizeof(float) * q->n, owner));
    }
    return LZ_OK;
}

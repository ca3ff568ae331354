/* finetune_pipeline.c - a fine-tuning batch as a pipeline (finetune_run.h):
 * under mpirun -np P rank r runs a contiguous range of layers; the batch's
 * sequences are the micro-batches, scheduled 1F1B (rank r runs P - 1 - r
 * forwards ahead, then one forward and one backward in turn, then the
 * remaining backwards): hidden states go forward and their gradients back
 * (handoff.h). One process is the pipeline of one rank: forward, backward, per
 * sequence, in order.
 *
 * Every sum that crosses ranks is made in a fixed order (each parameter's
 * gradient by its owner over the sequences in order, the loss on the last
 * rank in order, the gradient norm from per-tensor sums), so P ranks give
 * one process's numbers bit for bit. */
#include <math.h>   // sqrt
#include <stdlib.h> // calloc, free
#include <string.h> // memcpy

#include "finetune_run.h"
#include "handoff.h"   // lz_handoff_recv, lz_handoff_isend, lz_handoff_wait
#include "mpi_world.h" // lz_world_get, lz_world_sum, lz_world_broadcast

void lz_ft_stage_range(int n_layers, int size, int rank, int *first, int *last) {
    const int base = n_layers / size, extra = n_layers % size; // the first `extra` ranks take one more
    *first = rank * base + (rank < extra ? rank : extra);
    *last = *first + base + (rank < extra ? 1 : 0);
}

bool lz_ft_owns(const lz_ft_model *m, const lz_ft_param *p) { return p->layer >= m->first && p->layer < m->last; }

typedef struct {
    lz_finetune_run *r;
    int rank, size, slots;
    const int32_t *ids; /* [batch, T] */
    bool learn;
    long step;
    float grad_scale;
    double loss; /* the last rank's sum, in order */
    float *send;  /* [2][slots][T, C]: forward, backward */
    MPI_Request *req; /* [2][slots] */
} schedule;

static float *send_buf(schedule *s, int dir, int slot) {
    return s->send + ((size_t)dir * s->slots + slot) * s->r->model.T * s->r->model.cfg.hidden_size;
}

static int tag_of(int dir) { return dir ? LZ_TAG_GRADIENTS : LZ_TAG_ACTIVATIONS; }

// sends n floats from src to `to` with a buffer of its own (the previous send from that buffer finished first)
static lz_status send_async(schedule *s, int dir, int slot, const float *src, int to) {
    const size_t n = (size_t)s->r->model.T * s->r->model.cfg.hidden_size;
    MPI_Request *q = &s->req[dir * s->slots + slot];
    LZ_TRY(lz_handoff_wait(q, to, tag_of(dir), (uint64_t)s->step));
    memcpy(send_buf(s, dir, slot), src, sizeof(float) * n);
    return lz_handoff_isend(send_buf(s, dir, slot), n, to, tag_of(dir), q);
}

static lz_status forward(schedule *s, int i) {
    lz_ft_model *m = &s->r->model;
    const int slot = i % s->slots;
    const size_t n = (size_t)m->T * m->cfg.hidden_size;
    const int32_t *ids = s->ids + (size_t)i * m->T;
    if (s->rank == 0)
        lz_ft_embed(m, ids, slot);
    else
        LZ_TRY(lz_handoff_recv(NULL, lz_ft_hidden(m, slot, m->first), n, s->rank - 1, LZ_TAG_ACTIVATIONS,
                               (uint64_t)s->step));
    lz_ft_forward(m, s->learn, (uint64_t)s->step, i, slot);
    if (s->rank == s->size - 1)
        s->loss += lz_ft_head(m, ids, s->learn, s->grad_scale, slot); // with learn: the gradient, for backward(i)
    else
        LZ_TRY(send_async(s, 0, slot, lz_ft_hidden(m, slot, m->last), s->rank + 1));
    return LZ_OK;
}

static lz_status backward(schedule *s, int i) {
    lz_ft_model *m = &s->r->model;
    const int slot = i % s->slots;
    const size_t n = (size_t)m->T * m->cfg.hidden_size;
    if (s->rank < s->size - 1)
        LZ_TRY(lz_handoff_recv(NULL, lz_ft_grad(m), n, s->rank + 1, LZ_TAG_GRADIENTS, (uint64_t)s->step));
    lz_ft_backward(m, (uint64_t)s->step, i, slot);
    if (s->rank > 0)
        LZ_TRY(send_async(s, 1, slot, lz_ft_grad(m), s->rank - 1));
    return LZ_OK;
}

static lz_status run_schedule(schedule *s, int M) {
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
    lz_ft_model *m = &r->model;
    const lz_world *w = lz_world_get();
    schedule s = {.r = r, .rank = w->rank, .size = w->size, .slots = m->slots, .ids = ids, .learn = learn,
                  .step = step, .grad_scale = grad_scale};
    if (learn)
        for (int i = 0; i < m->n_params; i++)
            memset(m->params[i].g, 0, sizeof(float) * m->params[i].n);
    const int M = (int)r->a.batch;
    if (s.size == 1) { // no MPI: nothing is sent
        for (int i = 0; i < M; i++) {
            double loss;
            LZ_TRY(lz_ft_sequence(m, ids + (size_t)i * m->T, learn, grad_scale, (uint64_t)step, i, &loss));
            s.loss += loss;
        }
        *loss_sum = s.loss;
        return LZ_OK;
    }
    s.send = calloc((size_t)2 * s.slots * m->T * m->cfg.hidden_size, sizeof(float));
    s.req = malloc(sizeof(MPI_Request) * 2 * (size_t)s.slots);
    if (!s.send || !s.req) {
        free(s.send), free(s.req);
        return lz_fail(LZ_ERR_NOMEM, "pipeline buffers: out of memory");
    }
    for (int i = 0; i < 2 * s.slots; i++)
        s.req[i] = MPI_REQUEST_NULL;
    lz_status st = run_schedule(&s, M);
    for (int i = 0; i < 2 * s.slots; i++) { // (after a failure too: the buffers go next)
        const int dir = i / s.slots;
        const lz_status done = lz_handoff_wait(&s.req[i], dir ? s.rank - 1 : s.rank + 1, tag_of(dir), (uint64_t)step);
        st = st == LZ_OK ? done : st;
    }
    free(s.send), free(s.req);
    LZ_TRY(st);
    LZ_TRY(lz_world_broadcast(&s.loss, sizeof s.loss, s.size - 1));
    *loss_sum = s.loss;
    return LZ_OK;
}

lz_status lz_ft_grad_norm(lz_finetune_run *r, double *norm) {
    lz_ft_model *m = &r->model;
    double *part = calloc((size_t)m->n_params + 1, sizeof(double)), total = 0;
    if (!part)
        return lz_fail(LZ_ERR_NOMEM, "gradient norm: out of memory");
    for (int i = 0; i < m->n_params; i++)
        for (size_t e = 0; lz_ft_owns(m, &m->params[i]) && e < m->params[i].n; e++)
            part[i] += (double)m->params[i].g[e] * m->params[i].g[e];
    const lz_status s = lz_world_sum(part, m->n_params); // one owner each: the sums are exact
    for (int i = 0; i < m->n_params; i++) // then added in the tensors' order
        total += part[i];
    free(part);
    *norm = sqrt(total);
    return s;
}

lz_status lz_ft_share_params(lz_finetune_run *r) {
    lz_ft_model *m = &r->model;
    const lz_world *w = lz_world_get();
    for (int i = 0; w->size > 1 && i < m->n_params; i++) {
        lz_ft_param *p = &m->params[i];
        int owner;
        for (owner = 0; owner < w->size; owner++) {
            int first, last;
            lz_ft_stage_range(m->cfg.num_hidden_layers, w->size, owner, &first, &last);
            if (p->layer >= first && p->layer < last)
                break;
        }
        float *parts[3] = {p->w, p->m1, p->m2};
        for (int k = 0; k < 3; k++)
            LZ_TRY(lz_world_broadcast(parts[k], sizeof(float) * p->n, owner));
    }
    return LZ_OK;
}

/* gla.c - gated linear attention, the two forms that must agree:
 *
 *   recurrent (decode):  S_i = g_i S_{i-1} + phi_k(k_i) v_i^T,  z_i = g_i z_{i-1} + phi_k(k_i)
 *                        out_i = phi_q(q_i)^T S_i / phi_q(q_i)^T z_i
 *   chunked (prompts):   inside a chunk, G_i = sum of log g up to i (chunk-local),
 *                        a_it = phi_q_i . phi_k_t * exp(G_i - G_t) for t <= i (never > 1),
 *                        plus the carried state decayed by exp(G_i); S, z carried
 *                        between chunks. No T x T matrix, no overflow.
 *
 * Query head h reads state head s(h): h itself when the state is per query
 * head, else its GQA group h / (Hq / Hkv). v comes from kv head h / (Hq / Hkv).
 * S, z are updated once per state head, not once per query head. */
#include <math.h>   // expf
#include <string.h> // memset

#include "cpu_kernels.h"
#include "cpu_threads.h" // lz_cpu_parallel, lz_cpu_threads_for
#include "real.h"        // dotr_f32, dots_f32: the sums the training forward repeats

typedef struct {
    int Hq, Hkv, Hs, d, F; /* F = 2f features */
    int q_per_state;       /* query heads sharing one state head */
} gla_geom;

static gla_geom geometry(const lz_attn_dims *dims) {
    gla_geom g = {dims->n_heads, dims->n_kv_heads, dims->n_state_heads, dims->head_dim, 2 * dims->feature_dim, 0};
    g.q_per_state = g.Hq / g.Hs;
    return g;
}

// kv head that feeds values to state head s
static int value_head(const gla_geom *g, int s) { return g->Hs == g->Hkv ? s : s / (g->Hq / g->Hkv); }

// out[d] = num / den (or num when not normalising)
static void finish(float *out, const float *num, float den, int d, bool normalize) {
    for (int j = 0; j < d; j++)
        out[j] = normalize ? num[j] / den : num[j];
}

// One chunk [c0, c1) of rows for state head s of one sequence.
static void gla_chunk(float *out, const float *phi_q, const float *phi_k, const float *v, const float *lg, float *S,
                      float *z, int c0, int c1, int s, const gla_geom *g, bool normalize) {
    float G[LZ_GLA_CHUNK], qk[LZ_GLA_CHUNK], num[1024], sj[1024];
    const int d = g->d, F = g->F, vh = value_head(g, s);
    float acc = 0.0f;
    for (int i = c0; i < c1; i++)
        G[i - c0] = (acc += lg[i]);
    for (int hq = 0; hq < g->q_per_state; hq++) {
        const int h = s * g->q_per_state + hq;
        for (int i = c0; i < c1; i++) {
            const float *pq = phi_q + ((size_t)i * g->Hq + h) * F;
            const float decay = expf(G[i - c0]); // state carried from before the chunk
            for (int j = 0; j < d; j++) // sj = pq^T S, each sum over a in order (a outer: the j vectorise)
                sj[j] = 0.0f;
            for (int a = 0; a < F; a++)
                for (int j = 0; j < d; j++)
                    sj[j] += pq[a] * S[(size_t)a * d + j];
            for (int j = 0; j < d; j++)
                num[j] = decay * sj[j];
            float den = decay * dotr_f32(pq, z, F);
            dots_f32(qk, phi_k + ((size_t)c0 * g->Hs + s) * F, (size_t)g->Hs * F, pq, i - c0 + 1, F);
            for (int t = c0; t <= i; t++) {
                float w = qk[t - c0] * expf(G[i - c0] - G[t - c0]);
                const float *vt = v + ((size_t)t * g->Hkv + vh) * d;
                for (int j = 0; j < d; j++)
                    num[j] += w * vt[j];
                den += w;
            }
            finish(out + ((size_t)i * g->Hq + h) * d, num, den, d, normalize);
        }
    }
    // carry: S = exp(G_last) S + sum_t exp(G_last - G_t) phi_k_t v_t^T
    const float G_last = G[c1 - 1 - c0], keep = expf(G_last);
    for (int a = 0; a < F; a++) {
        z[a] *= keep;
        for (int j = 0; j < d; j++)
            S[(size_t)a * d + j] *= keep;
    }
    for (int t = c0; t < c1; t++) {
        const float w = expf(G_last - G[t - c0]);
        const float *pk = phi_k + ((size_t)t * g->Hs + s) * F, *vt = v + ((size_t)t * g->Hkv + vh) * d;
        for (int a = 0; a < F; a++) {
            const float wk = w * pk[a];
            z[a] += wk;
            for (int j = 0; j < d; j++)
                S[(size_t)a * d + j] += wk * vt[j];
        }
    }
}

static float *slot_S(lz_layer_state *st, const gla_geom *g, int slot, int s) {
    return st->S + ((size_t)slot * g->Hs + s) * g->F * g->d;
}
static float *slot_z(lz_layer_state *st, const gla_geom *g, int slot, int s) {
    return st->z + ((size_t)slot * g->Hs + s) * g->F;
}

typedef struct {
    float *out;
    const float *phi_q, *phi_k, *v, *log_gamma;
    lz_layer_state *st;
    const lz_batch *batch;
    const lz_attn_dims *dims;
    gla_geom g;
} gla_job;

// items [begin, end): item i is state head i % Hs of sequence i / Hs (they share no state and write
// rows of their own)
static void chunked_items(void *ctx, size_t begin, size_t end, int worker) {
    const gla_job *j = ctx;
    const gla_geom *g = &j->g;
    for (size_t i = begin; i < end; i++) {
        const int q = (int)(i / (size_t)g->Hs), s = (int)(i % (size_t)g->Hs);
        const int r0 = j->batch->start[q], r1 = r0 + j->batch->len[q];
        for (int c0 = r0; c0 < r1; c0 += LZ_GLA_CHUNK) {
            int c1 = c0 + LZ_GLA_CHUNK < r1 ? c0 + LZ_GLA_CHUNK : r1;
            gla_chunk(j->out, j->phi_q, j->phi_k, j->v, j->log_gamma, slot_S(j->st, g, j->batch->slot[q], s),
                      slot_z(j->st, g, j->batch->slot[q], s), c0, c1, s, g, j->dims->gla_normalize);
        }
    }
}

void gla_chunked_forward(float *out, const float *phi_q, const float *phi_k, const float *v, const float *log_gamma,
                         lz_layer_state *st, const lz_batch *batch, const lz_attn_dims *dims) {
    gla_job j = {out, phi_q, phi_k, v, log_gamma, st, batch, dims, geometry(dims)};
    const size_t items = (size_t)batch->n_seqs * j.g.Hs;
    const size_t work = (size_t)batch->n_tokens * j.g.Hq * j.g.F * (j.g.d + LZ_GLA_CHUNK);
    lz_cpu_parallel(items, lz_cpu_threads_for(items, work, LZ_GRAIN_LOOP), chunked_items, &j);
}

static void recurrent_items(void *ctx, size_t begin, size_t end, int worker) {
    const gla_job *j = ctx;
    const gla_geom *g = &j->g;
    float num[1024];
    for (size_t it = begin; it < end; it++) {
        const int q = (int)(it / (size_t)g->Hs), s = (int)(it % (size_t)g->Hs);
        const int i = j->batch->start[q]; // exactly one token per sequence
        const float gamma = expf(j->log_gamma[i]);
        float *S = slot_S(j->st, g, j->batch->slot[q], s), *z = slot_z(j->st, g, j->batch->slot[q], s);
        const float *pk = j->phi_k + ((size_t)i * g->Hs + s) * g->F;
        const float *vt = j->v + ((size_t)i * g->Hkv + value_head(g, s)) * g->d;
        for (int a = 0; a < g->F; a++) {
            z[a] = gamma * z[a] + pk[a];
            for (int jj = 0; jj < g->d; jj++)
                S[(size_t)a * g->d + jj] = gamma * S[(size_t)a * g->d + jj] + pk[a] * vt[jj];
        }
        for (int hq = 0; hq < g->q_per_state; hq++) {
            const int h = s * g->q_per_state + hq;
            const float *pq = j->phi_q + ((size_t)i * g->Hq + h) * g->F;
            memset(num, 0, sizeof(float) * g->d);
            for (int a = 0; a < g->F; a++)
                for (int jj = 0; jj < g->d; jj++)
                    num[jj] += pq[a] * S[(size_t)a * g->d + jj];
            finish(j->out + ((size_t)i * g->Hq + h) * g->d, num, dotr_f32(pq, z, g->F), g->d,
                   j->dims->gla_normalize);
        }
    }
}

void gla_recurrent_forward(float *out, const float *phi_q, const float *phi_k, const float *v,
                           const float *log_gamma, lz_layer_state *st, const lz_batch *batch,
                           const lz_attn_dims *dims) {
    gla_job j = {out, phi_q, phi_k, v, log_gamma, st, batch, dims, geometry(dims)};
    const size_t items = (size_t)batch->n_seqs * j.g.Hs;
    lz_cpu_parallel(items, lz_cpu_threads_for(items, items * j.g.q_per_state * j.g.F * j.g.d, LZ_GRAIN_LOOP),
                    recurrent_items, &j);
}

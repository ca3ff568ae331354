/* backward_ops.h - the backward op table: the gradients of the inference ops
 * (ops.h) for training the whole model (`lizard finetune`, stage 2), once per
 * backend, beside its inference table (lz_ops.backward).
 *
 * The forward of training is the inference ops themselves (stages/
 * decoder_layer.c keeps what the backward reads when asked); this table holds
 * what inference has no use for. Conventions:
 *   - activations (void *) are the inference backend's, in its activation
 *     type (fp32 on the CPU; bf16 or fp32 on CUDA), as the forward left them;
 *   - gradients, LoRA factors, the Lizard layers' trainable tensors and every
 *     optimizer tensor are fp32 (float *) in the backend's memory;
 *   - N rows of a step; the sequences of a training step are described by an
 *     lz_batch as inference's are, each starting at position 0;
 *   - "overwritten" or "added to" is said for every output;
 *   - every op returns LZ_OK or the backend's failure with the error set.
 * The equations of every gradient are in kernels/cpu/backward/ (the CPU
 * reference, checked against finite differences in f64). */
#ifndef LZ_BACKWARD_OPS_H
#define LZ_BACKWARD_OPS_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // int32_t, uint64_t

#include "ops.h"         // lz_backend, lz_weight, lz_batch, lz_attn_dims
#include "train_types.h" // lz_lizard_geom, lz_lizard_params_f32

/* The LoRA factors of one linear layer y = x W^T: y += scale (x A^T) B^T. */
typedef struct {
    int r, in, out;
    float scale;    /* alpha / r */
    float *A, *B;   /* [r, in], [out, r]: the fp32 values (backend memory) */
    float *dA, *dB; /* their gradients (added to) */
    void *shadow;   /* the backend's own copies of A and B (lora_sync), or NULL */
} lz_lora;

/* Dropout on a LoRA layer's input: element (row t of sequence s, column c)
 * of x is kept, times 1 / (1 - p), unless lz_dropout_drops(streams[s],
 * (t - start[s]) * in + c, p) (dropout_rule.h). p = 0: no dropout. */
typedef struct {
    double p;
    const uint64_t *streams; /* [n_seqs] host: each sequence's stream for this layer and module */
} lz_dropout;

/* One AdamW update of a tensor (the CPU reference: lz_adamw_tensor):
 *   g' = g * grad_scale;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;
 *   p -= lr * (weight_decay * p + (m / bias1) / (sqrt(v / bias2) + eps))
 * with bias1 = 1 - b1^t, bias2 = 1 - b2^t at step t (1-based). */
typedef struct {
    double lr, beta1, beta2, eps, weight_decay, bias1, bias2;
    float grad_scale; /* gradient clipping's factor (1: none) */
} lz_adamw_update;

typedef struct lz_backward_ops {
    /* y = rmsnorm(x; w, eps): dx [N, C] += dL/dx from dy [N, C]; x [N, C] (act), w [C]. */
    lz_status (*rmsnorm)(lz_backend *be, float *dx, const float *dy, const void *x, const lz_weight *w, int N,
                         float eps);
    /* h = silu(g) * u: dg, du [n] overwritten from dh [n]; g, u (act). */
    lz_status (*swiglu)(lz_backend *be, float *dg, float *du, const float *dh, const void *g, const void *u, size_t n);
    /* y = x W^T (W [rows, cols]): dx [N, cols] = dy [N, rows] W, overwritten, or added to with accumulate. */
    lz_status (*linear)(lz_backend *be, float *dx, const float *dy, const lz_weight *w, int N, bool accumulate);
    /* The inverse of ops.rope on gradients: dq [N, Hq, d], dk [N, Hkv, d] rotated back in place at
     * batch->token_pos (dk may be NULL). */
    lz_status (*rope)(lz_backend *be, float *dq, float *dk, const float *inv_freq, const lz_batch *b,
                      const lz_attn_dims *dims);
    /* Causal GQA softmax attention of every sequence of b, each from position 0, over q [N, Hq, d]
     * (after RoPE), k [N, Hkv, d] (after RoPE), v [N, Hkv, d] (act): dq, dk, dv overwritten from
     * dout [N, Hq, d]. Nothing of size T x T is kept. */
    lz_status (*attention)(lz_backend *be, float *dq, float *dk, float *dv, const float *dout, const void *q,
                           const void *k, const void *v, const lz_batch *b, const lz_attn_dims *dims);

    /* A Lizard layer's attention y = GLA + alpha WIN (docs/distillation.md, "The function") of every
     * sequence of b from position 0: recomputed from x (the gate's input, the layer's normed input
     * [N, C]) and q [N, Hq, d], k, v [N, Hkv, d] (act) with the fp32 tensors p, then from
     * dout [N, Hq, d]: grad (NULL: frozen) += dL/d(tensors), and dx [N, C], dq, dk, dv added to.
     * Scratch for up to max_tokens rows. */
    lz_status (*lizard_scratch_create)(lz_backend *be, void **out, const lz_lizard_geom *g, int max_tokens, int C);
    void (*lizard_scratch_free)(lz_backend *be, void *scratch);
    lz_status (*lizard)(lz_backend *be, void *scratch, lz_lizard_params_f32 *grad, float *dx, float *dq, float *dk,
                        float *dv, const float *dout, const lz_lizard_params_f32 *p, const void *x, const void *q,
                        const void *k, const void *v, const lz_batch *b, const lz_lizard_geom *g, int C);

    /* LoRA. lora_sync: the backend's copies of A and B (l->shadow) after their values changed (made on
     * the first call); lora_release frees them. lora_forward: y [N, out] (act) += scale (x' A^T) B^T,
     * x' = x [N, in] (act) with dropout applied, u [N, r] = x' A^T overwritten (kept for the backward).
     * lora_backward: from dy [N, out]: l->dA, l->dB += their gradients, dx [N, in] += dL/dx (NULL: not
     * wanted), with the forward's x, u and dropout. */
    lz_status (*lora_sync)(lz_backend *be, lz_lora *l);
    void (*lora_release)(lz_backend *be, lz_lora *l);
    lz_status (*lora_forward)(lz_backend *be, void *y, float *u, const void *x, const lz_lora *l,
                              const lz_dropout *drop, const lz_batch *b);
    lz_status (*lora_backward)(lz_backend *be, lz_lora *l, float *dx, const float *dy, const void *x, const float *u,
                               const lz_dropout *drop, const lz_batch *b);

    /* The head's loss: *loss = sum over rows t with targets[t] >= 0 of -log softmax(h_t W^T)[targets[t]]
     * (double), W [V, C] the LM head, h [N, C] (act), targets [N] on the host; dh [N, C] overwritten
     * with grad_scale * d(loss)/dh, or NULL (the loss alone). No [N, V] matrix is made whole: the
     * logits are computed a slice at a time. */
    lz_status (*cross_entropy)(lz_backend *be, double *loss, float *dh, const void *h, const lz_weight *w,
                               const int32_t *targets, int N, float grad_scale);

    /* Tensors. copy: bytes between two places of the backend's memory. to_f32: n activations -> fp32.
     * add: y [n] += x [n]. sum_squares: out[t] = the sum of x[t][i]^2 (i < n[t]) in double for each of
     * the `count` tensors (x[t] may be NULL where n[t] is 0), each the same on every call and whichever
     * tensors share the call.
     * adamw: p, m, v [n] updated from g [n]. weight_set: w's values (in its dtype) from src
     * [w->rows * w->cols] fp32; a weight that points into a checkpoint's mapping gets memory of its
     * own first. */
    lz_status (*copy)(lz_backend *be, void *dst, const void *src, size_t bytes);
    lz_status (*to_f32)(lz_backend *be, float *dst, const void *src, size_t n);
    lz_status (*add)(lz_backend *be, float *y, const float *x, size_t n);
    lz_status (*sum_squares)(lz_backend *be, double *out, const float *const *x, const size_t *n, int count);
    lz_status (*adamw)(lz_backend *be, float *p, float *m, float *v, const float *g, size_t n,
                       const lz_adamw_update *u);
    lz_status (*weight_set)(lz_backend *be, lz_weight *w, const float *src);
} lz_backward_ops;

#endif

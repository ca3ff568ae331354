/* bench_report.c - `lizard bench`'s header, result lines and JSON rows, and the bounds beside them
 * (bench_report.h). */
#include "bench_report.h"

#include <string.h> // strcmp

#include "state.h" // lz_state_bytes_at

/* Whether a run holds this linear weight as FP8: --dtype fp8 quantizes the layers' q, k, v, o, gate, up and
 * down at load (or keeps an FP8 checkpoint's) and keeps an FP8 checkpoint's LM head as it is; without it
 * every weight runs dequantized. */
static bool held_fp8(const lz_model *m, const lz_weight *w, bool quantized) {
    return m->cfg.fp8_weights && w->rows * w->cols > 0 && (quantized || w->dtype == LZ_DTYPE_F8_E4M3);
}

double lz_bench_weight_bytes(const lz_model *m) {
    double fp8_params = 0, fp8_bytes = 0;
    for (int i = 0; m->layers && i < m->cfg.num_hidden_layers; i++) {
        const lz_layer *ly = &m->layers[i];
        const lz_weight *w[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t k = 0; k < sizeof w / sizeof w[0]; k++)
            if (held_fp8(m, w[k], true)) {
                fp8_params += (double)w[k]->rows * w[k]->cols;
                fp8_bytes += (double)w[k]->rows * w[k]->cols + sizeof(float) * (double)w[k]->rows;
            }
    }
    if (!m->cfg.tie_word_embeddings && held_fp8(m, &m->lm_head, false)) {
        fp8_params += (double)m->lm_head.rows * m->lm_head.cols;
        fp8_bytes += (double)m->lm_head.rows * m->lm_head.cols + sizeof(float) * (double)m->lm_head.rows;
    }
    return ((double)(m->n_params_teacher + m->n_params_lizard) - fp8_params) * m->ops->act_size + fp8_bytes;
}

double lz_bench_decode_bound(const lz_bench_report *r, int batch, int context) {
    if (r->copy_bps <= 0)
        return 0;
    const lz_state_bytes s = lz_state_bytes_at(&r->whole, context); // S and z are read and written
    const double state = (double)s.softmax_kv + 2.0 * (double)s.lizard_gla + (double)s.lizard_window;
    return batch * r->copy_bps / (lz_bench_weight_bytes(&r->whole) + batch * state);
}

double lz_bench_prompt_bound(const lz_bench_report *r, int prompt) {
    if (r->gemm_flops <= 0)
        return 0;
    const lz_model *m = &r->whole;
    const lz_config *c = &m->cfg;
    double flops = 2.0 * (double)(m->n_params_teacher + m->n_params_lizard) -
                   2.0 * c->vocab_size * c->hidden_size; // the embedding is a lookup
    for (int i = 0; i < c->num_hidden_layers; i++) // causal attention: P/2 keys on average
        if (m->layers[i].run_softmax)
            flops += 4.0 * (prompt / 2.0) * c->num_attention_heads * c->head_dim;
    return r->gemm_flops / flops;
}

/* The placement in words ("file" is a hand-written plan). */
static const char *placement_text(const lz_bench_report *r) {
    return strcmp(r->placement, "file") == 0 ? "plan file" : r->placement;
}

void lz_bench_print_header(const lz_bench_report *r, const char *name, const char *backend, size_t free_bytes) {
    const lz_state_bytes at2k = lz_state_bytes_at(&r->whole, 2048), at32k = lz_state_bytes_at(&r->whole, 32768);
    const size_t per_seq = at32k.softmax_kv + at32k.lizard_gla + at32k.lizard_window;
    const double weights = lz_bench_weight_bytes(&r->whole);
    printf("lizard bench: %s on %s, %zu parameters (%.2f GB), %d softmax + %d Lizard layers, %d rank%s (%s)\n", name,
           backend, r->whole.n_params_teacher + r->whole.n_params_lizard, weights / 1e9, at32k.n_softmax,
           at32k.n_lizard, r->ranks, r->ranks > 1 ? "s" : "", placement_text(r));
    printf("state per sequence: %zu bytes at 2K, %zu bytes at 32K (Lizard part %zu)\n",
           at2k.softmax_kv + at2k.lizard_gla + at2k.lizard_window, per_seq, at32k.lizard_gla + at32k.lizard_window);
    if (free_bytes > 0) { // (measured before any weights are loaded)
        const double beside = (double)free_bytes - weights;
        printf("32K-context sequences that fit beside the weights in one device's free %.1f GB: %zu\n",
               free_bytes / 1e9, per_seq && beside > 0 ? (size_t)(beside / (double)per_seq) : 0);
    }
    if (r->copy_bps > 0)
        printf("ceilings of rank 0's device: copy %.2f TB/s (read + write), GEMM %.1f TFLOP/s; bound: one device's "
               "ceilings over the whole model\n",
               r->copy_bps / 1e12, r->gemm_flops / 1e12);
}

/* Every rank's counters, a line (and a JSON row) each. */
static void print_ranks(const lz_bench_report *r, const char *kind, const lz_rank_stats *all) {
    for (int k = 0; k < r->ranks; k++) {
        const double per_token = all[k].tokens ? (double)all[k].bytes_activations / (double)all[k].tokens : 0;
        char mem[48] = "-"; // (a backend that cannot say: the CPU)
        if (all[k].mem_total > 0)
            snprintf(mem, sizeof mem, "%.2f / %.2f GB", all[k].mem_used / 1e9, all[k].mem_total / 1e9);
        printf("  rank %d: load %.2f s, memory %s, sent %.0f activation bytes per token%s\n", k, all[k].load_seconds,
               mem, per_token, all[k].bytes_results ? " (+ the last stage's ids or logits)" : "");
        if (r->json)
            fprintf(r->json,
                    "{\"kind\": \"rank\", \"of\": \"%s\", \"rank\": %d, \"load_s\": %.3f, \"mem_bytes\": %llu, "
                    "\"activation_bytes_per_token\": %.1f, \"result_bytes\": %llu, \"tokens\": %llu}\n",
                    kind, k, all[k].load_seconds, (unsigned long long)all[k].mem_used, per_token,
                    (unsigned long long)all[k].bytes_results, (unsigned long long)all[k].tokens);
    }
}

/* A bound of 0 (no ceilings measured) and memory a backend cannot say (the CPU) print "-", null in JSON. */
void lz_bench_print_result(const lz_bench_report *r, const char *kind, int prompt, int batch, int context,
                           double tok_s, const lz_rank_stats *all) {
    const double bound = prompt > 0 ? lz_bench_prompt_bound(r, prompt) : lz_bench_decode_bound(r, batch, context);
    char bound_text[48] = "    -", share[16] = "    -", mem[16] = "     -";
    char bound_json[32] = "null", mem_json[32] = "null";
    if (bound > 0) {
        snprintf(bound_text, sizeof bound_text, "%10.1f", bound);
        snprintf(share, sizeof share, "%5.1f%%", 100.0 * tok_s / bound);
        snprintf(bound_json, sizeof bound_json, "%.2f", bound);
    }
    if (all[0].mem_total > 0) {
        snprintf(mem, sizeof mem, "%6.2f", all[0].mem_used / 1e9);
        snprintf(mem_json, sizeof mem_json, "%llu", (unsigned long long)all[0].mem_used);
    }
    printf("%-7s prompt %7d  batch %4d  context %7d  %10.1f tok/s  bound %10s tok/s (%s)  mem %s GB  %d rank%s %s, "
           "load %.1f s\n",
           kind, prompt, batch, context, tok_s, bound_text, share, mem, r->ranks, r->ranks > 1 ? "s" : "",
           placement_text(r), all[0].load_seconds);
    if (r->json)
        fprintf(r->json,
                "{\"kind\": \"%s\", \"prompt\": %d, \"batch\": %d, \"context\": %d, \"tok_s\": %.2f, "
                "\"bound_tok_s\": %s, \"mem_bytes\": %s, \"ranks\": %d, \"placement\": \"%s\", \"load_s\": %.3f}\n",
                kind, prompt, batch, context, tok_s, bound_json, mem_json, r->ranks, r->placement,
                all[0].load_seconds);
    if (r->ranks > 1)
        print_ranks(r, kind, all);
    if (r->json)
        fflush(r->json);
}

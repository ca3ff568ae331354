/* plan.c - the cost model, the balanced and by-type planners, accounting,
 * validation, and the runs / visit order an executor walks. */
#include "plan.h"

#include <stdlib.h> // malloc, free
#include <string.h> // memset, snprintf

#define ELEM 2u       /* bf16 weights, KV cache and window ring on the GPU */
#define INF UINT64_MAX

/* "12.34 GB", "5.67 MB" or "890 bytes" into buf. */
static const char *human(uint64_t b, char *buf, size_t cap) {
    if (b >= 1000000000ull)
        snprintf(buf, cap, "%.2f GB", (double)b / 1e9);
    else if (b >= 1000000ull)
        snprintf(buf, cap, "%.2f MB", (double)b / 1e6);
    else
        snprintf(buf, cap, "%llu bytes", (unsigned long long)b);
    return buf;
}

/* ---- cost model ------------------------------------------------------------- */

/* Parameters of decoder layer i as it runs (Lizard tensors only when it runs as Lizard).
 * Feature maps as the presets write them: phi_q shared (1 head), phi_k per key/value head. */
static uint64_t layer_params(const lz_config *c, int i) {
    const uint64_t h = (uint64_t)c->hidden_size, I = (uint64_t)c->intermediate_size, d = (uint64_t)c->head_dim;
    const uint64_t hq = (uint64_t)c->num_attention_heads, hkv = (uint64_t)c->num_key_value_heads;
    uint64_t n = 2 * h;                                    // input + post-attention RMSNorm
    n += hq * d * h + 2 * hkv * d * h + h * hq * d;        // q, k, v, o
    n += 3 * h * I;                                        // gate, up, down
    if (c->attention_bias)
        n += hq * d + 2 * hkv * d + h;
    if (c->mlp_bias)
        n += 2 * I + h;
    if (c->has_lizard && !c->softmax_layer[i]) {
        const uint64_t f = (uint64_t)c->lizard.feature_dim;
        n += 1 * d * f + hkv * d * f;                      // feature_map_q, feature_map_k
        n += h + (uint64_t)c->lizard.num_meta_tokens + 1;  // gate, meta_logits, window_alpha
    }
    return n;
}

uint64_t lz_plan_layer_state_bytes(const lz_config *c, int layer, uint64_t positions) {
    const uint64_t d = (uint64_t)c->head_dim, hkv = (uint64_t)c->num_key_value_heads;
    if (!c->has_lizard || c->softmax_layer[layer])
        return 2 * positions * hkv * d * ELEM; // K and V
    // Lizard: S [Hs, 2f, d] + z [Hs, 2f] fp32 (Hs = key/value heads), ring of w keys and values
    const uint64_t f2 = 2 * (uint64_t)c->lizard.feature_dim, w = (uint64_t)c->lizard.window_size;
    return hkv * f2 * (d + 1) * 4 + 2 * w * hkv * d * ELEM;
}

/* FLOPs per token: 2 per matmul weight, plus attention over the context
 * (softmax) or the state and the window (Lizard). */
static double layer_flops(const lz_config *c, int i, uint64_t ctx) {
    const double d = c->head_dim, hq = c->num_attention_heads;
    double f = 2.0 * (double)layer_params(c, i);
    if (!c->has_lizard || c->softmax_layer[i])
        return f + 4.0 * (double)ctx * hq * d;
    const double f2 = 2.0 * c->lizard.feature_dim, w = c->lizard.window_size;
    return f + 4.0 * hq * f2 * d + 4.0 * w * hq * d;
}

lz_status lz_plan_costs_from_config(const lz_config *cfg, uint64_t context, int batch, lz_plan_costs *out) {
    const int n = cfg->num_hidden_layers;
    if (n < 1 || n > LZ_MAX_LAYERS)
        return lz_fail(LZ_ERR_INPUT, "plan: model has %d layers (1..%d supported)", n, LZ_MAX_LAYERS);
    if (batch < 1)
        return lz_fail(LZ_ERR_INPUT, "plan: batch %d (at least 1)", batch);
    memset(out, 0, sizeof *out);
    out->n_layers = n;
    out->context = context;
    out->batch = batch;
    for (int i = 0; i < n; i++) {
        out->softmax[i] = !cfg->has_lizard || cfg->softmax_layer[i];
        out->layer_weight[i] = layer_params(cfg, i) * ELEM;
        out->layer_state[i] = lz_plan_layer_state_bytes(cfg, i, context);
        out->layer_flops[i] = layer_flops(cfg, i, context);
    }
    const uint64_t vh = (uint64_t)cfg->vocab_size * (uint64_t)cfg->hidden_size;
    out->embed_weight = vh * ELEM;
    out->head_weight = (vh + (uint64_t)cfg->hidden_size) * ELEM; // LM head + final norm
    out->head_flops = 2.0 * (double)vh;
    out->tied = cfg->tie_word_embeddings;
    return LZ_OK;
}

/* ---- accounting and validation ---------------------------------------------- */

uint64_t lz_plan_rank_total(const lz_plan *p, int rank) {
    return p->weight_bytes[rank] + (uint64_t)(p->batch > 0 ? p->batch : 1) * p->state_bytes[rank];
}

void lz_plan_account(lz_plan *p, const lz_plan_costs *c, const uint64_t *free_bytes) {
    double total = c->head_flops;
    for (int r = 0; r < p->n_ranks && r < LZ_MAX_RANKS; r++) {
        p->weight_bytes[r] = p->state_bytes[r] = 0;
        p->compute_share[r] = 0;
        p->free_bytes[r] = free_bytes[r];
    }
    for (int i = 0; i < c->n_layers; i++) {
        total += c->layer_flops[i];
        const int r = p->layer_rank[i];
        if (r < 0 || r >= p->n_ranks || r >= LZ_MAX_RANKS)
            continue; // validation names it
        p->weight_bytes[r] += c->layer_weight[i];
        p->state_bytes[r] += c->layer_state[i];
        p->compute_share[r] += c->layer_flops[i];
    }
    const bool embed_ok = p->embed_rank >= 0 && p->embed_rank < p->n_ranks;
    const bool head_ok = p->head_rank >= 0 && p->head_rank < p->n_ranks;
    if (embed_ok)
        p->weight_bytes[p->embed_rank] += c->embed_weight;
    if (head_ok) {
        const bool shared = c->tied && p->embed_rank == p->head_rank; // one copy of the tied matrix
        p->weight_bytes[p->head_rank] += shared ? c->head_weight - c->embed_weight : c->head_weight;
        p->compute_share[p->head_rank] += c->head_flops;
    }
    for (int r = 0; r < p->n_ranks && r < LZ_MAX_RANKS; r++)
        p->compute_share[r] = total > 0 ? p->compute_share[r] / total : 0;
    p->context = c->context;
    p->batch = c->batch;
}

lz_status lz_plan_validate(const lz_plan *p) {
    if (p->n_ranks < 1 || p->n_ranks > LZ_MAX_RANKS)
        return lz_fail(LZ_ERR_INPUT, "plan: %d ranks (1..%d supported)", p->n_ranks, LZ_MAX_RANKS);
    if (p->n_layers < 1 || p->n_layers > LZ_MAX_LAYERS)
        return lz_fail(LZ_ERR_INPUT, "plan: %d layers (1..%d supported)", p->n_layers, LZ_MAX_LAYERS);
    int owned[LZ_MAX_RANKS] = {0};
    for (int i = 0; i < p->n_layers; i++) {
        const int r = p->layer_rank[i];
        if (r == -1)
            return lz_fail(LZ_ERR_INPUT, "plan: layer %d is not assigned to any rank", i);
        if (r < 0 || r >= p->n_ranks)
            return lz_fail(LZ_ERR_INPUT, "plan: layer %d on rank %d, out of range (plan has %d ranks)", i, r,
                           p->n_ranks);
        owned[r]++;
    }
    const char *what[2] = {"embedding", "LM head"};
    const int where[2] = {p->embed_rank, p->head_rank};
    for (int k = 0; k < 2; k++) {
        if (where[k] == -1)
            return lz_fail(LZ_ERR_INPUT, "plan: the %s is not assigned to any rank", what[k]);
        if (where[k] < 0 || where[k] >= p->n_ranks)
            return lz_fail(LZ_ERR_INPUT, "plan: the %s on rank %d, out of range (plan has %d ranks)", what[k],
                           where[k], p->n_ranks);
    }
    for (int r = 0; r < p->n_ranks; r++)
        if (owned[r] == 0)
            return lz_fail(LZ_ERR_INPUT, "plan: rank %d owns no layer (every rank must be a stage)", r);
    for (int r = 0; r < p->n_ranks; r++) {
        const uint64_t need = lz_plan_rank_total(p, r);
        if (need > p->free_bytes[r]) {
            char a[32], b[32], c[32], d[32];
            return lz_fail(LZ_ERR_INPUT,
                           "plan: rank %d does not fit: needs %s (weights %s + %d x %s state at context %llu) but "
                           "has %s",
                           r, human(need, a, sizeof a), human(p->weight_bytes[r], b, sizeof b),
                           p->batch > 0 ? p->batch : 1, human(p->state_bytes[r], c, sizeof c),
                           (unsigned long long)p->context, human(p->free_bytes[r], d, sizeof d));
        }
    }
    return LZ_OK;
}

/* ---- planners ------------------------------------------------------------ */

/* Splits items [0, n) into k contiguous non-empty groups, group g's memory
 * (sum of mem) at most cap[g] (cap NULL: no limit), minimising the largest
 * sum of cost (dynamic programming; the inner loop stops once a group alone
 * is no better). group[i] = the group of item i. Returns the largest cost
 * sum, INF if none fits. */
static uint64_t partition(const uint64_t *cost, const uint64_t *mem, int n, int k, const uint64_t *cap, int *group,
                          lz_status *st) {
    *st = LZ_OK;
    uint64_t *dp = malloc(sizeof(uint64_t) * (size_t)k * (size_t)(n + 1));
    int *cut = malloc(sizeof(int) * (size_t)k * (size_t)(n + 1));
    if (!dp || !cut) {
        free(dp), free(cut);
        *st = lz_fail(LZ_ERR_NOMEM, "plan: out of memory");
        return INF;
    }
#define DP(g, j) dp[(size_t)(g) * (size_t)(n + 1) + (size_t)(j)]
#define CUT(g, j) cut[(size_t)(g) * (size_t)(n + 1) + (size_t)(j)]
    for (size_t i = 0; i < (size_t)k * (size_t)(n + 1); i++)
        dp[i] = INF, cut[i] = -1;
    uint64_t sum = 0, sum_mem = 0;
    for (int j = 1; j <= n; j++) {
        sum += cost[j - 1], sum_mem += mem[j - 1];
        DP(0, j) = (!cap || sum_mem <= cap[0]) ? sum : INF;
        CUT(0, j) = 0;
    }
    for (int g = 1; g < k; g++)
        for (int j = g + 1; j <= n; j++) {
            uint64_t best = INF, s = 0, sm = 0;
            int best_i = -1;
            for (int i = j - 1; i >= g; i--) { // group g = items [i, j)
                s += cost[i], sm += mem[i];
                if ((cap && sm > cap[g]) || s >= best)
                    break;
                const uint64_t prev = DP(g - 1, i);
                const uint64_t m = prev > s ? prev : s;
                if (m < best)
                    best = m, best_i = i;
            }
            DP(g, j) = best;
            CUT(g, j) = best_i;
        }
    const uint64_t result = DP(k - 1, n);
    if (result != INF) {
        // Second pass: among the splits whose largest group is `result`, the one
        // with the smallest sum of squares, so the slack is spread, not left on the last rank.
        double *sq = (double *)dp; // same size as dp (8-byte entries)
#define SQ(g, j) sq[(size_t)(g) * (size_t)(n + 1) + (size_t)(j)]
        for (size_t i = 0; i < (size_t)k * (size_t)(n + 1); i++)
            sq[i] = -1, cut[i] = -1; // -1: unreachable
        sum = 0, sum_mem = 0;
        for (int j = 1; j <= n; j++) {
            sum += cost[j - 1], sum_mem += mem[j - 1];
            if (sum > result || (cap && sum_mem > cap[0]))
                break;
            SQ(0, j) = (double)sum * (double)sum;
            CUT(0, j) = 0;
        }
        for (int g = 1; g < k; g++)
            for (int j = g + 1; j <= n; j++) {
                uint64_t s = 0, sm = 0;
                for (int i = j - 1; i >= g; i--) {
                    s += cost[i], sm += mem[i];
                    if (s > result || (cap && sm > cap[g]))
                        break;
                    if (SQ(g - 1, i) < 0)
                        continue;
                    const double v = SQ(g - 1, i) + (double)s * (double)s;
                    if (SQ(g, j) < 0 || v < SQ(g, j))
                        SQ(g, j) = v, CUT(g, j) = i;
                }
            }
#undef SQ
        for (int g = k - 1, j = n; g >= 0; g--) {
            const int i = CUT(g, j);
            for (int t = i; t < j; t++)
                group[t] = g;
            j = i;
        }
    }
#undef DP
#undef CUT
    free(dp), free(cut);
    return result;
}

/* Memory of item (layer) i: its bytes, plus the embedding on layer 0's stage
 * and the head on the last layer's. */
static uint64_t item_memory(const lz_plan_costs *c, int i) {
    uint64_t b = c->layer_weight[i] + (uint64_t)c->batch * c->layer_state[i];
    if (i == 0)
        b += c->embed_weight;
    if (i == c->n_layers - 1)
        b += c->head_weight;
    return b;
}

/* What the planners balance: the bytes item i reads in a decode step (its
 * weights and state, the LM head with the last layer). The embedding table
 * costs memory but not time (a step reads one row of it per token): counted
 * as memory, an 8B model's 1 GB table pushed a layer off rank 0 onto the rank
 * that also runs the head (16 + 16 layers where 17 + 15 balance the steps). */
static uint64_t item_step_cost(const lz_plan_costs *c, int i) {
    return item_memory(c, i) - (i == 0 ? c->embed_weight : 0);
}

static void plan_init(lz_plan *p, const lz_plan_costs *c, int n_ranks, const char *placement) {
    memset(p, 0, sizeof *p);
    p->n_ranks = n_ranks;
    p->n_layers = c->n_layers;
    for (int i = 0; i < LZ_MAX_LAYERS; i++)
        p->layer_rank[i] = -1;
    p->embed_rank = p->head_rank = -1;
    snprintf(p->placement, sizeof p->placement, "%s", placement);
}

static lz_status check_ranks(const lz_plan_costs *c, int n_ranks) {
    if (n_ranks < 1 || n_ranks > LZ_MAX_RANKS)
        return lz_fail(LZ_ERR_INPUT, "plan: %d ranks (1..%d supported)", n_ranks, LZ_MAX_RANKS);
    if (n_ranks > c->n_layers)
        return lz_fail(LZ_ERR_INPUT, "plan: %d layers cannot be split over %d ranks (every rank needs a layer)",
                       c->n_layers, n_ranks);
    return LZ_OK;
}

/* When nothing fits: the plan with no memory limit, accounted, so that
 * validation names the rank that overflows and by how much. */
static lz_status explain_no_fit(lz_plan *p, const lz_plan_costs *c, const uint64_t *free_bytes) {
    lz_plan_account(p, c, free_bytes);
    lz_status s = lz_plan_validate(p);
    if (s != LZ_OK) {
        lz_error_prefix("no %s placement of %d layers on %d ranks fits (context %llu, batch %d); the best one: ",
                        p->placement, c->n_layers, p->n_ranks, (unsigned long long)c->context, c->batch);
        return s;
    }
    return lz_fail(LZ_ERR_INPUT, "plan: no %s placement fits the ranks' memory", p->placement);
}

lz_status lz_plan_balanced(const lz_plan_costs *c, int n_ranks, const uint64_t *free_bytes, lz_plan *out) {
    LZ_TRY(check_ranks(c, n_ranks));
    plan_init(out, c, n_ranks, "balanced");
    uint64_t cost[LZ_MAX_LAYERS], mem[LZ_MAX_LAYERS];
    for (int i = 0; i < c->n_layers; i++)
        cost[i] = item_step_cost(c, i), mem[i] = item_memory(c, i);
    lz_status st;
    uint64_t best = partition(cost, mem, c->n_layers, n_ranks, free_bytes, out->layer_rank, &st);
    LZ_TRY(st);
    out->embed_rank = 0;
    out->head_rank = n_ranks - 1;
    if (best == INF) {
        partition(cost, mem, c->n_layers, n_ranks, NULL, out->layer_rank, &st);
        LZ_TRY(st);
        return explain_no_fit(out, c, free_bytes);
    }
    lz_plan_account(out, c, free_bytes);
    return lz_plan_validate(out);
}

/* Layers of one kind, in order, over ranks [r0, r0 + k). */
static uint64_t place_group(const lz_plan_costs *c, bool softmax, int r0, int k, const uint64_t *cap, lz_plan *p,
                            lz_status *st) {
    uint64_t cost[LZ_MAX_LAYERS], mem[LZ_MAX_LAYERS];
    int idx[LZ_MAX_LAYERS], group[LZ_MAX_LAYERS], n = 0;
    for (int i = 0; i < c->n_layers; i++)
        if (c->softmax[i] == softmax) {
            idx[n] = i;
            mem[n] = item_memory(c, i);
            cost[n++] = item_step_cost(c, i);
        }
    const uint64_t m = partition(cost, mem, n, k, cap ? cap + r0 : NULL, group, st);
    if (m != INF)
        for (int t = 0; t < n; t++)
            p->layer_rank[idx[t]] = r0 + group[t];
    return m;
}

lz_status lz_plan_by_type(const lz_plan_costs *c, int n_ranks, const uint64_t *free_bytes, lz_plan *out) {
    LZ_TRY(check_ranks(c, n_ranks));
    int n_soft = 0;
    uint64_t cost_soft = 0, cost_all = 0;
    for (int i = 0; i < c->n_layers; i++) {
        n_soft += c->softmax[i];
        cost_soft += c->softmax[i] ? item_step_cost(c, i) : 0;
        cost_all += item_step_cost(c, i);
    }
    const int n_liz = c->n_layers - n_soft;
    if (n_soft == 0 || n_liz == 0 || n_ranks == 1) { // one kind (or one rank): nothing to separate
        LZ_TRY(lz_plan_balanced(c, n_ranks, free_bytes, out));
        snprintf(out->placement, sizeof out->placement, "by-type");
        return LZ_OK;
    }
    // The group of layer 0 takes the low ranks (the embedding stays on rank 0).
    const bool first_soft = c->softmax[0];
    const int n_first = first_soft ? n_soft : n_liz, n_second = c->n_layers - n_first;
    const double share_first = (double)(first_soft ? cost_soft : cost_all - cost_soft) / (double)cost_all;
    // Every split with at least one rank (and one layer per rank) each side; the
    // one whose largest rank is smallest wins, ties to the split nearest the cost proportion.
    int best_k = -1;
    uint64_t best_m = INF;
    double best_dist = 0;
    for (int pass = 0; pass < 2 && best_k < 0; pass++) { // pass 1: no memory limit, to explain a failure
        const uint64_t *cap = pass == 0 ? free_bytes : NULL;
        for (int k = 1; k < n_ranks; k++) {
            if (k > n_first || n_ranks - k > n_second)
                continue;
            lz_plan trial;
            plan_init(&trial, c, n_ranks, "by-type");
            lz_status st;
            uint64_t m1 = place_group(c, first_soft, 0, k, cap, &trial, &st);
            LZ_TRY(st);
            uint64_t m2 = m1 == INF ? INF : place_group(c, !first_soft, k, n_ranks - k, cap, &trial, &st);
            LZ_TRY(st);
            if (m2 == INF)
                continue;
            const uint64_t m = m1 > m2 ? m1 : m2;
            const double dist = (double)k / n_ranks - share_first;
            const double adist = dist < 0 ? -dist : dist;
            if (m < best_m || (m == best_m && adist < best_dist))
                best_m = m, best_k = k, best_dist = adist;
        }
        if (best_k >= 0) {
            plan_init(out, c, n_ranks, "by-type");
            lz_status st;
            place_group(c, first_soft, 0, best_k, cap, out, &st);
            LZ_TRY(st);
            place_group(c, !first_soft, best_k, n_ranks - best_k, cap, out, &st);
            LZ_TRY(st);
            out->embed_rank = out->layer_rank[0];
            out->head_rank = out->layer_rank[c->n_layers - 1];
            if (pass == 1)
                return explain_no_fit(out, c, free_bytes);
        }
    }
    if (best_k < 0)
        return lz_fail(LZ_ERR_INTERNAL, "plan: by-type found no split of %d ranks", n_ranks);
    lz_plan_account(out, c, free_bytes);
    return lz_plan_validate(out);
}

lz_status lz_plan_make(const char *placement, const lz_plan_costs *c, int n_ranks, const uint64_t *free_bytes,
                       lz_plan *out) {
    if (strcmp(placement, "balanced") == 0)
        return lz_plan_balanced(c, n_ranks, free_bytes, out);
    if (strcmp(placement, "by-type") == 0)
        return lz_plan_by_type(c, n_ranks, free_bytes, out);
    return lz_fail(LZ_ERR_INPUT, "--placement: unknown placement '%s' (balanced, by-type)", placement);
}

lz_status lz_plan_choose(const lz_plan_costs *c, const char *placement, const char *plan_file, int n_ranks,
                         const uint64_t *free_bytes, lz_plan *out) {
    if (!plan_file)
        LZ_TRY(lz_plan_make(placement ? placement : "balanced", c, n_ranks, free_bytes, out));
    else {
        LZ_TRY(lz_plan_load_text(plan_file, c->n_layers, out));
        if (out->n_ranks != n_ranks)
            return lz_fail(LZ_ERR_INPUT, "--plan %s: the plan has %d ranks, but mpirun started %d", plan_file,
                           out->n_ranks, n_ranks);
        lz_plan_account(out, c, free_bytes);
    }
    return lz_plan_validate(out);
}

/* ---- runs and visit order ----------------------------------------------------- */

void lz_plan_runs(const lz_plan *p, int rank, lz_layer_run *runs, int cap, int *n) {
    int count = 0;
    for (int i = 0; i < p->n_layers; i++) {
        if (p->layer_rank[i] != rank)
            continue;
        if (i > 0 && p->layer_rank[i - 1] == rank) {
            if (count <= cap)
                runs[count - 1].count++;
            continue;
        }
        if (count < cap)
            runs[count] = (lz_layer_run){i, 1};
        count++;
    }
    *n = count;
}

void lz_plan_visit_order(const lz_plan *p, lz_plan_visit *visits, int cap, int *n) {
    int count = 0, run_of_rank[LZ_MAX_RANKS] = {0};
#define PUSH(v)                  \
    do {                         \
        if (count < cap)         \
            visits[count] = (v); \
        count++;                 \
    } while (0)
    if (p->n_layers > 0 && p->embed_rank != p->layer_rank[0])
        PUSH(((lz_plan_visit){p->embed_rank, -1, 0, 0, true, false}));
    for (int i = 0; i < p->n_layers;) {
        const int r = p->layer_rank[i];
        int j = i;
        while (j < p->n_layers && p->layer_rank[j] == r)
            j++;
        const int run = (r >= 0 && r < LZ_MAX_RANKS) ? run_of_rank[r]++ : -1;
        PUSH(((lz_plan_visit){r, run, i, j - i, i == 0 && p->embed_rank == r,
                              j == p->n_layers && p->head_rank == r}));
        i = j;
    }
    if (p->n_layers > 0 && p->head_rank != p->layer_rank[p->n_layers - 1])
        PUSH(((lz_plan_visit){p->head_rank, -1, p->n_layers, 0, false, true}));
#undef PUSH
    *n = count;
}

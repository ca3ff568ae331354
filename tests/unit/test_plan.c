/* test_plan.c - placement plans: the cost model against the preset's tensor
 * list, balanced (contiguous, optimal, better than an equal split), by-type
 * (no rank mixes kinds), memory limits, the text form and the PipelinePlan
 * message (round trips and every rejection), runs and visit order. */
#include <stdio.h>  // open_memstream
#include <stdlib.h> // free
#include <string.h> // strlen, memcpy

#include "lizard.pb-c.h"   // Lizard__PipelinePlan (to craft bad messages)
#include "model_presets.h" // lz_preset_find, lz_preset_write_config, lz_preset_tensors
#include "plan.h"
#include "test_util.h"

static const uint64_t GB = 1000000000ull;

static void fill(uint64_t *free_bytes, int n, uint64_t v) {
    for (int i = 0; i < n; i++)
        free_bytes[i] = v;
}

static uint64_t max_total(const lz_plan *p) {
    uint64_t m = 0;
    for (int r = 0; r < p->n_ranks; r++)
        m = lz_plan_rank_total(p, r) > m ? lz_plan_rank_total(p, r) : m;
    return m;
}

/* The largest rank's decode-step bytes: its layers' weights and state and the LM head, not the
 * embedding table (a step reads one row of it per token). */
static uint64_t max_step(const lz_plan *p, const lz_plan_costs *c) {
    uint64_t per[LZ_MAX_RANKS] = {0}, m = 0;
    for (int i = 0; i < c->n_layers; i++)
        per[p->layer_rank[i]] += c->layer_weight[i] + (uint64_t)c->batch * c->layer_state[i];
    per[p->head_rank] += c->head_weight;
    for (int r = 0; r < p->n_ranks; r++)
        m = per[r] > m ? per[r] : m;
    return m;
}

static bool contiguous(const lz_plan *p) {
    if (p->layer_rank[0] != 0 || p->layer_rank[p->n_layers - 1] != p->n_ranks - 1)
        return false;
    for (int i = 1; i < p->n_layers; i++)
        if (p->layer_rank[i] != p->layer_rank[i - 1] && p->layer_rank[i] != p->layer_rank[i - 1] + 1)
            return false;
    return true;
}

static bool same_plan(const lz_plan *a, const lz_plan *b) {
    if (a->n_ranks != b->n_ranks || a->n_layers != b->n_layers || a->embed_rank != b->embed_rank ||
        a->head_rank != b->head_rank)
        return false;
    for (int i = 0; i < a->n_layers; i++)
        if (a->layer_rank[i] != b->layer_rank[i])
            return false;
    return true;
}

static lz_plan_costs costs;
static lz_plan plan, plan2;

/* The config cost model agrees with the preset's own tensor list and the state formulas. */
static void test_cost_model(void) {
    const char *names[] = {"llama3-70b-hybrid", "llama3-8b-hybrid", "llama3-8b-teacher"};
    for (int k = 0; k < 3; k++) {
        lz_config cfg;
        CHECK(lz_preset_config(names[k], "test", &cfg) == LZ_OK);
        CHECK(lz_plan_costs_from_config(&cfg, 1000, 1, &costs) == LZ_OK);
        uint64_t sum = costs.embed_weight + costs.head_weight;
        for (int i = 0; i < costs.n_layers; i++)
            sum += costs.layer_weight[i];
        lz_tensor_list list;
        CHECK(lz_preset_tensors(lz_preset_find(names[k]), LZ_DTYPE_BF16, &list) == LZ_OK);
        CHECK_MSG(sum == lz_tensor_list_bytes(&list), "%s: cost model %llu bytes, tensor list %llu", names[k],
                  (unsigned long long)sum, (unsigned long long)lz_tensor_list_bytes(&list));
        lz_tensor_list_free(&list);
    }
    lz_config cfg;
    CHECK(lz_preset_config("llama3-70b-hybrid", "test", &cfg) == LZ_OK);
    CHECK(lz_plan_layer_state_bytes(&cfg, 0, 1000) == 2ull * 1000 * 8 * 128 * 2); // softmax: KV grows
    CHECK(lz_plan_layer_state_bytes(&cfg, 0, 2000) == 2 * lz_plan_layer_state_bytes(&cfg, 0, 1000));
    const uint64_t lizard = 8ull * 256 * 129 * 4 + 2ull * 128 * 8 * 128 * 2; // S, z fp32 + ring bf16
    CHECK(lz_plan_layer_state_bytes(&cfg, 1, 1000) == lizard);
    CHECK(lz_plan_layer_state_bytes(&cfg, 1, 131072) == lizard); // constant
    CHECK_FAILS_WITH(lz_plan_costs_from_config(&cfg, 1000, 0, &costs), LZ_ERR_INPUT, "batch 0");
}

/* Brute force: the smallest largest-group sum over every contiguous split of n items into k groups. */
static uint64_t brute(const uint64_t *c, int n, int k, int start) {
    if (k == 1) {
        uint64_t s = 0;
        for (int i = start; i < n; i++)
            s += c[i];
        return s;
    }
    uint64_t best = UINT64_MAX, s = 0;
    for (int end = start + 1; end <= n - (k - 1); end++) {
        s += c[end - 1];
        uint64_t rest = brute(c, n, k - 1, end), m = s > rest ? s : rest;
        best = m < best ? m : best;
    }
    return best;
}

static void test_balanced_optimal(void) {
    uint64_t free_bytes[LZ_MAX_RANKS];
    fill(free_bytes, LZ_MAX_RANKS, UINT64_MAX / 4);
    unsigned seed = 12345;
    for (int trial = 0; trial < 200; trial++) {
        memset(&costs, 0, sizeof costs);
        costs.n_layers = 2 + trial % 11;
        costs.batch = 1 + trial % 3;
        uint64_t item[LZ_MAX_LAYERS];
        for (int i = 0; i < costs.n_layers; i++) {
            seed = seed * 1103515245u + 12345u;
            costs.layer_weight[i] = 1 + (seed >> 8) % 1000;
            seed = seed * 1103515245u + 12345u;
            costs.layer_state[i] = (seed >> 8) % 300;
            costs.softmax[i] = (seed >> 20) & 1;
            item[i] = costs.layer_weight[i] + (uint64_t)costs.batch * costs.layer_state[i];
        }
        costs.embed_weight = 500, costs.head_weight = 70; // the embedding: memory, no step cost
        item[costs.n_layers - 1] += 70;
        const int k = 1 + trial % costs.n_layers;
        CHECK(lz_plan_balanced(&costs, k, free_bytes, &plan) == LZ_OK);
        CHECK(contiguous(&plan));
        CHECK_MSG(max_step(&plan, &costs) == brute(item, costs.n_layers, k, 0), "trial %d: %llu vs %llu", trial,
                  (unsigned long long)max_step(&plan, &costs), (unsigned long long)brute(item, costs.n_layers, k, 0));
        CHECK(lz_plan_by_type(&costs, k, free_bytes, &plan) == LZ_OK);
        for (int i = 0; i < costs.n_layers; i++)
            for (int j = 0; j < costs.n_layers; j++)
                if (plan.layer_rank[i] == plan.layer_rank[j] && costs.softmax[i] != costs.softmax[j] && k > 1)
                    CHECK_MSG(0, "trial %d: layers %d and %d of different kinds on rank %d", trial, i, j,
                              plan.layer_rank[i]);
    }
    // per-rank memory: 6 layers of 10 bytes, rank 0 may hold 25 -> 2 layers there, 4 on rank 1
    memset(&costs, 0, sizeof costs);
    costs.n_layers = 6;
    costs.batch = 1;
    for (int i = 0; i < 6; i++)
        costs.layer_weight[i] = 10;
    uint64_t small[2] = {25, 1000};
    CHECK(lz_plan_balanced(&costs, 2, small, &plan) == LZ_OK);
    CHECK(plan.layer_rank[1] == 0 && plan.layer_rank[2] == 1);
    uint64_t tiny[2] = {25, 35};
    CHECK_FAILS_WITH(lz_plan_balanced(&costs, 2, tiny, &plan), LZ_ERR_INPUT, "does not fit");
    // the embedding counts as memory: rank 0 may hold 25 bytes, the table takes 8 of them -> 1 layer there
    costs.embed_weight = 8;
    CHECK(lz_plan_balanced(&costs, 2, small, &plan) == LZ_OK);
    CHECK(plan.layer_rank[0] == 0 && plan.layer_rank[1] == 1);
    costs.embed_weight = 0;
    CHECK_FAILS_WITH(lz_plan_balanced(&costs, 7, free_bytes, &plan), LZ_ERR_INPUT, "6 layers cannot be split over 7");
    CHECK_FAILS_WITH(lz_plan_make("round-robin", &costs, 2, free_bytes, &plan), LZ_ERR_INPUT, "round-robin");
}

/* Softmax layers clustered at the front, long context: equal layer counts overload rank 0. */
static void test_balanced_beats_equal_split(void) {
    lz_config cfg;
    CHECK(lz_preset_config("llama3-70b-hybrid", "test", &cfg) == LZ_OK);
    char spec[256] = "";
    for (int i = 0; i < 16; i++)
        snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "%s%d", i ? "," : "", i);
    CHECK(lz_config_set_softmax_layers(&cfg, spec) == LZ_OK);
    CHECK(lz_plan_costs_from_config(&cfg, 131072, 8, &costs) == LZ_OK);
    uint64_t free_bytes[LZ_MAX_RANKS];
    fill(free_bytes, LZ_MAX_RANKS, 1000 * GB);
    CHECK(lz_plan_balanced(&costs, 4, free_bytes, &plan) == LZ_OK);
    CHECK(contiguous(&plan));
    CHECK(lz_plan_validate(&plan) == LZ_OK);
    plan2 = plan;
    for (int i = 0; i < 80; i++)
        plan2.layer_rank[i] = i / 20;
    lz_plan_account(&plan2, &costs, free_bytes);
    CHECK_MSG(max_total(&plan) * 5 < max_total(&plan2) * 4, "balanced %.1f GB vs equal split %.1f GB",
              max_total(&plan) / 1e9, max_total(&plan2) / 1e9);
    int on0 = 0; // rank 0 took fewer than its equal share of layers
    for (int i = 0; i < 80; i++)
        on0 += plan.layer_rank[i] == 0;
    CHECK(on0 < 20);
}

/* The 70B hybrid on 4 and 8 H200s (141 GB x 0.9). */
static void test_70b(void) {
    lz_config cfg;
    CHECK(lz_preset_config("llama3-70b-hybrid", "test", &cfg) == LZ_OK);
    uint64_t free_bytes[LZ_MAX_RANKS];
    fill(free_bytes, LZ_MAX_RANKS, (uint64_t)(141e9 * 0.9));
    const int ranks[] = {4, 8};
    const uint64_t ctx[] = {8192, 131072};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int by_type = 0; by_type < 2; by_type++) {
                CHECK(lz_plan_costs_from_config(&cfg, ctx[b], 1, &costs) == LZ_OK);
                lz_status s = by_type ? lz_plan_by_type(&costs, ranks[a], free_bytes, &plan)
                                      : lz_plan_balanced(&costs, ranks[a], free_bytes, &plan);
                CHECK_MSG(s == LZ_OK, "%d ranks, context %llu, %s: %s", ranks[a], (unsigned long long)ctx[b],
                          by_type ? "by-type" : "balanced", lz_error_message());
                uint64_t weights = 0, all = 0;
                for (int r = 0; r < plan.n_ranks; r++) {
                    weights += plan.weight_bytes[r];
                    all += lz_plan_rank_total(&plan, r);
                    CHECK(lz_plan_rank_total(&plan, r) <= free_bytes[r]);
                }
                CHECK(weights > 140 * GB && weights < 142 * GB);
                // what the planners balance: a decode step's bytes (the embedding table is memory only)
                const uint64_t steps = all - costs.embed_weight;
                const double ratio = (double)max_step(&plan, &costs) / ((double)steps / ranks[a]);
                CHECK_MSG(ratio < (by_type ? 1.5 : 1.15), "%d ranks, context %llu, %s: largest rank's step %.2f x the mean",
                          ranks[a], (unsigned long long)ctx[b], by_type ? "by-type" : "balanced", ratio);
            }
    // 8 x 141 GB cannot hold a batch of 64 sequences of 128K on the teacher
    CHECK(lz_preset_config("llama3-70b-teacher", "test", &cfg) == LZ_OK);
    CHECK(lz_plan_costs_from_config(&cfg, 131072, 64, &costs) == LZ_OK);
    CHECK_FAILS_WITH(lz_plan_balanced(&costs, 8, free_bytes, &plan), LZ_ERR_INPUT, "does not fit");
}

static char *to_text(const lz_plan *p, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    CHECK(lz_plan_write_text(p, f) == LZ_OK);
    fclose(f);
    return buf;
}

static void test_text_and_proto_round_trip(void) {
    lz_config cfg;
    CHECK(lz_preset_config("llama3-70b-hybrid", "test", &cfg) == LZ_OK);
    CHECK(lz_plan_costs_from_config(&cfg, 32768, 4, &costs) == LZ_OK);
    uint64_t free_bytes[LZ_MAX_RANKS];
    fill(free_bytes, LZ_MAX_RANKS, 126 * GB);
    for (int by_type = 0; by_type < 2; by_type++) {
        CHECK(lz_plan_make(by_type ? "by-type" : "balanced", &costs, 8, free_bytes, &plan) == LZ_OK);
        size_t len;
        char *text = to_text(&plan, &len);
        CHECK(lz_plan_parse_text(text, len, "mem", 80, &plan2) == LZ_OK);
        CHECK(same_plan(&plan, &plan2));
        CHECK(strcmp(plan2.placement, "file") == 0);
        lz_plan_account(&plan2, &costs, free_bytes);
        CHECK(lz_plan_validate(&plan2) == LZ_OK);
        CHECK(memcmp(plan.weight_bytes, plan2.weight_bytes, sizeof plan.weight_bytes) == 0);
        free(text);

        uint8_t *buf;
        CHECK(lz_plan_pack(&plan, &buf, &len) == LZ_OK);
        memset(&plan2, 0x5a, sizeof plan2);
        CHECK(lz_plan_unpack(buf, len, &plan2) == LZ_OK);
        CHECK(same_plan(&plan, &plan2));
        CHECK(strcmp(plan.placement, plan2.placement) == 0 && plan2.context == 32768 && plan2.batch == 4);
        for (int r = 0; r < 8; r++)
            CHECK(plan.weight_bytes[r] == plan2.weight_bytes[r] && plan.state_bytes[r] == plan2.state_bytes[r] &&
                  plan.free_bytes[r] == plan2.free_bytes[r] && plan.compute_share[r] == plan2.compute_share[r]);
        // every truncation is rejected or (for a prefix that happens to parse) validated, never a crash
        // (only the prefix that drops the last field, batch, may still be a valid plan)
        int accepted = 0;
        for (size_t cut = 0; cut < len; cut++) {
            lz_status s = lz_plan_unpack(buf, cut, &plan2);
            CHECK(s == LZ_ERR_INPUT || s == LZ_OK);
            accepted += s == LZ_OK;
            lz_error_clear();
        }
        CHECK(accepted <= 1);
        free(buf);
    }
    CHECK_FAILS_WITH(lz_plan_unpack((const uint8_t *)"\xff\xff\xff", 3, &plan2), LZ_ERR_INPUT, "malformed");
}

/* Messages a peer could send: each rejection names the field. */
static void test_bad_messages(void) {
    int32_t layer_rank[4] = {0, 0, 1, 1};
    Lizard__RankCost c0 = LIZARD__RANK_COST__INIT, c1 = LIZARD__RANK_COST__INIT;
    c0.rank = 0, c1.rank = 1;
    c0.free_bytes = c1.free_bytes = 100;
    c0.compute_share = c1.compute_share = 0.5;
    Lizard__RankCost *cs[2] = {&c0, &c1};
    Lizard__PipelinePlan m = LIZARD__PIPELINE_PLAN__INIT;
    m.version = 1, m.n_ranks = 2, m.n_layer_rank = 4, m.layer_rank = layer_rank, m.embed_rank = 0, m.head_rank = 1;
    m.placement = "file", m.n_rank_costs = 2, m.rank_costs = cs, m.batch = 1;
    uint8_t buf[512];
    size_t len;
#define UNPACK_FAILS(needle)                                        \
    do {                                                            \
        len = lizard__pipeline_plan__pack(&m, buf);                 \
        CHECK_FAILS_WITH(lz_plan_unpack(buf, len, &plan2), LZ_ERR_INPUT, needle); \
    } while (0)
    len = lizard__pipeline_plan__pack(&m, buf);
    CHECK(lz_plan_unpack(buf, len, &plan2) == LZ_OK);
    m.version = 2;
    UNPACK_FAILS("version 2");
    m.version = 1;
    layer_rank[3] = 5;
    UNPACK_FAILS("layer 3 on rank 5");
    layer_rank[3] = 1;
    m.head_rank = -1;
    UNPACK_FAILS("LM head on rank -1");
    m.head_rank = 1;
    m.n_rank_costs = 1;
    UNPACK_FAILS("1 rank costs for 2 ranks");
    m.n_rank_costs = 2;
    c1.rank = 0;
    UNPACK_FAILS("rank cost entry 1");
    c1.rank = 1;
    m.n_ranks = 0;
    UNPACK_FAILS("0 ranks");
    m.n_ranks = 2;
    c1.weight_bytes = 101;
    UNPACK_FAILS("rank 1 does not fit");
    c1.weight_bytes = 0;
    layer_rank[2] = layer_rank[3] = 0;
    UNPACK_FAILS("rank 1 owns no layer");
    layer_rank[2] = layer_rank[3] = 1;
    m.n_layer_rank = 0;
    UNPACK_FAILS("0 layers");
#undef UNPACK_FAILS
}

static void test_validation(void) {
    lz_config cfg;
    CHECK(lz_preset_config("tiny-hybrid", "test", &cfg) == LZ_OK);
    CHECK(lz_plan_costs_from_config(&cfg, 1024, 1, &costs) == LZ_OK);
    uint64_t free_bytes[LZ_MAX_RANKS];
    fill(free_bytes, LZ_MAX_RANKS, GB);
    CHECK(lz_plan_balanced(&costs, 2, free_bytes, &plan) == LZ_OK);
    plan2 = plan;
    plan2.layer_rank[3] = -1;
    CHECK_FAILS_WITH(lz_plan_validate(&plan2), LZ_ERR_INPUT, "layer 3 is not assigned");
    plan2 = plan;
    plan2.layer_rank[2] = 7;
    CHECK_FAILS_WITH(lz_plan_validate(&plan2), LZ_ERR_INPUT, "layer 2 on rank 7, out of range (plan has 2 ranks)");
    plan2 = plan;
    plan2.embed_rank = -1;
    CHECK_FAILS_WITH(lz_plan_validate(&plan2), LZ_ERR_INPUT, "embedding is not assigned");
    plan2 = plan;
    plan2.head_rank = 2;
    CHECK_FAILS_WITH(lz_plan_validate(&plan2), LZ_ERR_INPUT, "LM head on rank 2");
    plan2 = plan;
    plan2.layer_rank[2] = plan2.layer_rank[3] = 0;
    CHECK_FAILS_WITH(lz_plan_validate(&plan2), LZ_ERR_INPUT, "rank 1 owns no layer");
    plan2 = plan;
    uint64_t small[2] = {GB, 1000};
    lz_plan_account(&plan2, &costs, small);
    CHECK_FAILS_WITH(lz_plan_validate(&plan2), LZ_ERR_INPUT, "rank 1 does not fit");

    // the text form: each malformed line named by file and line
    struct {
        const char *text, *needle;
    } bad[] = {
        {"rank 0: embed 0-1\nrank 1: 1-3 head\n", "plan.txt:2: layer 1 is already on rank 0 (line 1)"},
        {"rank 0: embed 0-1\nrank 1: 2-40 head\n", "plan.txt:2: layer 4 out of range (model has 4 layers)"},
        {"# hi\n\nrank 0: embed 0-1\nfoo bar\n", "plan.txt:4: expected 'rank N: items', got 'foo bar'"},
        {"rank x: 0\n", "plan.txt:1: bad rank 'x'"},
        {"rank 0: 0-1, 2x\n", "plan.txt:1: bad item '2x'"},
        {"rank 0: 3-1\n", "plan.txt:1: range 3-1 runs backwards"},
        {"rank 0: 0-1\nrank 0: 2-3\n", "plan.txt:2: rank 0 already has a line (line 1)"},
        {"rank 0: embed 0-1\nrank 1: embed 2-3\n", "plan.txt:2: embed is already on rank 0 (line 1)"},
        {"rank 0: head 0-1\nrank 1: 2-3 head\n", "plan.txt:2: head is already on rank 0 (line 1)"},
        {"rank 0: 0-1\nrank 2: 2-3\n", "plan.txt: rank 1 has no line"},
        {"rank 300: 0\n", "plan.txt:1: rank 300 out of range"},
        {"# nothing\n", "plan.txt: no 'rank N:' lines"},
        {"rank 0 0-3\n", "plan.txt:1: expected 'rank N: items'"},
        {"rank 0: 99999999999\n", "plan.txt:1: bad item '99999999999'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_FAILS_WITH(lz_plan_parse_text(bad[i].text, strlen(bad[i].text), "plan.txt", 4, &plan2), LZ_ERR_INPUT,
                         bad[i].needle);
    // parsed but invalid: a layer on no line
    const char *gap = "rank 0: embed 0, 1\nrank 1: 3 head\n";
    CHECK(lz_plan_parse_text(gap, strlen(gap), "plan.txt", 4, &plan2) == LZ_OK);
    lz_plan_account(&plan2, &costs, free_bytes);
    CHECK_FAILS_WITH(lz_plan_validate(&plan2), LZ_ERR_INPUT, "layer 2 is not assigned");
    const char *nohead = "rank 0: embed 0-1\nrank 1: 2-3\n";
    CHECK(lz_plan_parse_text(nohead, strlen(nohead), "plan.txt", 4, &plan2) == LZ_OK);
    lz_plan_account(&plan2, &costs, free_bytes);
    CHECK_FAILS_WITH(lz_plan_validate(&plan2), LZ_ERR_INPUT, "LM head is not assigned");
    CHECK_FAILS_WITH(lz_plan_load_text("/nonexistent/plan.txt", 4, &plan2), LZ_ERR_IO, "/nonexistent/plan.txt");
}

/* A hand-written interleaved plan: runs per rank and the order activations visit them. */
static void test_runs_and_visits(void) {
    lz_config cfg;
    CHECK(lz_preset_config("tiny-hybrid", "test", &cfg) == LZ_OK);
    cfg.num_hidden_layers = 8;
    for (int i = 0; i < 8; i++)
        cfg.softmax_layer[i] = i % 2 == 0;
    CHECK(lz_plan_costs_from_config(&cfg, 256, 1, &costs) == LZ_OK);
    uint64_t free_bytes[LZ_MAX_RANKS];
    fill(free_bytes, LZ_MAX_RANKS, GB);
    const char *text = "# interleaved\nrank 0: embed 0-1, 6   # two runs\nrank 1: 2,3 7 head\nrank 2: 4-5\n";
    CHECK(lz_plan_parse_text(text, strlen(text), "x.txt", 8, &plan) == LZ_OK);
    lz_plan_account(&plan, &costs, free_bytes);
    CHECK(lz_plan_validate(&plan) == LZ_OK);
    CHECK(plan.n_ranks == 3);
    lz_layer_run runs[8];
    int n;
    lz_plan_runs(&plan, 0, runs, 8, &n);
    CHECK(n == 2 && runs[0].first == 0 && runs[0].count == 2 && runs[1].first == 6 && runs[1].count == 1);
    lz_plan_runs(&plan, 1, runs, 8, &n);
    CHECK(n == 2 && runs[0].first == 2 && runs[0].count == 2 && runs[1].first == 7 && runs[1].count == 1);
    lz_plan_runs(&plan, 2, runs, 1, &n);
    CHECK(n == 1 && runs[0].first == 4 && runs[0].count == 2);
    lz_plan_runs(&plan, 0, runs, 1, &n); // a short array: the count is still right
    CHECK(n == 2 && runs[0].count == 2);
    lz_plan_visit v[10];
    lz_plan_visit_order(&plan, v, 10, &n);
    const lz_plan_visit want[] = {{0, 0, 0, 2, true, false},
                                  {1, 0, 2, 2, false, false},
                                  {2, 0, 4, 2, false, false},
                                  {0, 1, 6, 1, false, false},
                                  {1, 1, 7, 1, false, true}};
    CHECK(n == 5);
    for (int i = 0; i < 5 && i < n; i++)
        CHECK_MSG(v[i].rank == want[i].rank && v[i].run == want[i].run && v[i].first == want[i].first &&
                      v[i].count == want[i].count && v[i].embed == want[i].embed && v[i].head == want[i].head,
                  "visit %d: rank %d run %d layers %d+%d", i, v[i].rank, v[i].run, v[i].first, v[i].count);
    // embedding and head away from the first and last layers' ranks: visits of their own
    const char *apart = "rank 0: 0-3\nrank 1: embed 4-7\nrank 2: head 5\n";
    CHECK_FAILS_WITH(lz_plan_parse_text(apart, strlen(apart), "y.txt", 8, &plan), LZ_ERR_INPUT,
                     "y.txt:3: layer 5 is already on rank 1 (line 2)");
    apart = "rank 0: 0-3\nrank 1: embed 4-6\nrank 2: head 7\n";
    CHECK(lz_plan_parse_text(apart, strlen(apart), "y.txt", 8, &plan) == LZ_OK);
    plan.head_rank = 0;
    lz_plan_visit_order(&plan, v, 10, &n);
    CHECK(n == 5 && v[0].rank == 1 && v[0].run == -1 && v[0].embed && v[0].count == 0);
    CHECK(n == 5 && v[4].rank == 0 && v[4].run == -1 && v[4].head && v[4].first == 8);
    CHECK(!v[1].embed && v[1].rank == 0 && v[3].rank == 2 && !v[3].head);
}

int main(void) {
    test_cost_model();
    test_balanced_optimal();
    test_balanced_beats_equal_split();
    test_70b();
    test_text_and_proto_round_trip();
    test_bad_messages();
    test_validation();
    test_runs_and_visits();
    return lz_test_finish("test_plan");
}

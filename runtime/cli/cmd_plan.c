/* cmd_plan.c - `lizard plan`: the placement of a model (a folder's config.json
 * or a named shape: no weights are read) over N ranks, in the text form that
 * `--plan FILE` reads, then what each rank holds: layers and their kinds,
 * weight bytes, state bytes per sequence at the target context, the total
 * for the batch, and whether it fits the rank's memory; then what the bytes are
 * counted in and whose memory they are held against. */
#include <stdio.h>  // printf, snprintf
#include <stdlib.h> // strtod
#include <string.h> // strcmp, strchr

#include "atomic_file.h"   // lz_atomic_open, lz_atomic_commit
#include "cli_options.h"   // lz_parse_command
#include "commands.h"      // lz_cmd_plan
#include "model_presets.h" // lz_preset_find, lz_preset_write_config
#include "plan.h"          // lz_plan, planners
#include "plan_hosts.h"    // lz_hostmap_load, lz_plan_place_on_hosts

#define GPU_GB 141.0                   /* an H200's memory */
#define DEFAULT_GPU_GB (GPU_GB * 0.9) /* less a tenth for activations, workspace and the CUDA context */

/* "GB" for every rank, or "GB,GB,..." one per rank. */
static lz_status parse_memory(const char *spec, int n_ranks, uint64_t *free_bytes) {
    double gb[LZ_MAX_RANKS];
    int n = 0;
    for (const char *p = spec;;) {
        char *end;
        const double v = strtod(p, &end);
        if (end == p || !(v > 0 && v < 1e6) || (*end != ',' && *end != '\0'))
            return lz_fail(LZ_ERR_INPUT, "lizard plan: --gpu-memory: bad size in '%s' (GB, or one GB value per rank "
                                         "separated by commas)", spec);
        if (n == LZ_MAX_RANKS)
            return lz_fail(LZ_ERR_INPUT, "lizard plan: --gpu-memory: more than %d values", LZ_MAX_RANKS);
        gb[n++] = v;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    if (n != 1 && n != n_ranks)
        return lz_fail(LZ_ERR_INPUT, "lizard plan: --gpu-memory: %d values for %d ranks (give one, or one per rank)",
                       n, n_ranks);
    for (int r = 0; r < n_ranks; r++)
        free_bytes[r] = (uint64_t)((n == 1 ? gb[0] : gb[r]) * 1e9);
    return LZ_OK;
}

/* "embed 0-19, 40 head" for one rank. */
static void rank_items(const lz_plan *p, int r, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
#define APPEND(...)                                                      \
    do {                                                                 \
        if (used < cap) {                                                \
            int k_ = snprintf(buf + used, cap - used, __VA_ARGS__);      \
            used += k_ > 0 ? (size_t)k_ : 0;                             \
        }                                                                \
    } while (0)
    if (p->embed_rank == r)
        APPEND("embed");
    lz_layer_run runs[LZ_MAX_LAYERS];
    int n;
    lz_plan_runs(p, r, runs, LZ_MAX_LAYERS, &n);
    for (int i = 0; i < n; i++) {
        const char *sep = i ? ", " : (used ? " " : "");
        if (runs[i].count > 1)
            APPEND("%s%d-%d", sep, runs[i].first, runs[i].first + runs[i].count - 1);
        else
            APPEND("%s%d", sep, runs[i].first);
    }
    if (p->head_rank == r)
        APPEND("%shead", used ? " " : "");
#undef APPEND
}

static void print_table(const lz_plan *p, const lz_plan_costs *c) {
    static char items[LZ_MAX_RANKS][512];
    int w = 4;
    for (int r = 0; r < p->n_ranks; r++) {
        rank_items(p, r, items[r], sizeof items[r]);
        if (strlen(items[r]) > 24) { // the text form above lists them all; here a summary
            lz_layer_run runs[LZ_MAX_LAYERS];
            int n_runs, n_layers = 0;
            lz_plan_runs(p, r, runs, LZ_MAX_LAYERS, &n_runs);
            for (int i = 0; i < n_runs; i++)
                n_layers += runs[i].count;
            snprintf(items[r], sizeof items[r], "%s%d layers, %d runs%s", p->embed_rank == r ? "embed " : "",
                     n_layers, n_runs, p->head_rank == r ? " head" : "");
        }
        const int len = (int)strlen(items[r]);
        w = len > w ? len : w;
    }
    printf("\n%-4s  %-*s %11s %11s %11s %9s %8s  %-4s  %s\n", "rank", w, "owns", "weights GB", "state GB", "total GB",
           "free GB", "compute", "fits", "kinds (S softmax, L Lizard)");
    printf("%-4s  %-*s %11s %11s %11s\n", "", w, "", "", "per seq", p->batch > 1 ? "x batch" : "");
    for (int r = 0; r < p->n_ranks; r++) {
        char kinds[LZ_MAX_LAYERS + 1];
        int k = 0;
        for (int i = 0; i < p->n_layers; i++)
            if (p->layer_rank[i] == r)
                kinds[k++] = c->softmax[i] ? 'S' : 'L';
        kinds[k] = '\0';
        const uint64_t total = lz_plan_rank_total(p, r);
        printf("%4d  %-*s %11.3f %11.3f %11.3f %9.2f %7.1f%%  %-4s  %s\n", r, w, items[r], p->weight_bytes[r] / 1e9,
               p->state_bytes[r] / 1e9, total / 1e9, p->free_bytes[r] / 1e9, 100.0 * p->compute_share[r],
               total <= p->free_bytes[r] ? "yes" : "NO", kinds);
    }
}

/* What the table's bytes are: their element types, and the memory they are held against. */
static void print_units(const char *memory) {
    printf("\nbytes: weights, KV caches and window rings in bf16, the CUDA backend's default (fp32 runs, --dtype\n"
           "       fp32 or the CPU, hold twice as much); the GLA state in fp32\n");
    if (memory)
        printf("free GB: as --gpu-memory %s says", memory);
    else
        printf("free GB: %.1f a rank: an H200's %.0f GB less a tenth for activations, workspace and the CUDA\n"
               "         context (--gpu-memory GB sets it)", DEFAULT_GPU_GB, GPU_GB);
    printf("; under mpirun the ranks plan with their own devices' free memory\n");
}

/* Which ranks each host holds, and the bytes per token that cross each host link. */
static void print_host_links(const lz_plan *p, const lz_hostmap *h, const char *path, double act_bytes,
                             double before) {
    printf("\nhosts (%s):", path);
    for (int k = 0, r = 0; k < h->n_hosts && r < h->n_ranks; k++) {
        const int first = r;
        while (r < h->n_ranks && h->host_of[r] == k)
            r++;
        printf("%s %s rank%s %d", k ? "," : "", h->name[k], r - first > 1 ? "s" : "", first);
        if (r - first > 1)
            printf("-%d", r - 1);
    }
    static lz_host_link links[LZ_MAX_RANKS * 4];
    int n = 0;
    const double total = lz_plan_host_links(p, h, act_bytes, links, LZ_MAX_RANKS * 4, &n);
    printf("\nbytes per token across hosts (an activation crossing: %.0f B in bf16, twice that on the CPU path; the id "
           "back to rank 0: 4 B):\n", act_bytes);
    for (int i = 0; i < n && i < LZ_MAX_RANKS * 4; i++)
        printf("  %s <-> %s  %.0f\n", h->name[links[i].a], h->name[links[i].b], links[i].bytes);
    if (n == 0)
        printf("  none: every rank on one host\n");
    printf("  total  %.0f", total);
    if (before > total)
        printf(" (the same stages on ranks in order: %.0f)", before);
    printf("\n");
}

lz_status lz_cmd_plan(int argc, char **argv) {
    const char *model = NULL, *shape = NULL, *placement = NULL, *plan_file = NULL, *memory = NULL, *softmax = NULL,
               *out = NULL, *hosts_file = NULL;
    long ranks = 0, context = 8192, batch = 1;
    const lz_option options[] = {
        {"--model", LZ_OPT_STRING, "DIR", "model folder (only config.json is read)", &model, false, 0, 0},
        {"--shape", LZ_OPT_STRING, "PRESET", "a named shape instead of a folder (e.g. llama3-70b-hybrid)", &shape,
         false, 0, 0},
        {"--ranks", LZ_OPT_INT, "N", "pipeline ranks (required unless --plan gives them)", &ranks, false, 1,
         LZ_MAX_RANKS},
        {"--placement", LZ_OPT_STRING, "balanced|by-type", "planner (default balanced)", &placement, false, 0, 0},
        {"--plan", LZ_OPT_STRING, "FILE", "read the plan from a text file instead, and check it", &plan_file, false, 0,
         0},
        {"--context", LZ_OPT_INT, "N", "positions per sequence the state must hold (default 8192)", &context, false,
         1, 1e9},
        {"--batch", LZ_OPT_INT, "B", "sequences held at once (default 1)", &batch, false, 1, 1e6},
        {"--gpu-memory", LZ_OPT_STRING, "GB[,GB...]", "memory each rank may use, one value or one per rank "
                                                     "(default 126.9 = 141 x 0.9)", &memory, false, 0, 0},
        {"--softmax-layers", LZ_OPT_STRING, "LIST|all|none", "override which layers run as softmax attention",
         &softmax, false, 0, 0},
        {"--out", LZ_OPT_STRING, "FILE", "also write the plan's text form to FILE", &out, false, 0, 0},
        {"--hosts", LZ_OPT_STRING, "FILE", "an Open MPI hostfile (HOST slots=N): give the stages to the ranks so that "
         "the fewest bytes per token cross between hosts, and show them", &hosts_file, false, 0, 0},
    };
    const lz_command_spec spec = {"plan", "place a model's layers on pipeline ranks and show each rank's bytes",
                                  options, (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    if (!shape == !model)
        return lz_fail(LZ_ERR_INPUT, "lizard plan: give exactly one of --model DIR or --shape PRESET");
    if (placement && plan_file)
        return lz_fail(LZ_ERR_INPUT, "lizard plan: give --placement or --plan FILE, not both");
    static lz_hostmap hosts;
    if (hosts_file) {
        LZ_TRY(lz_hostmap_load(hosts_file, (int)ranks, &hosts));
        ranks = ranks ? ranks : hosts.n_ranks;
    }
    if (!plan_file && ranks == 0)
        return lz_fail(LZ_ERR_INPUT, "lizard plan: --ranks N is required (or --plan FILE, or --hosts FILE)");

    lz_config cfg;
    LZ_TRY(shape ? lz_preset_config(shape, "lizard plan: --shape", &cfg) : lz_config_load(model, &cfg));
    if (softmax)
        LZ_TRY(lz_config_set_softmax_layers(&cfg, softmax));
    static lz_plan_costs costs; // ~25 KB each: off the stack
    static lz_plan plan;
    LZ_TRY(lz_plan_costs_from_config(&cfg, (uint64_t)context, (int)batch, &costs));

    uint64_t free_bytes[LZ_MAX_RANKS];
    if (plan_file) {
        LZ_TRY(lz_plan_load_text(plan_file, cfg.num_hidden_layers, &plan));
        if (ranks && ranks != plan.n_ranks)
            return lz_fail(LZ_ERR_INPUT, "lizard plan: %s has %d ranks but --ranks is %ld", plan_file, plan.n_ranks,
                           ranks);
        ranks = plan.n_ranks;
    }
    char default_memory[32];
    snprintf(default_memory, sizeof default_memory, "%.1f", DEFAULT_GPU_GB);
    LZ_TRY(parse_memory(memory ? memory : default_memory, (int)ranks, free_bytes));
    if (plan_file) {
        lz_plan_account(&plan, &costs, free_bytes);
        lz_status s = lz_plan_validate(&plan);
        if (s != LZ_OK) {
            lz_error_prefix("%s: ", plan_file);
            return s;
        }
    } else {
        LZ_TRY(lz_plan_make(placement ? placement : "balanced", &costs, (int)ranks, free_bytes, &plan));
    }
    const double act_bytes = 2.0 * cfg.hidden_size;
    double before = 0.0;
    if (hosts_file) {
        if (hosts.n_ranks != plan.n_ranks)
            return lz_fail(LZ_ERR_INPUT, "lizard plan: %s places %d ranks, the plan has %d", hosts_file, hosts.n_ranks,
                           plan.n_ranks);
        static lz_host_link none[1];
        int n;
        before = lz_plan_host_links(&plan, &hosts, act_bytes, none, 0, &n);
        if (!plan_file) // a hand-written plan is shown as written
            LZ_TRY(lz_plan_place_on_hosts(&plan, &costs, &hosts, act_bytes, free_bytes));
    }

    LZ_TRY(lz_plan_write_text(&plan, stdout));
    print_table(&plan, &costs);
    print_units(memory);
    if (hosts_file)
        print_host_links(&plan, &hosts, hosts_file, act_bytes, before);
    if (out) {
        lz_atomic_file f;
        LZ_TRY(lz_atomic_open(&f, out));
        lz_status s = lz_plan_write_text(&plan, f.fp);
        LZ_TRY(lz_atomic_commit(&f, s == LZ_OK));
        if (s != LZ_OK)
            return s;
    }
    return LZ_OK;
}

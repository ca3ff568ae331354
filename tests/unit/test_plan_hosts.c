/* test_plan_hosts.c - hostfiles (Open MPI's form) and plans that know
 * which ranks share a host: the bytes crossing each host link, and the
 * placement that makes them fewest, checked against every assignment. */
#include <stdio.h>  // fopen, fputs
#include <stdlib.h> // mkstemp
#include <unistd.h> // close, unlink

#include "model_presets.h" // lz_preset_config
#include "plan_hosts.h"
#include "test_util.h"

static char path[64];

static void write_hosts(const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static lz_hostmap hosts;
static lz_plan_costs costs;
static lz_plan plan, other;

static void test_hostfile(void) {
    write_hosts("# two nodes\nnode-a slots=2\n\n  node-b   slots=3 max_slots=4 # comment\nnode-c\n");
    CHECK(lz_hostmap_load(path, 0, &hosts) == LZ_OK);
    CHECK(hosts.n_hosts == 3 && hosts.n_ranks == 6);
    const int expect[6] = {0, 0, 1, 1, 1, 2};
    for (int r = 0; r < 6; r++)
        CHECK(hosts.host_of[r] == expect[r]);
    CHECK(lz_hostmap_load(path, 4, &hosts) == LZ_OK && hosts.n_ranks == 4);
    CHECK_FAILS_WITH(lz_hostmap_load(path, 7, &hosts), LZ_ERR_INPUT, "7 ranks asked but its 3 hosts provide 6 slots");
    write_hosts("node-a slots=2\nnode-a\n");
    CHECK_FAILS_WITH(lz_hostmap_load(path, 0, &hosts), LZ_ERR_INPUT, ":2: host node-a named twice");
    write_hosts("node-a slots=zero\n");
    CHECK_FAILS_WITH(lz_hostmap_load(path, 0, &hosts), LZ_ERR_INPUT, ":1: 'slots=zero'");
    write_hosts("node-a cpus=2\n");
    CHECK_FAILS_WITH(lz_hostmap_load(path, 0, &hosts), LZ_ERR_INPUT, "expected HOST [slots=N]");
    write_hosts("# nothing\n");
    CHECK_FAILS_WITH(lz_hostmap_load(path, 0, &hosts), LZ_ERR_INPUT, "no hosts");
    CHECK_FAILS_WITH(lz_hostmap_load("/nonexistent/hosts", 0, &hosts), LZ_ERR_IO, "/nonexistent/hosts");
}

/* The smallest host traffic over every assignment of the plan's roles to ranks (4 ranks: 24). */
static double brute_best(const lz_plan *p, double act) {
    double best = 1e300;
    int perm[4];
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++)
                for (int d = 0; d < 4; d++) {
                    if (a == b || a == c || a == d || b == c || b == d || c == d)
                        continue;
                    perm[0] = a, perm[1] = b, perm[2] = c, perm[3] = d;
                    other = *p;
                    for (int i = 0; i < p->n_layers; i++)
                        other.layer_rank[i] = perm[p->layer_rank[i]];
                    other.embed_rank = perm[p->embed_rank], other.head_rank = perm[p->head_rank];
                    lz_host_link links[1];
                    int n;
                    const double t = lz_plan_host_links(&other, &hosts, act, links, 0, &n);
                    best = t < best ? t : best;
                }
    return best;
}

static void test_links_and_placement(void) {
    lz_config cfg;
    CHECK(lz_preset_config("llama3-8b-hybrid", "test", &cfg) == LZ_OK);
    CHECK(lz_plan_costs_from_config(&cfg, 8192, 1, &costs) == LZ_OK);
    uint64_t free_bytes[4] = {100e9, 100e9, 100e9, 100e9};
    write_hosts("node-a slots=2\nnode-b slots=2\n");
    CHECK(lz_hostmap_load(path, 4, &hosts) == LZ_OK);
    const double act = 2.0 * cfg.hidden_size;
    // balanced, stages in rank order: one activation crossing a->b, the id back b->a
    CHECK(lz_plan_make("balanced", &costs, 4, free_bytes, &plan) == LZ_OK);
    lz_host_link links[8];
    int n = 0;
    CHECK_NEAR(lz_plan_host_links(&plan, &hosts, act, links, 8, &n), act + 4.0, 0.0);
    CHECK(n == 1 && links[0].a == 0 && links[0].b == 1);
    // by-type interleaves softmax and Lizard ranks: placing it on hosts must reach the best assignment
    CHECK(lz_plan_make("by-type", &costs, 4, free_bytes, &plan) == LZ_OK);
    const double before = lz_plan_host_links(&plan, &hosts, act, links, 8, &n), best = brute_best(&plan, act);
    CHECK(lz_plan_place_on_hosts(&plan, &costs, &hosts, act, free_bytes) == LZ_OK);
    const double after = lz_plan_host_links(&plan, &hosts, act, links, 8, &n);
    CHECK_MSG(after == best && after < before, "placed %g, best %g, in rank order %g", after, best, before);
    CHECK(lz_plan_validate(&plan) == LZ_OK);
    // every rank on one host: nothing crosses
    write_hosts("node-a slots=4\n");
    CHECK(lz_hostmap_load(path, 4, &hosts) == LZ_OK);
    CHECK(lz_plan_host_links(&plan, &hosts, act, links, 8, &n) == 0.0 && n == 0);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/lz_hosts_XXXXXX");
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    test_hostfile();
    test_links_and_placement();
    unlink(path);
    return lz_test_finish("test_plan_hosts");
}

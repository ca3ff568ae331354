/* plan_hosts.h - a plan that knows which ranks share a host.
 *
 * A hostfile (Open MPI's form: "HOST [slots=N]" per line, # comments) gives
 * each host its slots; ranks fill them in order, as mpirun places them by
 * default. Activations cross a host link when one visit's rank and the
 * next's sit on different hosts; the chosen token's id comes back from the
 * head's rank to rank 0. A plan's roles (what rank 0, 1, ... own) can be
 * given to other ranks: lz_plan_place_on_hosts picks the assignment whose
 * host links carry the fewest bytes per token, so that the cuts between
 * hosts fall where the traffic is smallest. */
#ifndef LZ_PLAN_HOSTS_H
#define LZ_PLAN_HOSTS_H

#include "plan.h" // lz_plan, lz_plan_costs, LZ_MAX_RANKS

enum { LZ_HOST_NAME = 64 };

typedef struct {
    int n_hosts, n_ranks;
    char name[LZ_MAX_RANKS][LZ_HOST_NAME];
    int slots[LZ_MAX_RANKS];
    int host_of[LZ_MAX_RANKS]; /* rank -> host index */
} lz_hostmap;

/* Reads `path`; n_ranks 0 means every slot. More ranks than slots, a bad
 * line or a repeated host is an LZ_ERR_INPUT naming the file and line. */
lz_status lz_hostmap_load(const char *path, int n_ranks, lz_hostmap *out);

/* Bytes per token that cross the link between hosts a and b (a < b), for a
 * step of one token per sequence: act_bytes per activation crossing, 4 for
 * the id returned to rank 0. */
typedef struct {
    int a, b;
    double bytes;
} lz_host_link;
/* The links that carry anything (*n of them, at most cap written) and their sum. */
double lz_plan_host_links(const lz_plan *p, const lz_hostmap *h, double act_bytes, lz_host_link *links, int cap,
                          int *n);

/* Gives the plan's roles to the ranks so that the host links carry the
 * fewest bytes per token and every rank's need still fits its free bytes
 * (exhaustive up to 8 ranks, else pairwise swaps until none helps). */
lz_status lz_plan_place_on_hosts(lz_plan *p, const lz_plan_costs *c, const lz_hostmap *h, double act_bytes,
                                 const uint64_t *free_bytes);

#endif

/* test_checkpoint_unit.c - runtime/train/checkpoint_unit.c on its own:
 *  - a unit of F32, BF16 and I32 tensors and caller fields written and read
 *    back into poisoned buffers: every byte and the step come back;
 *  - a refused unit (signature, step, fields, a tensor's shape, a flipped
 *    byte, NaN) leaves the caller's buffers untouched, naming the fault;
 *  - a second write replaces the first whole; the aside copy a writer killed
 *    between its two renames leaves is read, and removed by the next write,
 *    as are dead writers' temporary folders (a live writer's stay);
 *  - lz_first_nonfinite finds the first NaN or infinity of every float dtype. */
#include <ftw.h>      // nftw
#include <math.h>     // NAN, INFINITY
#include <stdint.h>   // uint16_t
#include <stdio.h>    // snprintf, rename
#include <stdlib.h>   // mkdtemp
#include <string.h>   // memcmp, memset
#include <sys/stat.h> // mkdir, stat
#include <unistd.h>   // getpid, rmdir

#include "checkpoint_unit.h"
#include "dtype.h"     // lz_first_nonfinite, lz_f32_to_bf16
#include "test_util.h" // CHECK

static char root[] = "/tmp/lizard-ckpt-test-XXXXXX";

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static bool exists(const char *name) {
    char path[512];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", root, name);
    return stat(path, &sb) == 0;
}

enum { NA = 6, NB = 4, NC = 3 };

typedef struct {
    float a[NA];
    uint16_t b[NB];
    int32_t c[NC];
} bufs;

static void declare(lz_ckpt_tensor t[3], bufs *x) {
    t[0] = (lz_ckpt_tensor){{"a", LZ_DTYPE_F32, 2, {2, 3}}, x->a};
    t[1] = (lz_ckpt_tensor){{"b.moment", LZ_DTYPE_BF16, 1, {NB}}, x->b};
    t[2] = (lz_ckpt_tensor){{"c", LZ_DTYPE_I32, 1, {NC}}, x->c};
}

static void fill(bufs *x, float base) {
    for (int i = 0; i < NA; i++)
        x->a[i] = base + 0.25f * (float)i;
    for (int i = 0; i < NB; i++)
        x->b[i] = lz_f32_to_bf16(base - (float)i);
    for (int i = 0; i < NC; i++)
        x->c[i] = (int32_t)(100 * base) + i;
}

static void poison(bufs *x) {
    for (int i = 0; i < NA; i++)
        x->a[i] = NAN;
    memset(x->b, 0xff, sizeof x->b);
    memset(x->c, 0xee, sizeof x->c);
}

/* fields: {"cursor": N}; the check wants cursor = 10 * step */
static lz_status check_cursor(void *ctx, const json_t *fields, long step, const char *where) {
    (void)ctx;
    const json_t *v = json_object_get(fields, "cursor");
    if (!json_is_integer(v) || json_integer_value(v) != 10 * step)
        return lz_fail(LZ_ERR_INPUT, "%s: \"cursor\" is not 10 x step", where);
    return LZ_OK;
}

static lz_status write_unit(long step, float base, const char *signature) {
    bufs x;
    fill(&x, base);
    lz_ckpt_tensor t[3];
    declare(t, &x);
    json_t *fields = json_pack("{s:I}", "cursor", (json_int_t)(10 * step));
    const lz_ckpt_state st = {step, signature, fields};
    lz_status s = lz_ckpt_write(root, "state", &st, t, 3);
    json_decref(fields);
    return s;
}

static lz_status read_unit(bufs *into, const char *signature, long max_step, long *step) {
    lz_ckpt_tensor t[3];
    declare(t, into);
    const lz_ckpt_expect e = {signature, max_step, t, 3, check_cursor, NULL};
    return lz_ckpt_read(root, "state", &e, step);
}

static void test_round_trip(void) {
    CHECK(!lz_ckpt_exists(root, "state"));
    CHECK(write_unit(4, 1.5f, "lr=0.1;seed=3;") == LZ_OK);
    CHECK(lz_ckpt_exists(root, "state"));
    bufs want, got;
    fill(&want, 1.5f);
    poison(&got);
    long step = -1;
    CHECK(read_unit(&got, "lr=0.1;seed=3;", 8, &step) == LZ_OK);
    CHECK(step == 4);
    CHECK(memcmp(&want, &got, sizeof want) == 0);
    // a second write replaces the first whole, and leaves no temporary or aside folder
    CHECK(write_unit(6, -2.0f, "lr=0.1;seed=3;") == LZ_OK);
    fill(&want, -2.0f);
    poison(&got);
    CHECK(read_unit(&got, "lr=0.1;seed=3;", 8, &step) == LZ_OK && step == 6);
    CHECK(memcmp(&want, &got, sizeof want) == 0);
    char name[64];
    snprintf(name, sizeof name, "state.old.%ld", (long)getpid());
    CHECK(!exists(name));
    snprintf(name, sizeof name, "state.tmp.%ld", (long)getpid());
    CHECK(!exists(name));
}

static void test_refusals(void) {
    bufs got, poisoned;
    poison(&got);
    poison(&poisoned);
    long step = -1;
    CHECK_FAILS_WITH(read_unit(&got, "lr=0.2;seed=3;", 8, &step), LZ_ERR_INPUT, "made with different lr");
    CHECK_FAILS_WITH(read_unit(&got, "lr=0.1;seed=3;", 5, &step), LZ_ERR_INPUT, "step 6 is outside this run's 1..5");
    // the expected shapes differ from the unit's
    lz_ckpt_tensor t[3];
    declare(t, &got);
    t[0].decl.shape[0] = 3, t[0].decl.shape[1] = 2;
    lz_ckpt_expect e = {"lr=0.1;seed=3;", 8, t, 3, check_cursor, NULL};
    CHECK_FAILS_WITH(lz_ckpt_read(root, "state", &e, &step), LZ_ERR_INPUT, "tensor 'a' is F32 [2, 3]; this run has F32 [3, 2]");
    declare(t, &got);
    e.n_tensors = 2; // one tensor fewer expected: the unit's third is not this run's
    CHECK_FAILS_WITH(lz_ckpt_read(root, "state", &e, &step), LZ_ERR_INPUT, "tensor 'c' is not one of this run's");
    e.n_tensors = 3, e.check_fields = NULL; // a caller with no fields
    CHECK_FAILS_WITH(lz_ckpt_read(root, "state", &e, &step), LZ_ERR_INPUT, "\"fields\" must be {}");
    CHECK(memcmp(&got, &poisoned, sizeof got) == 0);
}

/* The unit's two files in memory, for lz_ckpt_check. */
static void read_files(char **state, size_t *state_len, uint8_t **tensors, size_t *tensors_len) {
    char path[512];
    snprintf(path, sizeof path, "%s/state/state.json", root);
    FILE *f = fopen(path, "rb");
    *state = calloc(1, 4096);
    *state_len = f ? fread(*state, 1, 4095, f) : 0;
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/state/tensors.safetensors", root);
    f = fopen(path, "rb");
    *tensors = calloc(1, 1 << 16);
    *tensors_len = f ? fread(*tensors, 1, 1 << 16, f) : 0;
    if (f)
        fclose(f);
}

static void test_damage(void) {
    char *state;
    uint8_t *tensors;
    size_t state_len, tensors_len;
    read_files(&state, &state_len, &tensors, &tensors_len);
    CHECK(state_len > 0 && tensors_len > 8);
    bufs got, poisoned;
    poison(&got);
    poison(&poisoned);
    lz_ckpt_tensor t[3];
    declare(t, &got);
    const lz_ckpt_expect e = {"lr=0.1;seed=3;", 8, t, 3, check_cursor, NULL};
    long step = -1;
    CHECK(lz_ckpt_check("mem", state, state_len, tensors, tensors_len, &e, &step) == LZ_OK && step == 6);
    poison(&got);
    tensors[tensors_len - 1] ^= 1; // a bit of c
    CHECK_FAILS_WITH(lz_ckpt_check("mem", state, state_len, tensors, tensors_len, &e, &step), LZ_ERR_INPUT,
                     "mem/state.json: the checksum does not match");
    tensors[tensors_len - 1] ^= 1;
    const uint32_t nan_bits = 0x7fc00000u; // a[0] (the data section begins with it)
    uint64_t header = 0;
    memcpy(&header, tensors, 8);
    uint8_t saved[4];
    memcpy(saved, tensors + 8 + header, 4);
    memcpy(tensors + 8 + header, &nan_bits, 4);
    CHECK_FAILS_WITH(lz_ckpt_check("mem", state, state_len, tensors, tensors_len, &e, &step), LZ_ERR_INPUT,
                     "tensor 'a' holds a NaN or infinity (element 0)");
    memcpy(tensors + 8 + header, saved, 4);
    char *cursor = strstr(state, "\"cursor\": 60");
    CHECK(cursor != NULL);
    if (cursor) {
        cursor[11] = '1'; // cursor 61: the caller's check names it
        CHECK_FAILS_WITH(lz_ckpt_check("mem", state, state_len, tensors, tensors_len, &e, &step), LZ_ERR_INPUT,
                         "\"cursor\" is not 10 x step");
        cursor[11] = '0';
    }
    CHECK_FAILS_WITH(lz_ckpt_check("mem", state, state_len, tensors, tensors_len / 2, &e, &step), LZ_ERR_INPUT,
                     "mem/tensors.safetensors");
    CHECK(memcmp(&got, &poisoned, sizeof got) == 0);
    free(state), free(tensors);
}

/* What a writer killed between its renames leaves (only NAME.old.<pid>), read and then replaced. */
static void test_aside(void) {
    char cur[512], aside[512], stale_tmp[512], live_tmp[512];
    snprintf(cur, sizeof cur, "%s/state", root);
    snprintf(aside, sizeof aside, "%s/state.old.999999999", root); // no process has that pid
    CHECK(rename(cur, aside) == 0);
    CHECK(lz_ckpt_exists(root, "state"));
    bufs want, got;
    fill(&want, -2.0f);
    poison(&got);
    long step = -1;
    CHECK(read_unit(&got, "lr=0.1;seed=3;", 8, &step) == LZ_OK && step == 6);
    CHECK(memcmp(&want, &got, sizeof want) == 0);
    snprintf(stale_tmp, sizeof stale_tmp, "%s/state.tmp.999999998", root);
    snprintf(live_tmp, sizeof live_tmp, "%s/state.tmp.1", root); // pid 1 is alive
    CHECK(mkdir(stale_tmp, 0755) == 0 && mkdir(live_tmp, 0755) == 0);
    CHECK(write_unit(7, 3.0f, "lr=0.1;seed=3;") == LZ_OK);
    fill(&want, 3.0f);
    poison(&got);
    CHECK(read_unit(&got, "lr=0.1;seed=3;", 8, &step) == LZ_OK && step == 7);
    CHECK(memcmp(&want, &got, sizeof want) == 0);
    CHECK(!exists("state.old.999999999") && !exists("state.tmp.999999998") && exists("state.tmp.1"));
    rmdir(live_tmp);
}

static void test_first_nonfinite(void) {
    float f[9000];
    for (int i = 0; i < 9000; i++)
        f[i] = (float)i - 4000.0f;
    CHECK(lz_first_nonfinite(f, LZ_DTYPE_F32, 9000) == 9000);
    f[8191] = INFINITY, f[8500] = NAN; // the second block's
    CHECK(lz_first_nonfinite(f, LZ_DTYPE_F32, 9000) == 8191);
    CHECK(lz_first_nonfinite(f, LZ_DTYPE_F32, 8191) == 8191); // n when every one is finite
    f[3] = -NAN;
    CHECK(lz_first_nonfinite(f, LZ_DTYPE_F32, 9000) == 3);
    const uint16_t bf16[4] = {0x3f80, 0xff80, 0x7f7f, 0x7fc0}, f16[4] = {0x3c00, 0x7bff, 0xfc00, 0x7e00};
    CHECK(lz_first_nonfinite(bf16, LZ_DTYPE_BF16, 4) == 1);
    CHECK(lz_first_nonfinite(f16, LZ_DTYPE_F16, 4) == 2);
    const double d[3] = {1e300, -1e-300, NAN};
    CHECK(lz_first_nonfinite(d, LZ_DTYPE_F64, 3) == 2);
    const int32_t ints[2] = {0x7f800000, -1}; // not floats: no NaN to find
    CHECK(lz_first_nonfinite(ints, LZ_DTYPE_I32, 2) == 2);
}

int main(void) {
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_refusals();
    test_damage();
    test_aside();
    test_first_nonfinite();
    nftw(root, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    return lz_test_finish("test_checkpoint_unit");
}

/* session.c - SequenceState messages and files. */
#include <errno.h>    // errno
#include <math.h>     // isfinite
#include <stddef.h>   // offsetof
#include <stdint.h>   // INT32_MAX
#include <stdio.h>    // FILE, snprintf
#include <stdlib.h>   // malloc, free
#include <string.h>   // memcpy, memcmp, strerror
#include <sys/stat.h> // stat

#include "atomic_file.h" // lz_atomic_open
#include "hash.h"        // lz_fnv1a
#include "safetensors.h" // lz_weights, lz_st_tensor
#include "session.h"

void lz_session_fingerprint(const lz_model *m, const char *model_dir, uint8_t out[LZ_FINGERPRINT_BYTES]) {
    uint64_t a = LZ_FNV1A_INIT, b = 0x84222325cbf29ce4ull;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
            a = lz_fnv1a(a, chunk, n);
        fclose(f);
    }
    const size_t n_tensors = m->ckpt ? m->ckpt->n_tensors : 0;
    for (size_t i = 0; i < n_tensors; i++) { // the tensor table, and a taste of each tensor
        const lz_st_tensor *t = m->ckpt->index[i];
        b = lz_fnv1a(b, t->name, strlen(t->name));
        b = lz_fnv1a(b, &t->dtype, sizeof t->dtype);
        b = lz_fnv1a(b, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        b = lz_fnv1a(b, t->data, t->nbytes < 64 ? t->nbytes : 64);
    }
    for (int i = 0; i < m->cfg.num_hidden_layers; i++)
        a = lz_fnv1a(a, &m->layers[i].run_softmax, sizeof(bool));
    if (m->adapter_hash) // a merged adapter changes the weights: its state is another model's
        b = lz_fnv1a(b, &m->adapter_hash, sizeof m->adapter_hash);
    memcpy(out, &a, 8);
    memcpy(out + 8, &b, 8);
}

void lz_session_sampler_save(Lizard__SequenceState *msg, Lizard__SamplerState *keep, const lz_sampler *s) {
    lizard__sampler_state__init(keep);
    keep->temperature = s->p.temperature;
    keep->top_k = s->p.top_k;
    keep->top_p = s->p.top_p;
    keep->seed = s->p.seed;
    keep->draws = s->n;
    msg->sampling = keep;
    msg->sampler = (ProtobufCBinaryData){0, NULL};
}

/* The record files held before the SamplerState message: the parameters and
 * the count of tokens drawn (the uniforms are a function of seed and count).
 * Records of 64 bytes are the earlier xoshiro256** state: their parameters and
 * seed are kept and the count starts at 0 (the counter's draws share nothing
 * with xoshiro's stream). */
typedef struct {
    double temperature, top_p;
    int64_t top_k;
    uint64_t seed, n;
} sampler_record;

enum { XOSHIRO_RECORD_BYTES = 64 };

/* A saved sampler's values in the ranges lz_sampler_init takes, named as the session holds them
 * (its errors name the flags, which a continued session need not have been given). */
static lz_status check_saved_sampler(const lz_sampler_params *p, const char *what) {
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return lz_fail(LZ_ERR_INPUT, "%s: the saved sampler's temperature is %g (expected >= 0)", what, p->temperature);
    if (p->top_k < 0)
        return lz_fail(LZ_ERR_INPUT, "%s: the saved sampler's top_k is %d (expected >= 0)", what, p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return lz_fail(LZ_ERR_INPUT, "%s: the saved sampler's top_p is %g (expected in (0, 1])", what, p->top_p);
    return LZ_OK;
}

lz_status lz_session_sampler_load(const Lizard__SequenceState *m, const char *what, lz_sampler_params *p,
                                  uint64_t *draws) {
    if (m->sampling) {
        const Lizard__SamplerState *k = m->sampling;
        *p = (lz_sampler_params){k->temperature, k->top_k, k->top_p, k->seed};
        *draws = k->draws;
        return check_saved_sampler(p, what);
    }
    sampler_record r;
    const size_t len = m->sampler.len;
    if (len == XOSHIRO_RECORD_BYTES) { // temperature, top_p, top_k, seed, then the xoshiro state
        memcpy(&r, m->sampler.data, offsetof(sampler_record, n));
        r.n = 0;
    } else if (len == sizeof r) {
        memcpy(&r, m->sampler.data, sizeof r);
    } else {
        return lz_fail(LZ_ERR_INPUT, "%s: sampler state of %zu bytes, expected %zu", what, len, sizeof r);
    }
    if (r.top_k < 0 || r.top_k > INT32_MAX)
        return lz_fail(LZ_ERR_INPUT, "%s: the saved sampler's top_k is %lld", what, (long long)r.top_k);
    *p = (lz_sampler_params){r.temperature, (int)r.top_k, r.top_p, r.seed};
    *draws = r.n;
    return check_saved_sampler(p, what);
}

uint64_t lz_session_checksum_head(const Lizard__SequenceState *m) {
    uint64_t h = LZ_FNV1A_INIT;
    h = lz_fnv1a(h, &m->position, sizeof m->position);
    h = lz_hash_wide(h, m->tokens, sizeof(int32_t) * m->n_tokens);
    h = lz_fnv1a(h, m->sampler.data, m->sampler.len);
    if (!m->sampling) // files written before the message: the checksum they carry
        return h;
    const Lizard__SamplerState *k = m->sampling;
    uint64_t f[5] = {0, (uint64_t)(int64_t)k->top_k, 0, k->seed, k->draws};
    memcpy(&f[0], &k->temperature, sizeof(double));
    memcpy(&f[2], &k->top_p, sizeof(double));
    return lz_fnv1a(h, f, sizeof f);
}

uint64_t lz_session_checksum_layer(uint64_t h, const Lizard__LayerState *l) {
    h = lz_fnv1a(h, &l->layer, sizeof l->layer);
    h = lz_hash_wide(h, l->k.data, l->k.len);
    h = lz_hash_wide(h, l->v.data, l->v.len);
    h = lz_hash_wide(h, l->s.data, l->s.len);
    return lz_hash_wide(h, l->z.data, l->z.len);
}

uint64_t lz_session_checksum(const Lizard__SequenceState *m) {
    uint64_t h = lz_session_checksum_head(m);
    for (size_t i = 0; i < m->n_stages; i++)
        for (size_t j = 0; j < m->stages[i]->n_layers; j++)
            h = lz_session_checksum_layer(h, m->stages[i]->layers[j]);
    return h;
}

lz_status lz_session_pack(Lizard__SequenceState *msg, uint8_t **buf, size_t *len) {
    msg->magic = LZ_SESSION_MAGIC;
    msg->version = LZ_SESSION_VERSION;
    msg->checksum = lz_session_checksum(msg);
    *len = lizard__sequence_state__get_packed_size(msg);
    if (*len > (size_t)INT32_MAX) // protobuf readers (protobuf-c included) refuse messages of 2 GiB and more
        return lz_fail(LZ_ERR_INPUT, "session: this sequence's state is %.2f GB; a session message holds at most 2 GiB "
                       "(softmax layers' KV cache at this context: save earlier, or use fewer softmax layers)",
                       (double)*len / 1e9);
    *buf = malloc(*len ? *len : 1);
    if (!*buf)
        return lz_fail(LZ_ERR_NOMEM, "session: out of memory for %zu bytes", *len);
    lizard__sequence_state__pack(msg, *buf);
    return LZ_OK;
}

bool lz_pb_has_field_zero(const ProtobufCMessage *m) {
    if (!m)
        return false;
    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return true;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned f = 0; f < d->n_fields; f++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[f];
        if (fd->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *base = (const char *)m;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            const size_t n = *(const size_t *)(base + fd->quantifier_offset);
            ProtobufCMessage *const *items = *(ProtobufCMessage *const *const *)(base + fd->offset);
            for (size_t k = 0; k < n; k++)
                if (lz_pb_has_field_zero(items[k]))
                    return true;
        } else if (lz_pb_has_field_zero(*(const ProtobufCMessage *const *)(base + fd->offset)))
            return true;
    }
    return false;
}

lz_status lz_session_check(const Lizard__SequenceState *m, const char *what,
                           const uint8_t fingerprint[LZ_FINGERPRINT_BYTES]) {
    if (lz_pb_has_field_zero(&m->base))
        return lz_fail(LZ_ERR_INPUT, "%s: not a lizard session (a field numbered 0)", what);
    if (m->magic != LZ_SESSION_MAGIC)
        return lz_fail(LZ_ERR_INPUT, "%s: not a lizard session (magic %08x)", what, m->magic);
    if (m->version != LZ_SESSION_VERSION)
        return lz_fail(LZ_ERR_INPUT, "%s: session version %u (this lizard reads %d, and 3 chunked)", what,
                       m->version, LZ_SESSION_VERSION);
    if (fingerprint && lz_session_check_fingerprint(m, fingerprint, what) != LZ_OK)
        return LZ_ERR_INPUT;
    if (m->checksum != lz_session_checksum(m))
        return lz_fail(LZ_ERR_INPUT, "%s: checksum mismatch: the state is corrupted", what);
    if (m->n_tokens != m->position + (m->has_pending ? 1 : 0) || m->position > (uint64_t)INT32_MAX)
        return lz_fail(LZ_ERR_INPUT, "%s: %zu tokens for position %llu", what, m->n_tokens,
                       (unsigned long long)m->position);
    return LZ_OK;
}

lz_status lz_session_unpack(const uint8_t *buf, size_t len, const char *what,
                            const uint8_t fingerprint[LZ_FINGERPRINT_BYTES], Lizard__SequenceState **out) {
    Lizard__SequenceState *m = lizard__sequence_state__unpack(NULL, len, buf);
    if (!m)
        return lz_fail(LZ_ERR_INPUT, "%s: not a lizard session (truncated or corrupted message)", what);
    const lz_status s = lz_session_check(m, what, fingerprint);
    if (s != LZ_OK) {
        lizard__sequence_state__free_unpacked(m, NULL);
        return s;
    }
    *out = m;
    return LZ_OK;
}

lz_status lz_session_check_fingerprint(const Lizard__SequenceState *m, const uint8_t fingerprint[LZ_FINGERPRINT_BYTES],
                                       const char *what) {
    if (m->fingerprint.len != LZ_FINGERPRINT_BYTES || memcmp(m->fingerprint.data, fingerprint, LZ_FINGERPRINT_BYTES))
        return lz_fail(LZ_ERR_INPUT, "%s: the session belongs to another model (or other --softmax-layers)", what);
    return LZ_OK;
}

lz_status lz_session_write_file(const char *path, const uint8_t *buf, size_t len) {
    lz_atomic_file f;
    LZ_TRY(lz_atomic_open(&f, path));
    return lz_atomic_commit(&f, fwrite(buf, 1, len, f.fp) == len);
}

lz_status lz_session_open_file(const char *path, FILE **f, size_t *size) {
    *f = fopen(path, "rb");
    if (!*f)
        return lz_fail(LZ_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    lz_status s = fstat(fileno(*f), &sb) == 0 ? LZ_OK : lz_fail(LZ_ERR_IO, "%s: %s", path, strerror(errno));
    if (s == LZ_OK && (sb.st_size <= 0 || sb.st_size > ((off_t)1 << 40)))
        s = lz_fail(LZ_ERR_INPUT, "%s: a session file of %lld bytes", path, (long long)sb.st_size);
    if (s != LZ_OK) {
        fclose(*f);
        *f = NULL;
        return s;
    }
    *size = (size_t)sb.st_size;
    return LZ_OK;
}

lz_status lz_session_read_file(const char *path, uint8_t **buf, size_t *len) {
    FILE *f;
    size_t size;
    LZ_TRY(lz_session_open_file(path, &f, &size));
    lz_status s = LZ_OK;
    if (!(*buf = malloc(size)))
        s = lz_fail(LZ_ERR_NOMEM, "%s: out of memory", path);
    if (s == LZ_OK && fread(*buf, 1, size, f) != size) {
        free(*buf);
        s = lz_fail(LZ_ERR_IO, "%s: short read", path);
    }
    if (s == LZ_OK)
        *len = size;
    fclose(f);
    return s;
}

/* layer_payloads.h - a LayerState record's four payloads (k, v, s, z) by
 * index, and the "header" form of a record that carries only their lengths
 * (k_bytes .. z_bytes): what a version-3 session file and a stage sent
 * between ranks both send ahead of the bytes. */
#ifndef LZ_LAYER_PAYLOADS_H
#define LZ_LAYER_PAYLOADS_H

#include <stdint.h> // uint64_t

#include "lizard.pb-c.h" // Lizard__LayerState

enum { LZ_LAYER_PAYLOADS = 4 }; /* k, v, s, z: the order they are sent in */

static inline ProtobufCBinaryData *lz_layer_payload(Lizard__LayerState *l, int t) {
    ProtobufCBinaryData *p[LZ_LAYER_PAYLOADS] = {&l->k, &l->v, &l->s, &l->z};
    return p[t];
}

/* Payload t's declared length in a header record. */
static inline uint64_t lz_layer_declared(const Lizard__LayerState *l, int t) {
    const uint64_t n[LZ_LAYER_PAYLOADS] = {l->k_bytes, l->v_bytes, l->s_bytes, l->z_bytes};
    return n[t];
}

/* l (a copy of a record) as a header record: lengths instead of bytes. */
static inline void lz_layer_to_header(Lizard__LayerState *l) {
    l->k_bytes = l->k.len, l->v_bytes = l->v.len, l->s_bytes = l->s.len, l->z_bytes = l->z.len;
    l->k = l->v = l->s = l->z = (ProtobufCBinaryData){0, NULL};
}

#endif

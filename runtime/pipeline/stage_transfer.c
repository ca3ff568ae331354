/* stage_transfer.c - a StageState between ranks (stage_transfer.h). */
#include <stdlib.h> // malloc, calloc, free

#include <mpi.h> // MPI_Send, MPI_Recv

#include "mpi_world.h"      // lz_world_mpi_error
#include "layer_payloads.h" // lz_layer_payload, lz_layer_to_header
#include "session_chunks.h" // lz_session_chunk_bytes
#include "stage_transfer.h"

lz_status lz_stage_pack_header(const Lizard__StageState *s, uint8_t **buf, size_t *len) {
    Lizard__LayerState *copies = calloc(s->n_layers ? s->n_layers : 1, sizeof *copies);
    Lizard__LayerState **ptrs = calloc(s->n_layers ? s->n_layers : 1, sizeof *ptrs);
    lz_status st = copies && ptrs ? LZ_OK : lz_fail(LZ_ERR_NOMEM, "stage transfer: out of memory");
    for (size_t i = 0; st == LZ_OK && i < s->n_layers; i++) { // shallow copies: lengths instead of bytes
        copies[i] = *s->layers[i];
        lz_layer_to_header(&copies[i]);
        ptrs[i] = &copies[i];
    }
    Lizard__StageState head = LIZARD__STAGE_STATE__INIT;
    head.n_layers = s->n_layers;
    head.layers = ptrs;
    *len = st == LZ_OK ? lizard__stage_state__get_packed_size(&head) : 0;
    *buf = st == LZ_OK ? malloc(*len ? *len : 1) : NULL;
    if (st == LZ_OK && !*buf)
        st = lz_fail(LZ_ERR_NOMEM, "stage transfer: out of memory");
    if (st == LZ_OK)
        lizard__stage_state__pack(&head, *buf);
    free(copies), free(ptrs);
    return st;
}

lz_status lz_stage_unpack_header(const uint8_t *buf, size_t len, int from, Lizard__StageState **out) {
    *out = lizard__stage_state__unpack(NULL, len, buf);
    if (!*out)
        return lz_fail(LZ_ERR_INTERNAL, "stage transfer: a malformed stage header from rank %d", from);
    return LZ_OK;
}

lz_status lz_stage_send_payloads(Lizard__LayerState *const *layers, size_t n, const bool *wanted, int to, int tag) {
    const size_t piece = lz_session_chunk_bytes();
    for (size_t i = 0; i < n; i++) {
        if (wanted && !wanted[i])
            continue;
        for (int t = 0; t < LZ_LAYER_PAYLOADS; t++) {
            const ProtobufCBinaryData *p = lz_layer_payload(layers[i], t);
            for (size_t off = 0; off < p->len; off += piece) {
                const size_t part = p->len - off < piece ? p->len - off : piece;
                const int rc = MPI_Send(p->data + off, (int)part, MPI_BYTE, to, tag, MPI_COMM_WORLD);
                if (rc != MPI_SUCCESS)
                    return lz_world_mpi_error(rc, "MPI_Send(stage state payload)", __FILE__, __LINE__);
            }
        }
    }
    return LZ_OK;
}

lz_status lz_stage_recv_payloads(Lizard__LayerState *const *layers, size_t n, const bool *wanted, int from, int tag) {
    const size_t piece = lz_session_chunk_bytes();
    uint8_t *scratch = NULL; // where pieces go once a buffer could not be had: the sender is never left waiting
    lz_status s = LZ_OK;
    for (size_t i = 0; i < n; i++) {
        if (wanted && !wanted[i])
            continue;
        for (int t = 0; t < LZ_LAYER_PAYLOADS; t++) {
            ProtobufCBinaryData *p = lz_layer_payload(layers[i], t);
            const uint64_t total = lz_layer_declared(layers[i], t);
            if (total == 0)
                continue;
            uint8_t *dst = s == LZ_OK && total <= SIZE_MAX / 2 ? malloc((size_t)total) : NULL;
            if (dst) {
                p->data = dst, p->len = (size_t)total;
            } else {
                if (s == LZ_OK)
                    s = lz_fail(LZ_ERR_NOMEM, "stage transfer: out of memory for %llu bytes of layer %d's state",
                                (unsigned long long)total, layers[i]->layer);
                if (!scratch && !(scratch = malloc(piece)))
                    return lz_fail(LZ_ERR_NOMEM, "stage transfer: out of memory"); // cannot even drain
            }
            for (uint64_t off = 0; off < total; off += piece) {
                const size_t part = total - off < piece ? (size_t)(total - off) : piece;
                const int rc = MPI_Recv(dst ? dst + off : scratch, (int)part, MPI_BYTE, from, tag, MPI_COMM_WORLD,
                                        MPI_STATUS_IGNORE);
                if (rc != MPI_SUCCESS) {
                    free(scratch);
                    return lz_world_mpi_error(rc, "MPI_Recv(stage state payload)", __FILE__, __LINE__);
                }
            }
        }
        Lizard__LayerState *l = layers[i]; // in memory the record holds its bytes (a version-2 record)
        l->k_bytes = l->v_bytes = l->s_bytes = l->z_bytes = 0;
    }
    free(scratch);
    return s;
}

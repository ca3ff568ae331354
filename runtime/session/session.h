/* session.h - a sequence saved as a SequenceState message (proto/lizard.proto):
 * model fingerprint, position, tokens, the pending token, the sampler, and the
 * layers' state (one StageState per stage that wrote it). Files are written
 * atomically; a message is checked (magic, version, fingerprint, checksum,
 * sizes) before anything is loaded from it. */
#ifndef LZ_SESSION_H
#define LZ_SESSION_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint8_t, uint64_t
#include <stdio.h>   // FILE

#include "lizard.pb-c.h" // Lizard__SequenceState
#include "model.h"       // lz_model
#include "sampler.h"     // lz_sampler

enum { LZ_SESSION_MAGIC = 0x53535A4C, LZ_SESSION_VERSION = 2, LZ_FINGERPRINT_BYTES = 16 };

/* The model's identity: config.json, the tensor table (names, dtypes, shapes,
 * first bytes of each tensor) and the kinds its layers run as. */
void lz_session_fingerprint(const lz_model *m, const char *model_dir, uint8_t out[LZ_FINGERPRINT_BYTES]);

/* The sampler's parameters and count of draws into msg->sampling (the
 * SamplerState message, held in *keep). */
void lz_session_sampler_save(Lizard__SequenceState *msg, Lizard__SamplerState *keep, const lz_sampler *s);
/* The saved sampler: from msg->sampling, else (files written before it) from
 * the `sampler` record; errors name `what`. */
lz_status lz_session_sampler_load(const Lizard__SequenceState *m, const char *what, lz_sampler_params *p,
                                  uint64_t *draws);

/* Over position, tokens, sampler (record, then message) and the layers' payloads, in order (the
 * message's checksum field): the head's part, then each layer's in turn. */
uint64_t lz_session_checksum(const Lizard__SequenceState *m);
uint64_t lz_session_checksum_head(const Lizard__SequenceState *m);
uint64_t lz_session_checksum_layer(uint64_t h, const Lizard__LayerState *l);
/* Whether a message protobuf-c parsed, or any message inside it, kept a
 * field numbered 0. protobuf-c takes such a field (tag 0 written in more
 * bytes than one) as an unknown field and writes it back in a form it then
 * refuses, so a file holding one would load once and never again: the
 * readers refuse it instead. */
bool lz_pb_has_field_zero(const ProtobufCMessage *m);
/* Every check of a parsed message: no field numbered 0, magic, version,
 * fingerprint (unless NULL), checksum, tokens against position. */
lz_status lz_session_check(const Lizard__SequenceState *m, const char *what,
                           const uint8_t fingerprint[LZ_FINGERPRINT_BYTES]);

/* Serialises `msg` after filling magic, version and the checksum. */
lz_status lz_session_pack(Lizard__SequenceState *msg, uint8_t **buf, size_t *len);
/* Parses and checks (the fingerprint too unless it is NULL); *out is freed
 * with lizard__sequence_state__free_unpacked. */
lz_status lz_session_unpack(const uint8_t *buf, size_t len, const char *what,
                            const uint8_t fingerprint[LZ_FINGERPRINT_BYTES], Lizard__SequenceState **out);
/* Parses and checks like lz_session_unpack, but the layers' payloads are not
 * copied: they point into buf, which must outlive *out (session_view.c).
 * Free with lz_session_view_free. */
lz_status lz_session_view(const uint8_t *buf, size_t len, const char *what,
                          const uint8_t fingerprint[LZ_FINGERPRINT_BYTES], Lizard__SequenceState **out);
void lz_session_view_free(Lizard__SequenceState *m);
lz_status lz_session_check_fingerprint(const Lizard__SequenceState *m, const uint8_t fingerprint[LZ_FINGERPRINT_BYTES],
                                       const char *what);

/* Whole files: written to a temp file then renamed; read whole. */
lz_status lz_session_write_file(const char *path, const uint8_t *buf, size_t len);
lz_status lz_session_read_file(const char *path, uint8_t **buf, size_t *len);
/* Opens a session file for reading; *size its length (1 byte to 1 TiB, else refused). */
lz_status lz_session_open_file(const char *path, FILE **f, size_t *size);

#endif

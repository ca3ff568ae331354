/* engine_session.h - a sequence's state in and out of an engine, in one
 * process or across the ranks of a pipeline (each stage writes and reads
 * only its own layers; a session written with one plan reads with another,
 * since its records are per layer). */
#ifndef LZ_ENGINE_SESSION_H
#define LZ_ENGINE_SESSION_H

#include "engine.h"  // lz_engine
#include "session.h" // Lizard__SequenceState

/* Fills msg->stages / n_stages with the state of `slot` (one StageState per
 * stage); free them with lz_engine_free_stages. Rank 0 only (collective). */
lz_status lz_engine_save_stages(lz_engine *e, int slot, Lizard__SequenceState *msg);
void lz_engine_free_stages(Lizard__SequenceState *msg);
/* msg's own fields (fingerprint, position, tokens, has_pending, sampler;
 * stages empty, left so) and the state of `slot`, to `path` atomically:
 * version 2 when the message holds under 2 GiB (in one process packed in one
 * pass, session_buf.h), else version 3 (chunked, session_chunks.h). A
 * pipeline moves at most 2 GiB of state: beyond, it is refused. Rank 0 only. */
lz_status lz_engine_save_file(lz_engine *e, int slot, Lizard__SequenceState *msg, const char *path);
/* Loads every layer of msg into `slot` at msg->position. Rank 0 only (collective). */
lz_status lz_engine_restore_stages(lz_engine *e, int slot, const Lizard__SequenceState *msg);

#endif

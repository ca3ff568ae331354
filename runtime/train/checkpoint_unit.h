/* checkpoint_unit.h - a training run's checkpoint written and read as one
 * unit: the tensors it continues from and the state that says what they are
 * appear together, whole, or not at all, and are checked whole on reading.
 *
 * On disk, DIR/NAME/ is one folder holding
 *   tensors.safetensors  the run's tensors (any dtype lz_stw writes), in the caller's order
 *   state.json           {"format": "lizard-checkpoint-1", "step": S, "signature": "...",
 *                         "fields": {the caller's own}, "checksum": "<16 hex digits>"}
 * The checksum is 64-bit lz_hash_wide/FNV-1a over "step=S\nsignature=...\nfields=<fields as
 * compact JSON, keys sorted>\n", then each tensor's name (with its NUL) and bytes in
 * the caller's order: an edited step, signature or field, a changed or torn tensor,
 * or a state paired with other tensors does not match it.
 *
 * Writing (lz_ckpt_write), in order, each step synced before the next:
 *   1. DIR/NAME.tmp.<pid>/ is made and both files are written and fsynced in it,
 *      then that folder is fsynced;
 *   2. the current DIR/NAME (if any) is renamed aside to DIR/NAME.old.<pid>;
 *   3. DIR/NAME.tmp.<pid> is renamed to DIR/NAME and DIR is fsynced;
 *   4. the aside copy is removed.
 * A writer killed anywhere leaves either the previous unit (DIR/NAME, or after
 * step 2 DIR/NAME.old.<pid>) or the new one, never a mix. The next writer
 * removes what dead writers left (NAME.tmp.<pid> and NAME.old.<pid> folders whose
 * pid is no live process) once its own unit is in place.
 *
 * Reading (lz_ckpt_read) takes DIR/NAME, or when a writer died between steps 2
 * and 3, the one DIR/NAME.old.<pid> it left. It refuses, in one lz_fail line
 * naming the file and the field or tensor (LZ_ERR_INPUT), a unit in which:
 * state.json is not this JSON (a missing, extra or mistyped field), the
 * signature is not the run's (naming the first setting that differs), the step
 * is outside 1..max_step, the caller's check of its fields fails, the tensors
 * file does not parse, lacks an expected tensor, holds one more, has one of
 * another dtype or shape, or holds a NaN or infinity (F32, F16, BF16, F64), or
 * the checksum does not match. The caller's buffers are written only when
 * everything passed.
 *
 * LIZARD_CHECKPOINT_KILL=N (docs/knobs.md) makes the writer SIGKILL its own
 * process right after its Nth file write, sync, rename or removal, counted over
 * the process: the crash tests kill it at every point in turn. */
#ifndef LZ_CHECKPOINT_UNIT_H
#define LZ_CHECKPOINT_UNIT_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t
#include <stdint.h>  // uint8_t, uint64_t

#include <jansson.h> // json_t

#include "error.h"              // lz_status
#include "safetensors_writer.h" // lz_stw_tensor

/* One tensor of a unit: its declaration (name, dtype, shape) and its bytes,
 * lz_stw_tensor_bytes(&decl) of them: read from on writing, written to on
 * reading (only when the whole unit passed). Names must be unique. */
typedef struct {
    lz_stw_tensor decl;
    void *data;
} lz_ckpt_tensor;

/* What a unit says about its tensors. */
typedef struct {
    long step;             /* steps done, 1 or more */
    const char *signature; /* the run's settings that must not change on resume */
    json_t *fields;        /* the caller's own fields: a JSON object, or NULL for {} (borrowed) */
} lz_ckpt_state;

/* The caller's check of its fields, after the unit's own format, signature
 * and step passed and before the tensors are read: LZ_OK or an lz_fail naming
 * the field (`where`: the state file's path, for the message). */
typedef lz_status (*lz_ckpt_fields_fn)(void *ctx, const json_t *fields, long step, const char *where);

/* What a reader expects: the run's signature, its step count and exactly these tensors. */
typedef struct {
    const char *signature;
    long max_step;
    const lz_ckpt_tensor *tensors;
    size_t n_tensors;
    lz_ckpt_fields_fn check_fields; /* NULL: the fields must be {} */
    void *ctx;
} lz_ckpt_expect;

/* Writes DIR/NAME as one unit (above). NAME is a plain name (no '/'). */
lz_status lz_ckpt_write(const char *dir, const char *name, const lz_ckpt_state *state, const lz_ckpt_tensor *tensors,
                        size_t n_tensors);

/* True when DIR holds a unit called NAME (or the aside copy a killed writer left). */
bool lz_ckpt_exists(const char *dir, const char *name);

/* Reads DIR/NAME checked whole against `expect` (above); *step is its step. */
lz_status lz_ckpt_read(const char *dir, const char *name, const lz_ckpt_expect *expect, long *step);

/* The checks and copies of lz_ckpt_read on the two files' bytes held in
 * memory (`where` names the unit in messages): what lz_ckpt_read does after
 * reading them, and what the fuzzer feeds. */
lz_status lz_ckpt_check(const char *where, const char *state_text, size_t state_len, const uint8_t *tensors_file,
                        size_t tensors_len, const lz_ckpt_expect *expect, long *step);

/* Signatures are "key=value;" items. The key of the first item of `saved`
 * that `now` lacks (the setting that changed) into out ("settings" if none). */
void lz_signature_first_difference(const char *saved, const char *now, char *out, size_t cap);

#endif

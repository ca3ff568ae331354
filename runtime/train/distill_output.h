/* distill_output.h - the distilled model folder (docs/model-format.md):
 * the teacher's tensors copied as they are, the trained Lizard tensors of
 * every Lizard layer (F32), config.json = the teacher's plus a "lizard"
 * block, and the teacher's tokenizer and generation config beside them. */
#ifndef LZ_DISTILL_OUTPUT_H
#define LZ_DISTILL_OUTPUT_H

#include <stdbool.h> // bool

#include "config.h"         // lz_lizard_config
#include "distill_params.h" // lz_distill_layer
#include "safetensors.h"    // lz_weights

/* layers[i] holds layer i's tensors where softmax[i] is false. */
lz_status lz_distill_write_model(const char *out_dir, const char *teacher_dir, const lz_weights *teacher,
                                 const lz_distill_layer *layers, const bool *softmax, int n_layers,
                                 const lz_lizard_config *lizard);

/* mkdir -p; `flag` names the option in errors. */
lz_status lz_make_dirs(const char *path, const char *flag);

/* --out before a run: with resume, it must hold state_file; without, no config.json (a finished model). */
lz_status lz_check_out_folder(const char *out, const char *state_file, bool resume);
/* Copies src_dir/name to out_dir/name if src_dir has it. */
lz_status lz_copy_optional(const char *out_dir, const char *src_dir, const char *name);

#endif

/* cmd_distill.c - `lizard distill`: stage-1 attention distillation (issue #8).
 *
 *   lizard distill --teacher DIR --data PATH --out DIR [--tokens N --seq-len L --batch B ...]
 *
 * Every Lizard layer learns its feature maps, gate, meta-memory logits and
 * alpha so that its attention output matches the teacher's softmax attention
 * output (MSE before o_proj), on the teacher's own hidden states: layers
 * train independently, each with its own AdamW. With --retain-fraction the
 * layers hardest to linearise (largest relative error after a calibration
 * phase) stay softmax. The result is a model folder in docs/model-format.md's
 * format; a run checkpoints beside it and --resume continues it.
 * Under mpirun -np N the teacher is split by a placement plan (plan.h): each
 * rank trains the layers it owns while the activations pass through, and
 * rank 0 gathers the tensors and writes. docs/distillation.md has the
 * equations and what is verified. */
#include "cli_options.h" // lz_parse_command
#include "commands.h"    // lz_cmd_distill
#include "config.h"      // lz_config_load, lz_config_count_softmax
#include "distill_run.h" // lz_distill_run, lz_distill_setup, lz_distill_train

/* A run that would keep every layer softmax trains nothing: refused before the teacher loads. */
static lz_status check_something_to_distill(const lz_distill_args *a) {
    if (a->retain_fraction >= 1)
        return lz_fail(LZ_ERR_INPUT, "--retain-fraction %g keeps every layer softmax: nothing to distill",
                       a->retain_fraction);
    if (!a->softmax_layers)
        return LZ_OK;
    lz_config cfg;
    LZ_TRY(lz_config_load(a->teacher, &cfg));
    LZ_TRY(lz_config_set_softmax_layers(&cfg, a->softmax_layers));
    if (lz_config_count_softmax(&cfg) == cfg.num_hidden_layers)
        return lz_fail(LZ_ERR_INPUT, "--softmax-layers %s keeps every layer of the teacher (%d) softmax: nothing to "
                       "distill", a->softmax_layers, cfg.num_hidden_layers);
    return LZ_OK;
}

lz_status lz_cmd_distill(int argc, char **argv) {
    lz_distill_run r = {.a = {.feature_map = "softmax", .map_heads = "per-head", .device = "cpu", .gla_precision = "fp32", .teacher_dtype = "fp32", .window = 64, .meta = 4,
                           .tokens = 1000000, .seq_len = 512, .batch = 4, .warmup = -1, .log_every = 10,
                           .calibration_steps = -1, .eval_batches = 4, .lr = 1e-3, .min_lr = -1, .weight_decay = 0.01,
                           .retain_fraction = -1}};
    lz_distill_args *a = &r.a;
    const lz_option options[] = {
        {"--teacher", LZ_OPT_DIR, "DIR", "teacher model folder (no lizard block)", &a->teacher, true, 0, 0},
        {"--data", LZ_OPT_STRING, "PATH", "token ids (1-D int32 .npy), a UTF-8 text file or a folder of *.txt",
         &a->data, true, 0, 0},
        {"--out", LZ_OPT_STRING, "DIR", "the distilled model folder (and its checkpoints)", &a->out, true, 0, 0},
        {"--feature-dim", LZ_OPT_INT, "F", "f: phi has 2f features (default head_dim)", &a->feature_dim, false, 1,
         LZ_TRAIN_MAX_F},
        {"--feature-map", LZ_OPT_STRING, "softmax|exp", "Hedgehog activation (default softmax)", &a->feature_map,
         false, 0, 0},
        {"--map-heads", LZ_OPT_STRING, "per-head|shared",
         "phi_q per query head and phi_k per kv head, or one map each (default per-head)", &a->map_heads, false, 0,
         0},
        {"--window", LZ_OPT_INT, "W", "window branch size (default 64)", &a->window, false, 1, LZ_TRAIN_MAX_W},
        {"--meta-tokens", LZ_OPT_INT, "M", "meta-memory logits (default 4)", &a->meta, false, 0, 4096},
        {"--no-gla-normalize", LZ_OPT_FLAG, "", "GLA without its denominator", &a->no_normalize, false, 0, 0},
        {"--softmax-layers", LZ_OPT_STRING, "LIST|none", "layers kept as softmax attention (default none; not all)",
         &a->softmax_layers, false, 0, 0},
        {"--retain-fraction", LZ_OPT_FLOAT, "X", "instead: keep this fraction of layers as softmax, chosen by error",
         &a->retain_fraction, false, 0, 1},
        {"--retain-by", LZ_OPT_STRING, "error", "how --retain-fraction chooses (largest relative MSE)",
         &a->retain_by, false, 0, 0},
        {"--calibration-steps", LZ_OPT_INT, "N", "steps before the softmax layers are chosen (default 10%)",
         &a->calibration_steps, false, 0, 1e12},
        {"--tokens", LZ_OPT_INT, "N", "training tokens (default 1000000)", &a->tokens, false, 1, 1e15},
        {"--seq-len", LZ_OPT_INT, "L", "tokens per sequence (default 512)", &a->seq_len, false, 1, 1 << 20},
        {"--batch", LZ_OPT_INT, "B", "sequences per step (default 4)", &a->batch, false, 1, 1 << 16},
        {"--lr", LZ_OPT_FLOAT, "X", "peak learning rate (default 1e-3)", &a->lr, false, 0, 10},
        {"--min-lr", LZ_OPT_FLOAT, "X", "end of the cosine decay (default lr / 10)", &a->min_lr, false, 0, 10},
        {"--warmup", LZ_OPT_INT, "N", "linear warmup steps (default 5% of the steps)", &a->warmup, false, 0, 1e12},
        {"--weight-decay", LZ_OPT_FLOAT, "X", "AdamW decoupled weight decay of the maps and gate (default 0.01)",
         &a->weight_decay, false, 0, 10},
        {"--seed", LZ_OPT_INT, "N", "initial tensors and data order (default 0)", &a->seed, false, 0,
         9007199254740991.0},
        {"--eval-batches", LZ_OPT_INT, "N", "held-out batches measured at the start, the end and for the choice "
         "of softmax layers (default 4)", &a->eval_batches, false, 1, 1e6},
        {"--log", LZ_OPT_STRING, "FILE", "JSON lines: one per step and per held-out evaluation", &a->log_path,
         false, 0, 0},
        {"--log-every", LZ_OPT_INT, "N", "progress line every N steps (default 10)", &a->log_every, false, 1, 1e12},
        {"--checkpoint-every", LZ_OPT_INT, "N", "write the folder and the run's state every N steps (default: at "
         "the end)", &a->checkpoint_every, false, 0, 1e12},
        {"--stop-at-step", LZ_OPT_INT, "N", "checkpoint after step N and stop (--resume continues)", &a->stop_at,
         false, 0, 1e12},
        {"--device", LZ_OPT_STRING, "cpu|cuda", "where the layers' training steps run (default cpu)", &a->device, false, 0, 0},
        {"--teacher-device", LZ_OPT_STRING, "cpu|cuda", "where the teacher runs (default: as --device)",
         &a->teacher_device, false, 0, 0},
        {"--teacher-dtype", LZ_OPT_STRING, "fp32|bf16", "with the teacher on the GPU: its activations (default fp32; "
         "bf16 is faster, its targets rounded to bf16)", &a->teacher_dtype, false, 0, 0},
        {"--gla-precision", LZ_OPT_STRING, "fp32|bf16", "with --device cuda: the GLA's in-chunk products in fp32 "
         "(default) or bf16 on the tensor cores (fp32 accumulation, gates and states)", &a->gla_precision, false, 0,
         0},
        {"--plan", LZ_OPT_STRING, "FILE", "under mpirun: a hand-written placement plan (default balanced)",
         &a->plan_file, false, 0, 0},
        {"--resume", LZ_OPT_FLAG, "", "continue the run checkpointed in --out", &a->resume, false, 0, 0},
    };
    const lz_command_spec spec = {"distill", "stage-1 attention distillation of a teacher into a Lizard model",
                                  options, (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    LZ_TRY(check_something_to_distill(a));
    lz_status s = lz_distill_setup(&r);
    if (s == LZ_OK)
        s = lz_distill_train(&r);
    lz_distill_teardown(&r);
    return s;
}

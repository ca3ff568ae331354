/* cmd_finetune.c - `lizard finetune`: stage 2 of the Lizard recipe.
 *
 *   lizard finetune --model DIR --data TEXT --out DIR2 [--lora-rank 8 --lora-alpha 16 ...]
 *
 * Next-token cross-entropy over the whole model; LoRA adapters on the chosen
 * linear layers (q, k, v, o by default), the Lizard tensors trainable unless
 * --freeze-lizard, every other weight frozen; AdamW with warmup and cosine
 * decay, gradient clipping. The output is the model with the adapters merged
 * (a plain checkpoint every command loads) and, with --adapter-out, a PEFT
 * adapter folder. docs/distillation.md ("Stage 2") has the details. */
#include "cli_options.h"  // lz_parse_command
#include "commands.h"     // lz_cmd_finetune
#include "finetune_run.h" // lz_finetune_run, lz_finetune_setup, lz_finetune_train

lz_status lz_cmd_finetune(int argc, char **argv) {
    lz_finetune_run r = {.a = {.device = "cpu", .dtype = "bf16", .targets = "q,k,v,o", .tokens = 100000,
                               .seq_len = 512, .batch = 4, .warmup = -1, .lora_rank = 8, .log_every = 10,
                               .eval_batches = 2, .lr = 5e-4, .min_lr = -1, .weight_decay = 0.0, .clip = 1.0,
                               .lora_alpha = 16}};
    lz_finetune_args *a = &r.a;
    const lz_option options[] = {
        {"--model", LZ_OPT_STRING, "DIR", "a Lizard model folder (config.json with a lizard block)", &a->model, true,
         0, 0},
        {"--data", LZ_OPT_STRING, "PATH", "training text (UTF-8 file or folder of *.txt) or token ids (.npy)",
         &a->data, true, 0, 0},
        {"--out", LZ_OPT_STRING, "DIR", "the fine-tuned model, LoRA merged (and the run's checkpoint)", &a->out, true,
         0, 0},
        {"--adapter-out", LZ_OPT_STRING, "DIR", "also the adapter alone as a PEFT folder", &a->adapter_out, false, 0,
         0},
        {"--tokens", LZ_OPT_INT, "N", "training tokens (default 100000)", &a->tokens, false, 1, 1e15},
        {"--seq-len", LZ_OPT_INT, "L", "tokens per sequence (default 512)", &a->seq_len, false, 1, 1 << 20},
        {"--batch", LZ_OPT_INT, "B", "sequences per step (default 4)", &a->batch, false, 1, 1 << 16},
        {"--micro-batch", LZ_OPT_INT, "M", "sequences per micro-batch, dividing --batch (default: the batch in one "
         "process, 1 under mpirun)", &a->micro_batch, false, 0, 1 << 16},
        {"--lr", LZ_OPT_FLOAT, "X", "peak learning rate (default 5e-4)", &a->lr, false, 0, 10},
        {"--warmup", LZ_OPT_INT, "N", "linear warmup steps (default 5% of the steps)", &a->warmup, false, 0, 1e12},
        {"--min-lr", LZ_OPT_FLOAT, "X", "end of the cosine decay (default lr / 10)", &a->min_lr, false, 0, 10},
        {"--weight-decay", LZ_OPT_FLOAT, "X", "AdamW decoupled weight decay (default 0)", &a->weight_decay, false, 0,
         10},
        {"--clip", LZ_OPT_FLOAT, "X", "clip the gradients' global norm to X (default 1; 0: off)", &a->clip, false, 0,
         1e12},
        {"--lora-rank", LZ_OPT_INT, "R", "LoRA rank (default 8)", &a->lora_rank, false, 0, 1e9},
        {"--lora-alpha", LZ_OPT_FLOAT, "X", "LoRA alpha: the update is scaled by alpha / rank (default 16)",
         &a->lora_alpha, false, 0, 1e6},
        {"--lora-dropout", LZ_OPT_FLOAT, "P", "dropout on the LoRA path's input (default 0)", &a->lora_dropout, false,
         0, 1},
        {"--lora-targets", LZ_OPT_STRING, "LIST", "modules with LoRA: q,k,v,o,gate,up,down (default q,k,v,o)",
         &a->targets, false, 0, 0},
        {"--freeze-lizard", LZ_OPT_FLAG, "", "keep the Lizard tensors (maps, gate, meta logits, alpha) frozen",
         &a->freeze_lizard, false, 0, 0},
        {"--softmax-layers", LZ_OPT_STRING, "LIST", "override the model's softmax layers (all, none, 0,2,...)",
         &a->softmax_layers, false, 0, 0},
        {"--valid", LZ_OPT_STRING, "PATH", "held-out text for the loss at the start and the end (default: the "
         "batches of --data after the training ones)", &a->valid, false, 0, 0},
        {"--eval-batches", LZ_OPT_INT, "N", "held-out batches (default 2; 0: none)", &a->eval_batches, false, 0, 1e6},
        {"--seed", LZ_OPT_INT, "N", "LoRA init, dropout and data order (default 0)", &a->seed, false, 0,
         9007199254740991.0},
        {"--log", LZ_OPT_STRING, "FILE", "JSON lines: every step (loss, lr, tok/s, grad norm), held-out losses",
         &a->log_path, false, 0, 0},
        {"--log-every", LZ_OPT_INT, "N", "progress line every N steps (default 10)", &a->log_every, false, 1, 1e12},
        {"--checkpoint-every", LZ_OPT_INT, "N", "write the run's state every N steps (default: at the end)",
         &a->checkpoint_every, false, 0, 1e12},
        {"--stop-at-step", LZ_OPT_INT, "N", "checkpoint after step N and stop (--resume continues)", &a->stop_at,
         false, 0, 1e12},
        {"--device", LZ_OPT_STRING, "cpu|cuda", "where the model runs (default cpu; cuda picks the GPU by local rank)",
         &a->device, false, 0, 0},
        {"--dtype", LZ_OPT_STRING, "bf16|fp32", "CUDA: weights and activations (default bf16; fp32 for exactness)",
         &a->dtype, false, 0, 0},
        {"--gla-precision", LZ_OPT_STRING, "fp32|bf16", "CUDA: the Lizard layers' in-chunk GLA products in the "
         "backward (default: as --dtype)", &a->gla_precision, false, 0, 0},
        {"--resume", LZ_OPT_FLAG, "", "continue the run checkpointed in --out", &a->resume, false, 0, 0},
    };
    const lz_command_spec spec = {"finetune", "stage 2: LoRA fine-tuning of a Lizard model on next-token prediction",
                                  options, (int)(sizeof options / sizeof options[0])};
    bool help;
    LZ_TRY(lz_parse_command(&spec, argc, argv, &help));
    if (help)
        return LZ_OK;
    lz_status s = lz_finetune_setup(&r);
    if (s == LZ_OK)
        s = lz_finetune_train(&r);
    lz_finetune_teardown(&r);
    return s;
}

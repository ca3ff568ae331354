/* serve_chat.h - chat messages as the prompt text an instruct model was
 * trained on: LLaMA-3 (<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>)
 * or Mistral ([INST] ... [/INST] answer</s>). The text excludes BOS: the
 * tokenizer adds it (or, continuing a session, does not). */
#ifndef LZ_SERVE_CHAT_H
#define LZ_SERVE_CHAT_H

#include <stdbool.h> // bool
#include <stddef.h>  // size_t

#include "error.h"     // lz_status
#include "serve_api.h" // serve_message
#include "tokenizer.h" // lz_text_span

typedef enum { SERVE_CHAT_LLAMA3, SERVE_CHAT_MISTRAL } serve_chat_format;

/* --chat-template NAME when given, else the markers in DIR/tokenizer_config.json's
 * chat_template, else LLaMA-3, assumed (*assumed: the model named no format lizard knows).
 * *why says which, without parentheses (for the startup line). */
lz_status serve_chat_detect(const char *model_dir, const char *flag, serve_chat_format *out, const char **why,
                            bool *assumed);
const char *serve_chat_format_name(serve_chat_format f);

/* The messages followed by the opening of the assistant's turn; eos_text is
 * the tokenizer's eos token string (Mistral closes an answer with it).
 * *out is malloc'd and NUL-terminated. */
lz_status serve_chat_render(serve_chat_format f, const serve_message *m, int n, const char *eos_text, char **out,
                            size_t *len);
/* The same, and where each message's content lies in *out (*content is
 * malloc'd, in order): there special-token text is the client's, not the
 * template's, and is tokenized as plain text. */
lz_status serve_chat_render_spans(serve_chat_format f, const serve_message *m, int n, const char *eos_text,
                                  char **out, size_t *len, lz_text_span **content, int *n_content);
/* What closes an assistant turn (LLaMA-3: <|eot_id|>; Mistral: eos_text). */
const char *serve_chat_turn_end(serve_chat_format f, const char *eos_text);

#endif

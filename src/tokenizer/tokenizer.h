/*
 * tokenizer.h - text <-> token ids, identical to the reference tokenizers.
 *
 * Loads the Hugging Face `tokenizer.json` format (byte-level BPE with regex
 * pre-tokenizers, SentencePiece-style BPE with byte fallback, added/special
 * tokens, normalizers, post-processors, decoders), SentencePiece
 * `tokenizer.model` files (BPE type) and the tokenizer embedded in GGUF files
 * (`tokenizer.ggml.*`, model "gpt2" or "llama"). Whatever the source, the
 * loaders build one internal pipeline (normalize -> split out added tokens ->
 * pre-tokenize -> BPE -> post-process), so encoding and decoding code is shared.
 *
 * The bar is "the same ids as the reference": Hugging Face `tokenizers` for
 * tokenizer.json/tokenizer.model, llama.cpp for GGUF files.
 *
 * Threads: a tokenizer is immutable after loading; encode/decode may run on
 * any number of threads at once. An rp_detok belongs to one thread at a time.
 */
#ifndef RP_TOKENIZER_H
#define RP_TOKENIZER_H

#include "../base/base.h"
#include "../gguf/gguf.h"

typedef struct rp_tokenizer rp_tokenizer;

// Loads a Hugging Face tokenizer. `path` is a model folder (tokenizer.json, or
// tokenizer.model when tokenizer.json is absent or holds no real vocabulary, plus
// optional tokenizer_config.json for bos/eos/add_bos_token/chat_template and
// generation_config.json for extra end-of-generation ids) or the path of a
// tokenizer.json file. Errors: RP_ERR_IO (missing file), RP_ERR_INVALID
// (malformed JSON or fields, with file and field named), RP_ERR_UNSUPPORTED (a
// component type Rapid does not implement, named), RP_ERR_NOMEM.
rp_status rp_tok_load_hf(const char *path, rp_tokenizer **out);

// Loads the tokenizer stored in a GGUF file's `tokenizer.ggml.*` keys. `g` is
// only read during the call. Errors as rp_tok_load_hf.
rp_status rp_tok_load_gguf(const rp_gguf *g, rp_tokenizer **out);

// Picks the loader: a path ending in ".gguf" (or starting with the GGUF magic)
// is opened as GGUF, anything else goes to rp_tok_load_hf.
rp_status rp_tok_load_file(const char *path, rp_tokenizer **out);

void rp_tok_destroy(rp_tokenizer *t);

// Encodes `len` bytes of `text` (any bytes: invalid UTF-8 sequences are replaced
// by U+FFFD first, as a UTF-8 decoder with errors="replace" does). Added and
// special tokens written in the text are matched as Hugging Face does
// (leftmost-longest, with their lstrip/rstrip/single_word/normalized flags).
// add_special: add BOS/EOS etc. as the post-processor / add_bos_token config say
// (HF's add_special_tokens=True; llama.cpp's add_special for GGUF).
// *ids is rp_malloc'd (caller rp_frees; may be NULL when *n_ids is 0).
// Errors: RP_ERR_NOMEM, RP_ERR_INVALID (text too large or a regex failure).
rp_status rp_tok_encode(const rp_tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
                        size_t *n_ids);

int32_t rp_tok_n_vocab(const rp_tokenizer *t); // one past the largest id
int32_t rp_tok_bos(const rp_tokenizer *t);     // -1 if none
int32_t rp_tok_eos(const rp_tokenizer *t);     // -1 if none
int32_t rp_tok_pad(const rp_tokenizer *t);     // -1 if none
// End of generation: eos, eot, <|im_end|>, <|eot_id|>, <|end|>, <end_of_turn>, ...
bool rp_tok_is_eog(const rp_tokenizer *t, int32_t id);
// A special (control) token: skipped by decode(skip_special=true).
bool rp_tok_is_special(const rp_tokenizer *t, int32_t id);
// Id of a token string as written in the vocabulary or added tokens (e.g.
// "<|im_end|>"), -1 if none.
int32_t rp_tok_find(const rp_tokenizer *t, const char *token_text);
// The raw vocabulary string of a token (e.g. "Ġhello", "▁the"); NULL for an
// unused id. *len receives its length.
const char *rp_tok_text(const rp_tokenizer *t, int32_t id, size_t *len);
// The decoded bytes of one token (byte-level mapping undone, ▁ -> space,
// <0xNN> -> the byte); special tokens give their text. Pointer owned by the
// tokenizer; may be a partial UTF-8 sequence. NULL (len 0) for a bad id.
const char *rp_tok_piece(const rp_tokenizer *t, int32_t id, size_t *len);
// The chat template that came with the tokenizer (tokenizer_config.json or
// GGUF tokenizer.chat_template), NULL if none.
const char *rp_tok_chat_template(const rp_tokenizer *t);
// The text of the bos/eos tokens ("" if none), for chat templates.
const char *rp_tok_bos_text(const rp_tokenizer *t);
const char *rp_tok_eos_text(const rp_tokenizer *t);

// Decodes ids to text as HF decode(skip_special_tokens=skip_special) does,
// including the SentencePiece leading-space strip and U+FFFD for bytes that do
// not form valid UTF-8. Out-of-range ids are skipped. *out is rp_malloc'd and
// NUL-terminated; *len excludes the NUL. Errors: RP_ERR_NOMEM.
rp_status rp_tok_decode(const rp_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **out,
                        size_t *len);

// Incremental detokenizer for streaming output. Caller-owned; init/deinit pair.
// Push ids one at a time; each push returns the newly completed text. The
// output is always valid UTF-8: an incomplete multi-byte tail is held until it
// completes, bytes that cannot complete become U+FFFD. Special tokens are
// skipped while `skip_special` is true (the default after init; set the field
// to change it). The concatenated output equals rp_tok_decode of all the ids
// except where HF's decoders treat invalid byte runs differently.
typedef struct rp_detok {
    const rp_tokenizer *t;
    bool skip_special;
    bool at_start;    // nothing emitted yet (for the leading-space strip)
    uint8_t pend[4];  // incomplete UTF-8 tail
    int n_pend;
    char *buf;        // output of the last push/flush
    size_t len, cap;
} rp_detok;

void rp_detok_init(rp_detok *d, const rp_tokenizer *t);
void rp_detok_deinit(rp_detok *d);
// *text is valid until the next push/flush/deinit. Errors: RP_ERR_NOMEM.
rp_status rp_detok_push(rp_detok *d, int32_t id, const char **text, size_t *len);
// Emits what is still held (as U+FFFD) and resets the stream.
rp_status rp_detok_flush(rp_detok *d, const char **text, size_t *len);

#endif

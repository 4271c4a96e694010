/*
 * tokenizer_int.h - the tokenizer's internal structures, shared by its .c files.
 *
 * Every loader (load_hf.c, load_spm.c, load_gguf.c) fills one rp_tokenizer:
 *   - vocab[]: per id its vocabulary string, attributes and decoded piece;
 *   - vocab_map (string -> id) for the model's vocabulary, merges (id pair ->
 *     rank and result) for rank-based BPE, scores for SentencePiece BPE;
 *   - flat lists of normalizer, pre-tokenizer and decoder steps (Sequences are
 *     flattened at load; regexes compiled once with PCRE2 JIT);
 *   - added tokens with their matching flags, and the post-processor's prefix
 *     and suffix ids for add_special.
 * File map: vocab.c (maps, accessors, lifetime), normalize.c, pretok.c, bpe.c,
 * encode.c (added tokens, pipeline), decode.c (decoders, detokenizer),
 * load_hf.c, load_spm.c, load_gguf.c.
 */
#ifndef RP_TOKENIZER_INT_H
#define RP_TOKENIZER_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

#define RP_TOK_MAX_ID (1 << 24)      // ids at or above this are rejected as malformed
#define RP_TOK_MAX_TEXT (1u << 30)   // longest text rp_tok_encode accepts

// Token attributes (GGUF token_type maps onto these).
enum {
    TOK_ATTR_NORMAL = 1,
    TOK_ATTR_UNKNOWN = 2,
    TOK_ATTR_CONTROL = 4,
    TOK_ATTR_USER = 8,
    TOK_ATTR_UNUSED = 16,
    TOK_ATTR_BYTE = 32,
};

typedef struct tok_entry {
    char *text;     // vocabulary string (NUL-terminated), NULL for an unused id
    uint32_t len;
    float score;    // SentencePiece score
    uint8_t attr;
    bool special;   // skipped by decode(skip_special)
    bool eog;
    char *piece;    // decoded bytes (see rp_tok_piece)
    uint32_t piece_len;
    const char *dec_text; // normalized added token: the text decode starts from (owned by added[]), else NULL
    uint32_t dec_len;
} tok_entry;

// string -> int32 map; keys are borrowed (must outlive the map).
typedef struct tok_strmap {
    struct tok_strslot {
        const char *k;
        uint32_t len;
        int32_t v; // -1: empty slot
        uint32_t hash;
    } *slots;
    size_t cap, n;
} tok_strmap;

// (a, b) id pair -> (rank, new id).
typedef struct tok_pairmap {
    struct tok_pairslot {
        uint64_t key; // UINT64_MAX: empty
        int32_t rank, id;
    } *slots;
    size_t cap, n;
} tok_pairmap;

enum { TOK_MODEL_BPE = 0, TOK_MODEL_SPM = 1 };

enum { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_LOWER, NORM_STRIP, NORM_PREPEND, NORM_REPLACE,
       NORM_STRIP_ACCENTS, NORM_SPM };

typedef struct tok_norm {
    int type;
    char *a, *b; // Prepend: a; Replace: a = literal pattern (when re is NULL), b = content
    size_t a_len, b_len;
    pcre2_code *re; // Replace with a Regex pattern
    bool left, right; // Strip
    // SentencePiece normalizer (NORM_SPM): a = precompiled charsmap (may be empty)
    bool dummy_prefix, remove_ws, escape_ws;
} tok_norm;

// Split behaviors (HF SplitDelimiterBehavior).
enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE };
// Metaspace prepend schemes; LLAMACPP: at the start and after every special token.
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER, PREPEND_LLAMACPP };

typedef struct tok_pre {
    int type;
    pcre2_code *re; // Split pattern, or ByteLevel's GPT-2 regex when use_regex
    int behavior;
    bool invert;
    bool add_prefix_space; // ByteLevel
    char repl[8];          // Metaspace replacement (UTF-8)
    int repl_len;
    int prepend;           // Metaspace scheme
    bool split;            // Metaspace split on the replacement
} tok_pre;

enum { DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE };

typedef struct tok_dec {
    int type;
    char *a, *b; // Replace: pattern, content; Metaspace: a = replacement
    size_t a_len, b_len;
    uint32_t strip_cp; // Strip: the character
    int start, stop;   // Strip counts
    bool prepend;      // Metaspace: strip the first token's leading replacement
} tok_dec;

typedef struct tok_added {
    int32_t id;
    char *content; // as matched (normalized form when `normalized`)
    size_t len;
    bool lstrip, rstrip, single_word, normalized, special;
} tok_added;

// Added tokens to match in one pass, bucketed by first byte, longest first.
typedef struct tok_matcher {
    tok_added **items;
    int n;
    int first[257]; // items with first byte b are [first[b], first[b+1])
} tok_matcher;

struct rp_tokenizer {
    int model;
    int32_t n_vocab;
    tok_entry *vocab; // (n_vocab)
    tok_strmap vocab_map;
    tok_pairmap merges;
    bool byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    int32_t byte_ids[256]; // <0xNN> tokens, -1 if absent

    tok_norm *norms;
    int n_norms;
    tok_pre *pres;
    int n_pres;
    tok_dec *decs;
    int n_decs;
    bool has_decoder;   // false: decode joins tokens with spaces (HF without a decoder)
    bool strip_leading; // the decoder drops the text's first leading space
    bool clean_up_spaces;

    tok_added *added;
    int n_added;
    tok_matcher match_raw, match_norm;

    int32_t *prefix, *suffix; // add_special ids around the sequence
    int n_prefix, n_suffix;

    int32_t bos, eos, pad;
    char *bos_text, *eos_text;
    char *chat_template;
};

/* vocab.c */
rp_status tok_strmap_init(tok_strmap *m, size_t n_expected);
void tok_strmap_free(tok_strmap *m);
rp_status tok_strmap_put(tok_strmap *m, const char *k, size_t len, int32_t v); // keeps the first value
int32_t tok_strmap_get(const tok_strmap *m, const char *k, size_t len);       // -1 if absent
rp_status tok_pairmap_init(tok_pairmap *m, size_t n_expected);
void tok_pairmap_free(tok_pairmap *m);
rp_status tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id); // keeps the first
bool tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id);

rp_status tok_create(int32_t n_vocab, rp_tokenizer **out);
// Sets vocab[id] text (copied). Fails on an out-of-range id.
rp_status tok_set_text(rp_tokenizer *t, int32_t id, const char *s, size_t len);
// Grows vocab to hold `n` ids.
rp_status tok_grow(rp_tokenizer *t, int32_t n);
// After the loader filled everything: byte ids, pieces, matchers, eog marks.
rp_status tok_finish(rp_tokenizer *t);
void tok_mark_eog_by_text(rp_tokenizer *t);
rp_status tok_compile(const char *pattern, size_t len, uint32_t extra, pcre2_code **out);

/* utf8 helpers (vocab.c) */
int tok_utf8_len(uint8_t c);                                        // sequence length from the lead byte, 1 for invalid
int tok_utf8_decode(const char *s, size_t len, uint32_t *cp);       // bytes of a valid sequence, 0 if invalid/incomplete
int tok_utf8_encode(uint32_t cp, char *out);                        // 1..4
size_t tok_utf8_valid_prefix(const uint8_t *s, size_t len, bool *incomplete); // valid bytes, see decode.c
size_t tok_utf8_bad_len(const uint8_t *s, size_t len); // bytes of the ill-formed sequence at s (>= 1)
bool tok_is_whitespace(uint32_t cp);                                // Rust char::is_whitespace
// Replaces invalid UTF-8 with U+FFFD (maximal subparts, as Rust's from_utf8_lossy).
rp_status tok_utf8_sanitize(const char *s, size_t len, char **out, size_t *out_len);

/* growable byte buffer */
typedef struct tok_buf {
    char *p;
    size_t len, cap;
} tok_buf;
rp_status tok_buf_put(tok_buf *b, const void *s, size_t n);
rp_status tok_buf_reserve(tok_buf *b, size_t n);

/* normalize.c */
// Runs the normalizers over s; result in *out (reset first).
rp_status tok_normalize(const rp_tokenizer *t, const char *s, size_t len, tok_buf *out);
rp_status tok_normalize_steps(const tok_norm *norms, int n, const char *s, size_t len, tok_buf *out);
void tok_norm_free(tok_norm *n);

/* pretok.c: a list of pieces over one buffer */
typedef struct tok_span {
    size_t off, len;
} tok_span;
typedef struct tok_pieces {
    tok_buf buf;
    tok_span *sp;
    size_t n, cap;
} tok_pieces;
void tok_pieces_free(tok_pieces *p);
// Pre-tokenizes one segment. `first`: the segment starts the text (Metaspace
// "first"); `after_special`: a special token precedes it (llama.cpp prefix).
rp_status tok_pretokenize(const rp_tokenizer *t, const char *s, size_t len, bool first, bool after_special,
                          tok_pieces *out, tok_pieces *tmp);
void tok_pre_free(tok_pre *p);
extern const char *const tok_gpt2_regex;
int tok_byte_to_unicode(uint8_t b, char out[2]);      // GPT-2 byte -> char (UTF-8), returns its length
int tok_unicode_to_byte(uint32_t cp);                 // inverse, -1 if not a byte char

/* bpe.c */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;
rp_status tok_ids_push(tok_ids *ids, int32_t id);
typedef struct tok_bpe_work tok_bpe_work;
rp_status tok_bpe_work_create(tok_bpe_work **out);
void tok_bpe_work_destroy(tok_bpe_work *w);
rp_status tok_model_encode(const rp_tokenizer *t, tok_bpe_work *w, const char *s, size_t len, tok_ids *out);

/* decode.c */
void tok_dec_free(tok_dec *d);
// The piece of one token (decoder without the first-token rules).
// Append a pre-tokenizer / decoder step to the pipeline (takes ownership; frees it on failure).
rp_status tok_add_pre(rp_tokenizer *t, tok_pre p);
rp_status tok_add_dec(rp_tokenizer *t, tok_dec d);
rp_status tok_make_piece(const rp_tokenizer *t, int32_t id, tok_buf *out);
// The piece of a token whose vocabulary text is `text` (for added tokens stored normalized).
rp_status tok_make_piece_text(const rp_tokenizer *t, bool special, const char *text, size_t len, tok_buf *out);

/* encode.c */
rp_status tok_build_matchers(rp_tokenizer *t);

/* loaders */
rp_status tok_load_spm_model(const char *path, rp_tokenizer **out); // load_spm.c

#endif

/*
 * load_hf.c - the Hugging Face tokenizer.json / tokenizer_config.json loader.
 *
 * Reads the JSON with jansson and turns each component into the flat step
 * lists of tokenizer_int.h: normalizers, pre-tokenizers (Digits, Whitespace,
 * Punctuation... become regex Splits), the BPE model (vocab, merges as
 * "a b" strings or [a, b] pairs), added tokens, post-processor (prefix/suffix
 * ids for add_special) and decoders. Every field is type-checked; a component
 * type Rapid does not implement is RP_ERR_UNSUPPORTED naming it.
 *
 * tokenizer_config.json supplies bos/eos/pad, the chat template,
 * clean_up_tokenization_spaces, and for the Llama/Gemma tokenizer classes
 * (whose transformers code rebuilds the post-processor from them)
 * add_bos_token/add_eos_token. A folder whose tokenizer.json is missing or
 * holds no vocabulary but that has a SentencePiece tokenizer.model is loaded
 * from the latter (load_spm.c), as transformers does.
 */
#include "tokenizer_int.h"

#include <jansson.h>
#include <stdlib.h>

typedef struct hf_ctx {
    rp_tokenizer *t;
    const char *file;
} hf_ctx;

#define HF_ERR(c, st, ...) rp_error_prefix(RP_ERR(st, __VA_ARGS__), "%s", (c)->file)

static const char *jstr(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(const json_t *o, const char *key, bool def)
{
    const json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

/* ---- step lists ------------------------------------------------------------ */

static rp_status add_norm(hf_ctx *c, tok_norm n)
{
    rp_tokenizer *t = c->t;
    tok_norm *v = rp_realloc(t->norms, ((size_t)t->n_norms + 1) * sizeof(*v));
    if (!v) {
        tok_norm_free(&n);
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    t->norms = v;
    t->norms[t->n_norms++] = n;
    return RP_OK;
}

// A split step from a regex (literal when `literal`).
static rp_status add_split(rp_tokenizer *t, const char *pat, size_t len, bool literal, int behavior, bool invert)
{
    tok_pre p = {.type = PRE_SPLIT, .behavior = behavior, .invert = invert};
    rp_status st = tok_compile(pat, len, literal ? PCRE2_LITERAL : 0, &p.re);
    if (st)
        return st;
    return tok_add_pre(t, p);
}

/* ---- normalizers ----------------------------------------------------------- */

// HF patterns: {"String": "..."} or {"Regex": "..."}.
static rp_status get_pattern(hf_ctx *c, const json_t *o, const char *what, const char **s, bool *regex)
{
    const json_t *p = json_object_get(o, "pattern");
    if (json_is_object(p)) {
        if ((*s = jstr(p, "String"))) {
            *regex = false;
            return RP_OK;
        }
        if ((*s = jstr(p, "Regex"))) {
            *regex = true;
            return RP_OK;
        }
    }
    return HF_ERR(c, RP_ERR_INVALID, "%s: missing or malformed \"pattern\"", what);
}

static rp_status parse_normalizer(hf_ctx *c, const json_t *n, int depth)
{
    if (json_is_null(n) || !n)
        return RP_OK;
    if (!json_is_object(n) || depth > 16)
        return HF_ERR(c, RP_ERR_INVALID, "normalizer: expected an object");
    const char *type = jstr(n, "type");
    if (!type)
        return HF_ERR(c, RP_ERR_INVALID, "normalizer: missing \"type\"");
    rp_status st;
    tok_norm nm = {0};
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return HF_ERR(c, RP_ERR_INVALID, "normalizer Sequence: \"normalizers\" is not an array");
        for (size_t i = 0; i < json_array_size(list); i++)
            if ((st = parse_normalizer(c, json_array_get(list, i), depth + 1)))
                return st;
        return RP_OK;
    } else if (!strcmp(type, "NFC")) {
        nm.type = NORM_NFC;
    } else if (!strcmp(type, "NFD")) {
        nm.type = NORM_NFD;
    } else if (!strcmp(type, "NFKC")) {
        nm.type = NORM_NFKC;
    } else if (!strcmp(type, "NFKD")) {
        nm.type = NORM_NFKD;
    } else if (!strcmp(type, "Lowercase")) {
        nm.type = NORM_LOWER;
    } else if (!strcmp(type, "StripAccents")) {
        nm.type = NORM_STRIP_ACCENTS;
    } else if (!strcmp(type, "Strip")) {
        nm.type = NORM_STRIP;
        nm.left = jbool(n, "strip_left", true);
        nm.right = jbool(n, "strip_right", true);
    } else if (!strcmp(type, "Prepend")) {
        const char *p = jstr(n, "prepend");
        if (!p)
            return HF_ERR(c, RP_ERR_INVALID, "normalizer Prepend: missing \"prepend\"");
        nm.type = NORM_PREPEND;
        nm.a_len = strlen(p);
        if (!(nm.a = rp_strdup(p)))
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
    } else if (!strcmp(type, "Replace")) {
        const char *pat, *content = jstr(n, "content");
        bool regex;
        if ((st = get_pattern(c, n, "normalizer Replace", &pat, &regex)))
            return st;
        if (!content)
            return HF_ERR(c, RP_ERR_INVALID, "normalizer Replace: missing \"content\"");
        nm.type = NORM_REPLACE;
        nm.a_len = strlen(pat);
        nm.b_len = strlen(content);
        nm.a = rp_strdup(pat);
        nm.b = rp_strdup(content);
        if (!nm.a || !nm.b) {
            tok_norm_free(&nm);
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        }
        if (regex && (st = tok_compile(pat, nm.a_len, 0, &nm.re))) {
            tok_norm_free(&nm);
            return rp_error_prefix(st, "%s: normalizer Replace", c->file);
        }
    } else {
        return HF_ERR(c, RP_ERR_UNSUPPORTED, "normalizer type \"%s\" is not supported", type);
    }
    return add_norm(c, nm);
}

/* ---- pre-tokenizers -------------------------------------------------------- */

static const char *const punct_regex = "[\\p{P}!-/:-@\\[-`{-~]";

static rp_status parse_behavior(hf_ctx *c, const json_t *o, int def, int *out)
{
    const char *b = jstr(o, "behavior");
    if (!b) {
        *out = def;
        return RP_OK;
    }
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(b, names[i])) {
            *out = i;
            return RP_OK;
        }
    return HF_ERR(c, RP_ERR_UNSUPPORTED, "split behavior \"%s\" is not supported", b);
}

static rp_status parse_metaspace_common(hf_ctx *c, const json_t *o, char *repl, int *repl_len, int *prepend)
{
    const char *r = jstr(o, "replacement");
    if (!r)
        r = "\xE2\x96\x81";
    size_t rl = strlen(r);
    uint32_t cp;
    if (rl == 0 || rl > 4 || tok_utf8_decode(r, rl, &cp) != (int)rl)
        return HF_ERR(c, RP_ERR_INVALID, "Metaspace: \"replacement\" must be one character");
    memcpy(repl, r, rl);
    *repl_len = (int)rl;
    const char *scheme = jstr(o, "prepend_scheme");
    if (scheme) {
        if (!strcmp(scheme, "always"))
            *prepend = PREPEND_ALWAYS;
        else if (!strcmp(scheme, "first"))
            *prepend = PREPEND_FIRST;
        else if (!strcmp(scheme, "never"))
            *prepend = PREPEND_NEVER;
        else
            return HF_ERR(c, RP_ERR_UNSUPPORTED, "Metaspace prepend_scheme \"%s\" is not supported", scheme);
    } else {
        *prepend = jbool(o, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
    }
    return RP_OK;
}

static rp_status parse_pretok(hf_ctx *c, const json_t *p, int depth)
{
    rp_tokenizer *t = c->t;
    if (!p || json_is_null(p))
        return RP_OK;
    if (!json_is_object(p) || depth > 16)
        return HF_ERR(c, RP_ERR_INVALID, "pre_tokenizer: expected an object");
    const char *type = jstr(p, "type");
    if (!type)
        return HF_ERR(c, RP_ERR_INVALID, "pre_tokenizer: missing \"type\"");
    rp_status st;
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return HF_ERR(c, RP_ERR_INVALID, "pre_tokenizer Sequence: \"pretokenizers\" is not an array");
        for (size_t i = 0; i < json_array_size(list); i++)
            if ((st = parse_pretok(c, json_array_get(list, i), depth + 1)))
                return st;
        return RP_OK;
    }
    if (!strcmp(type, "Split")) {
        const char *pat;
        bool regex;
        int behavior;
        if ((st = get_pattern(c, p, "pre_tokenizer Split", &pat, &regex)) ||
            (st = parse_behavior(c, p, SPLIT_ISOLATED, &behavior)))
            return st;
        if ((st = add_split(t, pat, strlen(pat), !regex, behavior, jbool(p, "invert", false))))
            return rp_error_prefix(st, "%s: pre_tokenizer Split", c->file);
        return RP_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        tok_pre op = {.type = PRE_BYTELEVEL, .add_prefix_space = jbool(p, "add_prefix_space", true)};
        if (jbool(p, "use_regex", true) &&
            (st = tok_compile(tok_gpt2_regex, strlen(tok_gpt2_regex), 0, &op.re)))
            return st;
        return tok_add_pre(t, op);
    }
    if (!strcmp(type, "Metaspace")) {
        tok_pre op = {.type = PRE_METASPACE, .split = jbool(p, "split", true)};
        if ((st = parse_metaspace_common(c, p, op.repl, &op.repl_len, &op.prepend)))
            return st;
        return tok_add_pre(t, op);
    }
    if (!strcmp(type, "Digits")) {
        const char *re = jbool(p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+";
        return add_split(t, re, strlen(re), false, SPLIT_ISOLATED, false);
    }
    if (!strcmp(type, "Whitespace")) {
        const char *re = "\\w+|[^\\w\\s]+";
        return add_split(t, re, strlen(re), false, SPLIT_REMOVED, true);
    }
    if (!strcmp(type, "WhitespaceSplit"))
        return add_split(t, "\\s+", 3, false, SPLIT_REMOVED, false);
    if (!strcmp(type, "Punctuation")) {
        int behavior;
        if ((st = parse_behavior(c, p, SPLIT_ISOLATED, &behavior)))
            return st;
        return add_split(t, punct_regex, strlen(punct_regex), false, behavior, false);
    }
    if (!strcmp(type, "BertPreTokenizer")) {
        if ((st = add_split(t, "\\s+", 3, false, SPLIT_REMOVED, false)))
            return st;
        return add_split(t, punct_regex, strlen(punct_regex), false, SPLIT_ISOLATED, false);
    }
    if (!strcmp(type, "CharDelimiterSplit")) {
        const char *d = jstr(p, "delimiter");
        if (!d || !*d)
            return HF_ERR(c, RP_ERR_INVALID, "pre_tokenizer CharDelimiterSplit: missing \"delimiter\"");
        return add_split(t, d, strlen(d), true, SPLIT_REMOVED, false);
    }
    return HF_ERR(c, RP_ERR_UNSUPPORTED, "pre_tokenizer type \"%s\" is not supported", type);
}

/* ---- decoders -------------------------------------------------------------- */

static rp_status parse_decoder(hf_ctx *c, const json_t *d, int depth)
{
    rp_tokenizer *t = c->t;
    if (!json_is_object(d) || depth > 16)
        return HF_ERR(c, RP_ERR_INVALID, "decoder: expected an object");
    const char *type = jstr(d, "type");
    if (!type)
        return HF_ERR(c, RP_ERR_INVALID, "decoder: missing \"type\"");
    rp_status st;
    tok_dec op = {0};
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(d, "decoders");
        if (!json_is_array(list))
            return HF_ERR(c, RP_ERR_INVALID, "decoder Sequence: \"decoders\" is not an array");
        for (size_t i = 0; i < json_array_size(list); i++)
            if ((st = parse_decoder(c, json_array_get(list, i), depth + 1)))
                return st;
        return RP_OK;
    } else if (!strcmp(type, "ByteLevel")) {
        op.type = DEC_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        op.type = DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        op.type = DEC_FUSE;
    } else if (!strcmp(type, "Strip")) {
        const char *content = jstr(d, "content");
        const json_t *start = json_object_get(d, "start"), *stop = json_object_get(d, "stop");
        uint32_t cp;
        if (!content || tok_utf8_decode(content, strlen(content), &cp) != (int)strlen(content) ||
            !json_is_integer(start) || !json_is_integer(stop) || json_integer_value(start) < 0 ||
            json_integer_value(stop) < 0 || json_integer_value(start) > 1000 || json_integer_value(stop) > 1000)
            return HF_ERR(c, RP_ERR_INVALID, "decoder Strip: needs one-character \"content\", \"start\", \"stop\"");
        op.type = DEC_STRIP;
        op.strip_cp = cp;
        op.start = (int)json_integer_value(start);
        op.stop = (int)json_integer_value(stop);
    } else if (!strcmp(type, "Replace")) {
        const char *pat, *content = jstr(d, "content");
        bool regex;
        if ((st = get_pattern(c, d, "decoder Replace", &pat, &regex)))
            return st;
        if (regex)
            return HF_ERR(c, RP_ERR_UNSUPPORTED, "decoder Replace with a Regex pattern is not supported");
        if (!content)
            return HF_ERR(c, RP_ERR_INVALID, "decoder Replace: missing \"content\"");
        op.type = DEC_REPLACE;
        op.a = rp_strdup(pat);
        op.b = rp_strdup(content);
        op.a_len = strlen(pat);
        op.b_len = strlen(content);
        if (!op.a || !op.b) {
            tok_dec_free(&op);
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        }
    } else if (!strcmp(type, "Metaspace")) {
        char repl[8] = {0};
        int rl, prepend;
        if ((st = parse_metaspace_common(c, d, repl, &rl, &prepend)))
            return st;
        op.type = DEC_METASPACE;
        op.a = rp_strndup(repl, (size_t)rl);
        op.a_len = (size_t)rl;
        op.prepend = prepend != PREPEND_NEVER;
        if (!op.a)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
    } else {
        return HF_ERR(c, RP_ERR_UNSUPPORTED, "decoder type \"%s\" is not supported", type);
    }
    return tok_add_dec(t, op);
}

/* ---- model ----------------------------------------------------------------- */

static rp_status parse_vocab(hf_ctx *c, const json_t *vocab)
{
    rp_tokenizer *t = c->t;
    const char *key;
    const json_t *val;
    int32_t max_id = -1;
    json_object_foreach((json_t *)vocab, key, val)
    {
        if (!json_is_integer(val))
            return HF_ERR(c, RP_ERR_INVALID, "model.vocab: id of \"%s\" is not an integer", key);
        json_int_t id = json_integer_value(val);
        if (id < 0 || id >= RP_TOK_MAX_ID)
            return HF_ERR(c, RP_ERR_INVALID, "model.vocab: id %lld of \"%s\" out of range", (long long)id, key);
        if (id > max_id)
            max_id = (int32_t)id;
    }
    if (tok_grow(t, max_id + 1))
        return RP_ERR_NOMEM;
    json_object_foreach((json_t *)vocab, key, val)
    {
        int32_t id = (int32_t)json_integer_value(val);
        if (t->vocab[id].text)
            return HF_ERR(c, RP_ERR_INVALID, "model.vocab: id %d is used twice", (int)id);
        if (tok_set_text(t, id, key, strlen(key)))
            return RP_ERR_NOMEM;
        t->vocab[id].attr = TOK_ATTR_NORMAL;
    }
    if (tok_strmap_init(&t->vocab_map, json_object_size(vocab)))
        return RP_ERR_NOMEM;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->vocab[id].text && tok_strmap_put(&t->vocab_map, t->vocab[id].text, t->vocab[id].len, id))
            return RP_ERR_NOMEM;
    return RP_OK;
}

static rp_status parse_merges(hf_ctx *c, const json_t *merges)
{
    rp_tokenizer *t = c->t;
    size_t n = json_array_size(merges);
    if (tok_pairmap_init(&t->merges, n))
        return RP_ERR_NOMEM;
    tok_buf cat = {0};
    rp_status st = RP_OK;
    // HF collects merges into a map where a later duplicate wins: walk backwards, keep the first seen.
    for (size_t k = n; k-- > 0;) {
        const json_t *m = json_array_get(merges, k);
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            const char *sp = s[0] ? strchr(s + 1, ' ') : NULL;
            if (!sp) {
                st = HF_ERR(c, RP_ERR_INVALID, "model.merges[%zu]: \"%s\" is not \"a b\"", k, s);
                break;
            }
            a = s, al = (size_t)(sp - s), b = sp + 1, bl = strlen(sp + 1);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            al = strlen(a), bl = strlen(b);
        } else {
            st = HF_ERR(c, RP_ERR_INVALID, "model.merges[%zu]: expected \"a b\" or [a, b]", k);
            break;
        }
        int32_t ia = tok_strmap_get(&t->vocab_map, a, al), ib = tok_strmap_get(&t->vocab_map, b, bl);
        cat.len = 0;
        if (tok_buf_put(&cat, a, al) || tok_buf_put(&cat, b, bl)) {
            st = RP_ERR_NOMEM;
            break;
        }
        int32_t in = tok_strmap_get(&t->vocab_map, cat.p, cat.len);
        if (ia < 0 || ib < 0 || in < 0) {
            st = HF_ERR(c, RP_ERR_INVALID, "model.merges[%zu]: \"%.*s\" + \"%.*s\" names a token not in the vocabulary",
                        k, (int)al, a, (int)bl, b);
            break;
        }
        if ((st = tok_pairmap_put(&t->merges, ia, ib, (int32_t)k, in)))
            break;
    }
    rp_free(cat.p);
    return st;
}

static rp_status parse_model(hf_ctx *c, const json_t *model)
{
    rp_tokenizer *t = c->t;
    if (!json_is_object(model))
        return HF_ERR(c, RP_ERR_INVALID, "missing \"model\" object");
    const char *type = jstr(model, "type");
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (type && strcmp(type, "BPE") != 0)
        return HF_ERR(c, RP_ERR_UNSUPPORTED, "model type \"%s\" is not supported (only BPE)", type);
    if (!json_is_object(vocab))
        return HF_ERR(c, RP_ERR_INVALID, "model.vocab: expected an object");
    if (!json_is_array(merges))
        return HF_ERR(c, RP_ERR_INVALID, "model.merges: expected an array");
    const char *csp = jstr(model, "continuing_subword_prefix"), *eow = jstr(model, "end_of_word_suffix");
    if ((csp && *csp) || (eow && *eow))
        return HF_ERR(c, RP_ERR_UNSUPPORTED, "BPE continuing_subword_prefix/end_of_word_suffix are not supported");
    const json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0.0 && json_number_value(dropout) < 1.0)
        return HF_ERR(c, RP_ERR_UNSUPPORTED, "BPE dropout is not supported");
    t->model = TOK_MODEL_BPE;
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->fuse_unk = jbool(model, "fuse_unk", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);
    rp_status st;
    if ((st = parse_vocab(c, vocab)) || (st = parse_merges(c, merges)))
        return st;
    const char *unk = jstr(model, "unk_token");
    if (unk)
        t->unk_id = tok_strmap_get(&t->vocab_map, unk, strlen(unk));
    return RP_OK;
}

static rp_status parse_added(hf_ctx *c, const json_t *list)
{
    rp_tokenizer *t = c->t;
    if (!list || json_is_null(list))
        return RP_OK;
    if (!json_is_array(list))
        return HF_ERR(c, RP_ERR_INVALID, "added_tokens: expected an array");
    size_t n = json_array_size(list);
    t->added = rp_calloc(n + 1, sizeof(*t->added));
    if (!t->added)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *a = json_array_get(list, i);
        const json_t *idv = json_object_get(a, "id");
        const char *content = jstr(a, "content");
        if (!json_is_object(a) || !json_is_integer(idv) || !content)
            return HF_ERR(c, RP_ERR_INVALID, "added_tokens[%zu]: needs integer \"id\" and string \"content\"", i);
        json_int_t id = json_integer_value(idv);
        if (id < 0 || id >= RP_TOK_MAX_ID)
            return HF_ERR(c, RP_ERR_INVALID, "added_tokens[%zu]: id %lld out of range", i, (long long)id);
        if (id >= t->n_vocab && tok_grow(t, (int32_t)id + 1))
            return RP_ERR_NOMEM;
        tok_entry *e = &t->vocab[id];
        if (!e->text && tok_set_text(t, (int32_t)id, content, strlen(content)))
            return RP_ERR_NOMEM;
        bool special = jbool(a, "special", false);
        tok_added *ad = &t->added[t->n_added];
        ad->id = (int32_t)id;
        ad->len = strlen(content);
        ad->content = rp_strdup(content);
        if (!ad->content)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        t->n_added++;
        ad->special = special;
        ad->lstrip = jbool(a, "lstrip", false);
        ad->rstrip = jbool(a, "rstrip", false);
        ad->single_word = jbool(a, "single_word", false);
        ad->normalized = jbool(a, "normalized", !special);
        t->vocab[id].special = special;
        t->vocab[id].attr = special ? TOK_ATTR_CONTROL : TOK_ATTR_USER;
    }
    return RP_OK;
}

/* ---- post-processor ------------------------------------------------------- */

static rp_status append_ids(int32_t **v, int *n, const int32_t *add, int n_add, bool front)
{
    int32_t *p = rp_realloc(*v, ((size_t)*n + (size_t)n_add + 1) * sizeof(int32_t));
    if (!p)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    if (n_add > 0 && front) {
        memmove(p + n_add, p, (size_t)*n * sizeof(int32_t));
        memcpy(p, add, (size_t)n_add * sizeof(int32_t));
    } else if (n_add > 0) {
        memcpy(p + *n, add, (size_t)n_add * sizeof(int32_t));
    }
    *v = p;
    *n += n_add;
    return RP_OK;
}

static rp_status check_ids(hf_ctx *c, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= RP_TOK_MAX_ID)
            return HF_ERR(c, RP_ERR_INVALID, "post_processor: token id %d out of range", (int)ids[i]);
    return RP_OK;
}

// Ids of a TemplateProcessing special token entry: special_tokens[name].ids.
static rp_status template_ids(hf_ctx *c, const json_t *specials, const char *name, int32_t *ids, int *n)
{
    const json_t *e = json_object_get(specials, name);
    const json_t *list = json_object_get(e, "ids");
    if (!json_is_array(list) || json_array_size(list) > 16)
        return HF_ERR(c, RP_ERR_INVALID, "post_processor: special token \"%s\" has no \"ids\"", name);
    *n = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *v = json_array_get(list, i);
        if (!json_is_integer(v))
            return HF_ERR(c, RP_ERR_INVALID, "post_processor: ids of \"%s\" are not integers", name);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= RP_TOK_MAX_ID)
            return HF_ERR(c, RP_ERR_INVALID, "post_processor: id %lld of \"%s\" out of range", (long long)id, name);
        ids[(*n)++] = (int32_t)id;
    }
    return RP_OK;
}

static rp_status pair_id(hf_ctx *c, const json_t *p, const char *key, int32_t *id)
{
    const json_t *v = json_object_get(p, key);
    const json_t *iv = json_array_get(v, 1);
    if (!json_is_array(v) || !json_is_integer(iv) || json_integer_value(iv) < 0 ||
        json_integer_value(iv) >= RP_TOK_MAX_ID)
        return HF_ERR(c, RP_ERR_INVALID, "post_processor: \"%s\" must be [token, id]", key);
    *id = (int32_t)json_integer_value(iv);
    return RP_OK;
}

static rp_status parse_post(hf_ctx *c, const json_t *p, int depth)
{
    rp_tokenizer *t = c->t;
    if (!p || json_is_null(p))
        return RP_OK;
    if (!json_is_object(p) || depth > 16)
        return HF_ERR(c, RP_ERR_INVALID, "post_processor: expected an object");
    const char *type = jstr(p, "type");
    if (!type)
        return HF_ERR(c, RP_ERR_INVALID, "post_processor: missing \"type\"");
    rp_status st;
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(p, "processors");
        if (!json_is_array(list))
            return HF_ERR(c, RP_ERR_INVALID, "post_processor Sequence: \"processors\" is not an array");
        for (size_t i = 0; i < json_array_size(list); i++)
            if ((st = parse_post(c, json_array_get(list, i), depth + 1)))
                return st;
        return RP_OK;
    }
    if (!strcmp(type, "ByteLevel"))
        return RP_OK;
    if (!strcmp(type, "TemplateProcessing")) {
        const json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
        if (!json_is_array(single))
            return HF_ERR(c, RP_ERR_INVALID, "post_processor TemplateProcessing: \"single\" is not an array");
        int32_t *pre = NULL, *suf = NULL;
        int n_pre = 0, n_suf = 0;
        bool seen_seq = false;
        st = RP_OK;
        for (size_t i = 0; i < json_array_size(single) && !st; i++) {
            const json_t *item = json_array_get(single, i);
            const json_t *sp = json_object_get(item, "SpecialToken");
            if (json_object_get(item, "Sequence")) {
                seen_seq = true;
            } else if (json_is_object(sp) && jstr(sp, "id")) {
                int32_t ids[16];
                int n = 0;
                if ((st = template_ids(c, specials, jstr(sp, "id"), ids, &n)))
                    break;
                st = seen_seq ? append_ids(&suf, &n_suf, ids, n, false) : append_ids(&pre, &n_pre, ids, n, false);
            } else {
                st = HF_ERR(c, RP_ERR_INVALID, "post_processor TemplateProcessing: bad item %zu in \"single\"", i);
            }
        }
        if (!st && !(st = append_ids(&t->prefix, &t->n_prefix, pre, n_pre, true)))
            st = append_ids(&t->suffix, &t->n_suffix, suf, n_suf, false);
        rp_free(pre);
        rp_free(suf);
        return st;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        int32_t cls, sep;
        if ((st = pair_id(c, p, "cls", &cls)) || (st = pair_id(c, p, "sep", &sep)))
            return st;
        if ((st = append_ids(&t->prefix, &t->n_prefix, &cls, 1, true)))
            return st;
        return append_ids(&t->suffix, &t->n_suffix, &sep, 1, false);
    }
    return HF_ERR(c, RP_ERR_UNSUPPORTED, "post_processor type \"%s\" is not supported", type);
}

/* ---- tokenizer_config.json -------------------------------------------------- */

// "bos_token": "<s>" or {"content": "<s>", ...}
static const char *token_name(const json_t *cfg, const char *key)
{
    const json_t *v = json_object_get(cfg, key);
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_object(v))
        return jstr(v, "content");
    return NULL;
}

static rp_status set_special_text(rp_tokenizer *t, const char *name, int32_t *id, char **text)
{
    if (!name)
        return RP_OK;
    *id = rp_tok_find(t, name);
    rp_free(*text);
    *text = rp_strdup(name);
    return *text ? RP_OK : RP_ERR(RP_ERR_NOMEM, "out of memory");
}

static rp_status apply_config(rp_tokenizer *t, const char *dir, bool from_spm)
{
    rp_status st = RP_OK;
    char *path = dir ? rp_path_join(dir, "tokenizer_config.json") : NULL;
    if (dir && !path)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    json_t *cfg = NULL;
    if (path && rp_file_exists(path)) {
        json_error_t err;
        cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &err);
        if (!cfg) {
            st = RP_ERR(RP_ERR_INVALID, "%s:%d:%d: %s", path, err.line, err.column, err.text);
            rp_free(path);
            return st;
        }
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            st = RP_ERR(RP_ERR_INVALID, "%s: expected a JSON object", path);
            rp_free(path);
            return st;
        }
    }
    // Defaults without a config: bos from the post-processor's first id.
    if (t->n_prefix > 0 && t->bos < 0)
        t->bos = t->prefix[0];
    if (cfg) {
        if ((st = set_special_text(t, token_name(cfg, "bos_token"), &t->bos, &t->bos_text)) ||
            (st = set_special_text(t, token_name(cfg, "eos_token"), &t->eos, &t->eos_text)))
            goto done;
        const char *pad = token_name(cfg, "pad_token");
        if (pad)
            t->pad = rp_tok_find(t, pad);
        t->clean_up_spaces = jbool(cfg, "clean_up_tokenization_spaces", false);
        const json_t *tmpl = json_object_get(cfg, "chat_template");
        const char *ts = NULL;
        if (json_is_string(tmpl)) {
            ts = json_string_value(tmpl);
        } else if (json_is_array(tmpl)) {
            for (size_t i = 0; i < json_array_size(tmpl); i++) {
                const json_t *e = json_array_get(tmpl, i);
                const char *name = jstr(e, "name");
                if (!ts || (name && !strcmp(name, "default")))
                    ts = jstr(e, "template");
            }
        }
        if (ts && !(t->chat_template = rp_strdup(ts))) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto done;
        }
        // transformers' Llama/Gemma tokenizers rebuild the post-processor from add_bos_token/add_eos_token.
        const char *cls = jstr(cfg, "tokenizer_class");
        bool llama_like = from_spm || (cls && (strstr(cls, "LlamaTokenizer") || strstr(cls, "GemmaTokenizer")));
        if (llama_like) {
            bool add_bos = jbool(cfg, "add_bos_token", true), add_eos = jbool(cfg, "add_eos_token", false);
            t->n_prefix = t->n_suffix = 0;
            if (add_bos && t->bos >= 0 && (st = append_ids(&t->prefix, &t->n_prefix, &t->bos, 1, false)))
                goto done;
            if (add_eos && t->eos >= 0 && (st = append_ids(&t->suffix, &t->n_suffix, &t->eos, 1, false)))
                goto done;
        }
    } else if (from_spm && t->bos >= 0) {
        t->n_prefix = 0;
        if ((st = append_ids(&t->prefix, &t->n_prefix, &t->bos, 1, false)))
            goto done;
    }
    if (t->bos >= 0 && !t->bos_text && t->vocab[t->bos].text && !(t->bos_text = rp_strdup(t->vocab[t->bos].text)))
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
done:
    json_decref(cfg);
    rp_free(path);
    return st;
}

// generation_config.json "eos_token_id": an id or a list of ids, all end generation.
static void apply_generation_config(rp_tokenizer *t, const char *dir)
{
    char *path = dir ? rp_path_join(dir, "generation_config.json") : NULL;
    if (!path || !rp_file_exists(path)) {
        rp_free(path);
        return;
    }
    json_error_t err;
    json_t *g = json_load_file(path, JSON_DECODE_INT_AS_REAL, &err);
    rp_free(path);
    if (!g)
        return; // optional file: a broken one is ignored
    const json_t *e = json_object_get(g, "eos_token_id");
    size_t n = json_is_array(e) ? json_array_size(e) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_is_array(e) ? json_array_get(e, i) : e;
        double id = json_is_number(v) ? json_number_value(v) : -1;
        if (id >= 0 && id < t->n_vocab && id == (double)(int32_t)id)
            t->vocab[(int32_t)id].eog = true;
    }
    json_decref(g);
}

static rp_status finish_decoder_flags(rp_tokenizer *t)
{
    for (int i = 0; i < t->n_decs; i++) {
        const tok_dec *d = &t->decs[i];
        if ((d->type == DEC_STRIP && d->start >= 1 && d->strip_cp == ' ') || (d->type == DEC_METASPACE && d->prepend))
            t->strip_leading = true;
    }
    return RP_OK;
}

/* ---- entry points ---------------------------------------------------------- */

// True when the model vocabulary holds nothing but the added tokens (transformers
// then builds the tokenizer from tokenizer.model).
static bool vocab_is_stub(const json_t *root)
{
    const json_t *model = json_object_get(root, "model");
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    const json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab))
        return false;
    size_t n_added = json_is_array(added) ? json_array_size(added) : 0;
    return json_object_size(vocab) <= n_added && (!json_is_array(merges) || json_array_size(merges) == 0);
}

static rp_status load_json(const char *file, const char *dir, rp_tokenizer **out)
{
    json_error_t err;
    json_t *root = json_load_file(file, 0, &err);
    if (!root) {
        if (!rp_file_exists(file))
            return RP_ERR(RP_ERR_IO, "%s: cannot open tokenizer file", file);
        return RP_ERR(RP_ERR_INVALID, "%s:%d:%d: %s", file, err.line, err.column, err.text);
    }
    rp_status st;
    rp_tokenizer *t = NULL;
    if (!json_is_object(root)) {
        st = RP_ERR(RP_ERR_INVALID, "%s: expected a JSON object", file);
        goto fail;
    }
    if (dir && vocab_is_stub(root)) {
        char *spm = rp_path_join(dir, "tokenizer.model");
        if (!spm) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        bool have = rp_file_exists(spm);
        if (have) {
            st = tok_load_spm_model(spm, &t);
            rp_free(spm);
            if (st)
                goto fail;
            if ((st = apply_config(t, dir, true)) || (st = tok_finish(t)))
                goto fail;
            apply_generation_config(t, dir);
            json_decref(root);
            *out = t;
            return RP_OK;
        }
        rp_free(spm);
    }
    if ((st = tok_create(0, &t)))
        goto fail;
    hf_ctx c = {t, file};
    if ((st = parse_model(&c, json_object_get(root, "model"))) ||
        (st = parse_added(&c, json_object_get(root, "added_tokens"))) ||
        (st = parse_normalizer(&c, json_object_get(root, "normalizer"), 0)) ||
        (st = parse_pretok(&c, json_object_get(root, "pre_tokenizer"), 0)) ||
        (st = parse_post(&c, json_object_get(root, "post_processor"), 0)))
        goto fail;
    const json_t *dec = json_object_get(root, "decoder");
    if (!dec || json_is_null(dec))
        t->has_decoder = false;
    else if ((st = parse_decoder(&c, dec, 0)))
        goto fail;
    if ((st = check_ids(&c, t->prefix, t->n_prefix)) || (st = check_ids(&c, t->suffix, t->n_suffix)))
        goto fail;
    for (int i = 0; i < t->n_prefix; i++)
        if (t->prefix[i] >= t->n_vocab && (st = tok_grow(t, t->prefix[i] + 1)))
            goto fail;
    for (int i = 0; i < t->n_suffix; i++)
        if (t->suffix[i] >= t->n_vocab && (st = tok_grow(t, t->suffix[i] + 1)))
            goto fail;
    finish_decoder_flags(t);
    if ((st = apply_config(t, dir, false)) || (st = tok_finish(t)))
        goto fail;
    apply_generation_config(t, dir);
    json_decref(root);
    *out = t;
    return RP_OK;
fail:
    rp_tok_destroy(t);
    json_decref(root);
    return st;
}

rp_status rp_tok_load_hf(const char *path, rp_tokenizer **out)
{
    *out = NULL;
    rp_status st;
    char *dir = NULL, *file = NULL;
    if (rp_dir_exists(path)) {
        dir = rp_strdup(path);
        file = rp_path_join(path, "tokenizer.json");
        if (!dir || !file) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto done;
        }
        if (!rp_file_exists(file)) {
            char *spm = rp_path_join(path, "tokenizer.model");
            if (spm && rp_file_exists(spm)) {
                rp_tokenizer *t = NULL;
                st = tok_load_spm_model(spm, &t);
                if (!st && !(st = apply_config(t, dir, true)) && !(st = tok_finish(t))) {
                    apply_generation_config(t, dir);
                    *out = t;
                } else {
                    rp_tok_destroy(t);
                }
                rp_free(spm);
                goto done;
            }
            rp_free(spm);
            st = RP_ERR(RP_ERR_IO, "%s: no tokenizer.json or tokenizer.model in this folder", path);
            goto done;
        }
    } else {
        file = rp_strdup(path);
        const char *slash = strrchr(path, '/');
        dir = slash ? rp_strndup(path, (size_t)(slash - path) + (slash == path)) : rp_strdup(".");
        if (!dir || !file) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto done;
        }
        if (!rp_file_exists(file)) {
            st = RP_ERR(RP_ERR_IO, "%s: no such file", path);
            goto done;
        }
    }
    st = load_json(file, dir, out);
done:
    rp_free(dir);
    rp_free(file);
    return st;
}

rp_status rp_tok_load_file(const char *path, rp_tokenizer **out)
{
    *out = NULL;
    size_t n = strlen(path);
    bool gguf = n >= 5 && strcmp(path + n - 5, ".gguf") == 0;
    if (!gguf && !rp_dir_exists(path)) {
        FILE *f = fopen(path, "rb");
        char magic[4];
        if (f) {
            gguf = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
            fclose(f);
        }
    }
    if (!gguf)
        return rp_tok_load_hf(path, out);
    rp_gguf *g = NULL;
    rp_status st = rp_gguf_open(path, &g);
    if (st)
        return st;
    st = rp_tok_load_gguf(g, out);
    if (st)
        rp_error_prefix(st, "%s", path);
    rp_gguf_close(g);
    return st;
}

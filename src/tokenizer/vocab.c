/*
 * vocab.c - the tokenizer object: vocabulary storage, hash maps, UTF-8 helpers,
 * lifetime and the small accessors of the public API.
 *
 * Maps are open addressing with linear probing (FNV-1a over the key bytes for
 * strings, a 64-bit mix for id pairs), sized to stay under half full, so a
 * lookup is one or two probes. Keys of the string map are borrowed from the
 * vocabulary entries, which never move after loading.
 */
#include "tokenizer_int.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- UTF-8 ---------------------------------------------------------------- */

int tok_utf8_len(uint8_t c)
{
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0)
        return 2;
    if ((c & 0xF0) == 0xE0)
        return 3;
    if ((c & 0xF8) == 0xF0)
        return 4;
    return 1;
}

int tok_utf8_decode(const char *s, size_t len, uint32_t *cp)
{
    const uint8_t *u = (const uint8_t *)s;
    if (len == 0)
        return 0;
    uint8_t c = u[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int n;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)n > len)
        return 0;
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (u[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return n;
}

int tok_utf8_encode(uint32_t cp, char *out)
{
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

// Length of the maximal subpart of an ill-formed sequence at s (>= 1), per the
// Unicode "U+FFFD substitution of maximal subparts" practice Rust follows.
size_t tok_utf8_bad_len(const uint8_t *s, size_t len)
{
    uint8_t c = s[0];
    uint8_t lo = 0x80, hi = 0xBF;
    int need;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c == 0xE0)
        need = 2, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC)
        need = 2;
    else if (c == 0xED)
        need = 2, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF)
        need = 2;
    else if (c == 0xF0)
        need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3)
        need = 3;
    else if (c == 0xF4)
        need = 3, hi = 0x8F;
    else
        return 1;
    size_t i = 1;
    for (int k = 0; k < need && i < len; k++, i++) {
        uint8_t b = s[i];
        if (k == 0 ? (b < lo || b > hi) : (b & 0xC0) != 0x80)
            return i;
    }
    return i;
}

size_t tok_utf8_valid_prefix(const uint8_t *s, size_t len, bool *incomplete)
{
    size_t i = 0;
    *incomplete = false;
    while (i < len) {
        uint32_t cp;
        int n = tok_utf8_decode((const char *)s + i, len - i, &cp);
        if (n > 0) {
            i += (size_t)n;
            continue;
        }
        // Invalid here: is it a valid but truncated start?
        size_t sub = tok_utf8_bad_len(s + i, len - i);
        if (i + sub == len && tok_utf8_len(s[i]) > (int)sub && s[i] >= 0xC2 && s[i] <= 0xF4)
            *incomplete = true;
        return i;
    }
    return i;
}

rp_status tok_utf8_sanitize(const char *s, size_t len, char **out, size_t *out_len)
{
    const uint8_t *u = (const uint8_t *)s;
    tok_buf b = {0};
    size_t i = 0;
    while (i < len) {
        size_t start = i;
        uint32_t cp;
        int n;
        while (i < len && (n = tok_utf8_decode(s + i, len - i, &cp)) > 0)
            i += (size_t)n;
        if (i > start && tok_buf_put(&b, s + start, i - start))
            goto fail;
        if (i < len) {
            i += tok_utf8_bad_len(u + i, len - i);
            if (tok_buf_put(&b, "\xEF\xBF\xBD", 3))
                goto fail;
        }
    }
    if (tok_buf_put(&b, "", 1))
        goto fail;
    *out = b.p;
    *out_len = b.len - 1;
    return RP_OK;
fail:
    rp_free(b.p);
    return RP_ERR(RP_ERR_NOMEM, "out of memory");
}

bool tok_is_whitespace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* ---- buffers -------------------------------------------------------------- */

rp_status tok_buf_reserve(tok_buf *b, size_t n)
{
    size_t need;
    if (!rp_add_size(b->len, n, &need))
        return RP_ERR(RP_ERR_NOMEM, "buffer size overflow");
    if (need <= b->cap)
        return RP_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = rp_realloc(b->p, cap);
    if (!p)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    b->p = p;
    b->cap = cap;
    return RP_OK;
}

rp_status tok_buf_put(tok_buf *b, const void *s, size_t n)
{
    if (tok_buf_reserve(b, n))
        return RP_ERR_NOMEM;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    return RP_OK;
}

/* ---- maps ----------------------------------------------------------------- */

static uint32_t hash_bytes(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static size_t map_cap_for(size_t n)
{
    size_t cap = 16;
    while (cap < n * 2 + 1)
        cap *= 2;
    return cap;
}

rp_status tok_strmap_init(tok_strmap *m, size_t n_expected)
{
    m->cap = map_cap_for(n_expected);
    m->n = 0;
    m->slots = rp_malloc(m->cap * sizeof(*m->slots));
    if (!m->slots)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < m->cap; i++)
        m->slots[i].v = -1;
    return RP_OK;
}

void tok_strmap_free(tok_strmap *m)
{
    rp_free(m->slots);
    memset(m, 0, sizeof(*m));
}

static rp_status strmap_grow(tok_strmap *m)
{
    tok_strmap nm;
    if (tok_strmap_init(&nm, m->cap))
        return RP_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        struct tok_strslot *s = &m->slots[i];
        if (s->v < 0)
            continue;
        size_t j = s->hash & (nm.cap - 1);
        while (nm.slots[j].v >= 0)
            j = (j + 1) & (nm.cap - 1);
        nm.slots[j] = *s;
        nm.n++;
    }
    rp_free(m->slots);
    *m = nm;
    return RP_OK;
}

rp_status tok_strmap_put(tok_strmap *m, const char *k, size_t len, int32_t v)
{
    if ((m->n + 1) * 2 > m->cap && strmap_grow(m))
        return RP_ERR_NOMEM;
    uint32_t h = hash_bytes(k, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].v >= 0) {
        struct tok_strslot *s = &m->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->k, k, len) == 0)
            return RP_OK;
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (struct tok_strslot){k, (uint32_t)len, v, h};
    m->n++;
    return RP_OK;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *k, size_t len)
{
    if (!m->slots)
        return -1;
    uint32_t h = hash_bytes(k, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].v >= 0) {
        const struct tok_strslot *s = &m->slots[j];
        if (s->hash == h && s->len == len && memcmp(s->k, k, len) == 0)
            return s->v;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

rp_status tok_pairmap_init(tok_pairmap *m, size_t n_expected)
{
    m->cap = map_cap_for(n_expected);
    m->n = 0;
    m->slots = rp_malloc(m->cap * sizeof(*m->slots));
    if (!m->slots)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < m->cap; i++)
        m->slots[i].key = UINT64_MAX;
    return RP_OK;
}

void tok_pairmap_free(tok_pairmap *m)
{
    rp_free(m->slots);
    memset(m, 0, sizeof(*m));
}

rp_status tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    if ((m->n + 1) * 2 > m->cap) {
        tok_pairmap nm;
        if (tok_pairmap_init(&nm, m->cap))
            return RP_ERR_NOMEM;
        for (size_t i = 0; i < m->cap; i++) {
            if (m->slots[i].key == UINT64_MAX)
                continue;
            size_t j = mix64(m->slots[i].key) & (nm.cap - 1);
            while (nm.slots[j].key != UINT64_MAX)
                j = (j + 1) & (nm.cap - 1);
            nm.slots[j] = m->slots[i];
            nm.n++;
        }
        rp_free(m->slots);
        *m = nm;
    }
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t j = mix64(key) & (m->cap - 1);
    while (m->slots[j].key != UINT64_MAX) {
        if (m->slots[j].key == key)
            return RP_OK;
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (struct tok_pairslot){key, rank, id};
    m->n++;
    return RP_OK;
}

bool tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id)
{
    if (!m->slots)
        return false;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t j = mix64(key) & (m->cap - 1);
    while (m->slots[j].key != UINT64_MAX) {
        if (m->slots[j].key == key) {
            *rank = m->slots[j].rank;
            *id = m->slots[j].id;
            return true;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return false;
}

/* ---- lifetime ------------------------------------------------------------- */

rp_status tok_create(int32_t n_vocab, rp_tokenizer **out)
{
    *out = NULL;
    if (n_vocab < 0 || n_vocab > RP_TOK_MAX_ID)
        return RP_ERR(RP_ERR_INVALID, "vocabulary size %d out of range", (int)n_vocab);
    rp_tokenizer *t = rp_calloc(1, sizeof(*t));
    if (!t)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    t->unk_id = t->bos = t->eos = t->pad = -1;
    for (int i = 0; i < 256; i++)
        t->byte_ids[i] = -1;
    t->has_decoder = true;
    if (tok_grow(t, n_vocab)) {
        rp_tok_destroy(t);
        return RP_ERR_NOMEM;
    }
    *out = t;
    return RP_OK;
}

rp_status tok_grow(rp_tokenizer *t, int32_t n)
{
    if (n <= t->n_vocab && t->vocab)
        return RP_OK;
    if (n > RP_TOK_MAX_ID)
        return RP_ERR(RP_ERR_INVALID, "token id %d out of range", (int)n - 1);
    size_t cap = (size_t)(n > 0 ? n : 1);
    tok_entry *v = rp_realloc(t->vocab, cap * sizeof(*v));
    if (!v)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    for (int32_t i = t->n_vocab; i < (int32_t)cap; i++)
        memset(&v[i], 0, sizeof(v[i]));
    t->vocab = v;
    if (n > t->n_vocab)
        t->n_vocab = n;
    return RP_OK;
}

rp_status tok_set_text(rp_tokenizer *t, int32_t id, const char *s, size_t len)
{
    if (id < 0 || id >= RP_TOK_MAX_ID)
        return RP_ERR(RP_ERR_INVALID, "token id %lld out of range", (long long)id);
    if (id >= t->n_vocab && tok_grow(t, id + 1))
        return RP_ERR_NOMEM;
    char *p = rp_strndup(s, len);
    if (!p)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    rp_free(t->vocab[id].text);
    t->vocab[id].text = p;
    t->vocab[id].len = (uint32_t)len;
    return RP_OK;
}

void rp_tok_destroy(rp_tokenizer *t)
{
    if (!t)
        return;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        rp_free(t->vocab[i].text);
        rp_free(t->vocab[i].piece);
    }
    rp_free(t->vocab);
    tok_strmap_free(&t->vocab_map);
    tok_pairmap_free(&t->merges);
    for (int i = 0; i < t->n_norms; i++)
        tok_norm_free(&t->norms[i]);
    rp_free(t->norms);
    for (int i = 0; i < t->n_pres; i++)
        tok_pre_free(&t->pres[i]);
    rp_free(t->pres);
    for (int i = 0; i < t->n_decs; i++)
        tok_dec_free(&t->decs[i]);
    rp_free(t->decs);
    for (int i = 0; i < t->n_added; i++)
        rp_free(t->added[i].content);
    rp_free(t->added);
    rp_free(t->match_raw.items);
    rp_free(t->match_norm.items);
    rp_free(t->prefix);
    rp_free(t->suffix);
    rp_free(t->bos_text);
    rp_free(t->eos_text);
    rp_free(t->chat_template);
    rp_free(t);
}

rp_status tok_compile(const char *pattern, size_t len, uint32_t extra, pcre2_code **out)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP | extra, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        return RP_ERR(RP_ERR_INVALID, "bad regex at offset %zu: %s", (size_t)off, (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // falls back to the interpreter if JIT is unavailable
    *out = re;
    return RP_OK;
}

void tok_mark_eog_by_text(rp_tokenizer *t)
{
    static const char *const names[] = {"<|eot_id|>",   "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                        "<|eom_id|>",   "<EOT>",      "<｜end▁of▁sentence｜>", "<|return|>",
                                        "<|call|>"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        int32_t id = rp_tok_find(t, names[i]);
        if (id >= 0)
            t->vocab[id].eog = true;
    }
    if (t->eos >= 0 && t->eos < t->n_vocab)
        t->vocab[t->eos].eog = true;
}

rp_status tok_finish(rp_tokenizer *t)
{
    rp_status st;
    // <0xNN> byte tokens (byte fallback, SentencePiece).
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        t->byte_ids[b] = tok_strmap_get(&t->vocab_map, name, 6);
    }
    tok_buf piece = {0};
    for (int32_t id = 0; id < t->n_vocab; id++) {
        tok_entry *e = &t->vocab[id];
        if (!e->text)
            continue;
        piece.len = 0;
        if ((st = tok_make_piece(t, id, &piece)))
            goto fail;
        e->piece = rp_malloc(piece.len + 1);
        if (!e->piece) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        if (piece.len)
            memcpy(e->piece, piece.p, piece.len);
        e->piece[piece.len] = 0;
        e->piece_len = (uint32_t)piece.len;
    }
    if ((st = tok_build_matchers(t)))
        goto fail;
    // HF keeps a normalized added token in its normalized form: it decodes that way too.
    for (int i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        if (!a->normalized || a->special || t->n_norms == 0 || a->id < 0 || a->id >= t->n_vocab)
            continue;
        tok_entry *e = &t->vocab[a->id];
        piece.len = 0;
        if ((st = tok_make_piece_text(t, false, a->content, a->len, &piece)))
            goto fail;
        char *np = rp_malloc(piece.len + 1);
        if (!np) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        if (piece.len)
            memcpy(np, piece.p, piece.len);
        np[piece.len] = 0;
        rp_free(e->piece);
        e->piece = np;
        e->piece_len = (uint32_t)piece.len;
        e->dec_text = a->content;
        e->dec_len = (uint32_t)a->len;
    }
    rp_free(piece.p);
    tok_mark_eog_by_text(t);
    return RP_OK;
fail:
    rp_free(piece.p);
    return st;
}

/* ---- public accessors ------------------------------------------------------ */

int32_t rp_tok_n_vocab(const rp_tokenizer *t)
{
    return t->n_vocab;
}

int32_t rp_tok_bos(const rp_tokenizer *t)
{
    return t->bos;
}

int32_t rp_tok_eos(const rp_tokenizer *t)
{
    return t->eos;
}

int32_t rp_tok_pad(const rp_tokenizer *t)
{
    return t->pad;
}

bool rp_tok_is_eog(const rp_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->vocab[id].eog;
}

bool rp_tok_is_special(const rp_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->vocab[id].special;
}

int32_t rp_tok_find(const rp_tokenizer *t, const char *token_text)
{
    size_t len = strlen(token_text);
    for (int i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        const tok_entry *e = &t->vocab[a->id];
        if (e->text && e->len == len && memcmp(e->text, token_text, len) == 0)
            return a->id;
    }
    return tok_strmap_get(&t->vocab_map, token_text, len);
}

const char *rp_tok_text(const rp_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab || !t->vocab[id].text) {
        *len = 0;
        return NULL;
    }
    *len = t->vocab[id].len;
    return t->vocab[id].text;
}

const char *rp_tok_piece(const rp_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab || !t->vocab[id].piece) {
        *len = 0;
        return NULL;
    }
    *len = t->vocab[id].piece_len;
    return t->vocab[id].piece;
}

const char *rp_tok_chat_template(const rp_tokenizer *t)
{
    return t->chat_template;
}

const char *rp_tok_bos_text(const rp_tokenizer *t)
{
    return t->bos_text ? t->bos_text : "";
}

const char *rp_tok_eos_text(const rp_tokenizer *t)
{
    return t->eos_text ? t->eos_text : "";
}

rp_status tok_add_pre(rp_tokenizer *t, tok_pre p)
{
    tok_pre *v = rp_realloc(t->pres, ((size_t)t->n_pres + 1) * sizeof(*v));
    if (!v) {
        tok_pre_free(&p);
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    t->pres = v;
    t->pres[t->n_pres++] = p;
    return RP_OK;
}

rp_status tok_add_dec(rp_tokenizer *t, tok_dec d)
{
    tok_dec *v = rp_realloc(t->decs, ((size_t)t->n_decs + 1) * sizeof(*v));
    if (!v) {
        tok_dec_free(&d);
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    t->decs = v;
    t->decs[t->n_decs++] = d;
    return RP_OK;
}

/*
 * encode.c - text to ids: the encoding pipeline and added-token matching.
 *
 * As HF's Tokenizer::encode: the text is split on added tokens that match the
 * raw text (normalized=false), each remaining segment is normalized and split
 * on the added tokens that match normalized text, and each remaining
 * sub-segment is pre-tokenized and run through the BPE model. Added tokens are
 * found leftmost-longest (HF uses Aho-Corasick with that match kind) with the
 * lstrip/rstrip/single_word rules of AddedVocabulary::find_matches.
 * add_special wraps the result in the post-processor's prefix/suffix ids.
 */
#include "tokenizer_int.h"

#include <stdlib.h>
#include <utf8proc.h>

/* ---- matchers ------------------------------------------------------------- */

static int cmp_added(const void *a, const void *b)
{
    const tok_added *x = *(tok_added *const *)a, *y = *(tok_added *const *)b;
    uint8_t cx = (uint8_t)x->content[0], cy = (uint8_t)y->content[0];
    if (cx != cy)
        return cx < cy ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static rp_status build_one(rp_tokenizer *t, tok_matcher *m, bool normalized)
{
    m->n = 0;
    m->items = rp_malloc(((size_t)t->n_added + 1) * sizeof(*m->items));
    if (!m->items)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        bool is_norm = a->normalized && t->n_norms > 0;
        if (a->len > 0 && is_norm == normalized)
            m->items[m->n++] = a;
    }
    qsort(m->items, (size_t)m->n, sizeof(*m->items), cmp_added);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < m->n && (uint8_t)m->items[k]->content[0] < b)
            k++;
        m->first[b] = k;
    }
    return RP_OK;
}

rp_status tok_build_matchers(rp_tokenizer *t)
{
    rp_status st;
    // Normalized added tokens are matched in their normalized form (HF normalizes
    // the content with the tokenizer's normalizer).
    tok_buf nb = {0};
    for (int i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        if (!a->normalized || t->n_norms == 0)
            continue;
        if ((st = tok_normalize(t, a->content, a->len, &nb))) {
            rp_free(nb.p);
            return st;
        }
        char *c = rp_strndup(nb.p ? nb.p : "", nb.len);
        if (!c) {
            rp_free(nb.p);
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        }
        rp_free(a->content);
        a->content = c;
        a->len = nb.len;
    }
    rp_free(nb.p);
    if ((st = build_one(t, &t->match_raw, false)) || (st = build_one(t, &t->match_norm, true)))
        return st;
    return RP_OK;
}

/* ---- finding added tokens ------------------------------------------------ */

typedef struct frag {
    size_t a, b;
    int32_t id; // -1: text
} frag;

typedef struct frag_list {
    frag *v;
    size_t n, cap;
} frag_list;

static rp_status frag_push(frag_list *l, size_t a, size_t b, int32_t id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        frag *v = rp_realloc(l->v, cap * sizeof(*v));
        if (!v)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (frag){a, b, id};
    return RP_OK;
}

static bool is_word_char(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return cp == 0x200C || cp == 0x200D;
    }
}

// Start of the UTF-8 character that ends at s[end-1].
static size_t char_start_before(const char *s, size_t end)
{
    size_t k = end - 1;
    while (k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80)
        k--;
    return k;
}

static bool prev_char(const char *s, size_t end, uint32_t *cp, size_t *start)
{
    if (end == 0)
        return false;
    size_t k = char_start_before(s, end);
    if (tok_utf8_decode(s + k, end - k, cp) <= 0)
        return false;
    *start = k;
    return true;
}

// HF AddedVocabulary::find_matches over s[0, len).
static rp_status find_added(const tok_matcher *m, const char *s, size_t len, frag_list *out)
{
    out->n = 0;
    size_t start_offset = 0, i = 0;
    while (m->n > 0 && i < len) {
        uint8_t c = (uint8_t)s[i];
        const tok_added *hit = NULL;
        for (int k = m->first[c]; k < m->first[c + 1]; k++) {
            const tok_added *a = m->items[k];
            if (a->len <= len - i && memcmp(s + i, a->content, a->len) == 0) {
                hit = a;
                break;
            }
        }
        if (!hit) {
            i++;
            continue;
        }
        size_t start = i, stop = i + hit->len;
        i = stop; // the match is consumed even when a rule below rejects it
        uint32_t cp;
        size_t k;
        if (hit->single_word) {
            bool start_space = start == 0 || !(prev_char(s, start, &cp, &k) && is_word_char(cp));
            bool stop_space = stop == len || !(tok_utf8_decode(s + stop, len - stop, &cp) > 0 && is_word_char(cp));
            if (!start_space || !stop_space)
                continue;
        }
        if (hit->lstrip) {
            size_t ns = start;
            while (ns > start_offset && prev_char(s, ns, &cp, &k) && tok_is_whitespace(cp) && k >= start_offset)
                ns = k;
            start = ns;
        }
        if (hit->rstrip) {
            int n;
            while (stop < len && (n = tok_utf8_decode(s + stop, len - stop, &cp)) > 0 && tok_is_whitespace(cp))
                stop += (size_t)n;
            i = stop;
        }
        if (start_offset < start && frag_push(out, start_offset, start, -1))
            return RP_ERR_NOMEM;
        if (frag_push(out, start, stop, hit->id))
            return RP_ERR_NOMEM;
        start_offset = stop;
    }
    if (start_offset < len && frag_push(out, start_offset, len, -1))
        return RP_ERR_NOMEM;
    return RP_OK;
}

/* ---- the pipeline --------------------------------------------------------- */

static rp_status push_all(tok_ids *ids, const int32_t *v, int n)
{
    for (int i = 0; i < n; i++)
        if (tok_ids_push(ids, v[i]))
            return RP_ERR_NOMEM;
    return RP_OK;
}

rp_status rp_tok_encode(const rp_tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
                        size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (!text && len)
        return RP_ERR(RP_ERR_INVALID, "NULL text");
    if (len > RP_TOK_MAX_TEXT)
        return RP_ERR(RP_ERR_INVALID, "text too long to tokenize (%zu bytes)", len);
    rp_status st;
    char *s = NULL;
    size_t slen = 0;
    tok_ids out = {0};
    tok_buf norm = {0};
    tok_pieces pieces = {0}, tmp = {0};
    frag_list f1 = {0}, f2 = {0};
    tok_bpe_work *w = NULL;
    if ((st = tok_utf8_sanitize(text ? text : "", len, &s, &slen)) || (st = tok_bpe_work_create(&w)))
        goto done;
    if (add_special && (st = push_all(&out, t->prefix, t->n_prefix)))
        goto done;
    if ((st = find_added(&t->match_raw, s, slen, &f1)))
        goto done;
    bool after_special = false;
    for (size_t i = 0; i < f1.n; i++) {
        const frag *a = &f1.v[i];
        if (a->id >= 0) {
            if ((st = tok_ids_push(&out, a->id)))
                goto done;
            after_special = true;
            continue;
        }
        if ((st = tok_normalize(t, s + a->a, a->b - a->a, &norm)))
            goto done;
        const char *ns = norm.p ? norm.p : "";
        if ((st = find_added(&t->match_norm, ns, norm.len, &f2)))
            goto done;
        for (size_t k = 0; k < f2.n; k++) {
            const frag *b = &f2.v[k];
            if (b->id >= 0) {
                if ((st = tok_ids_push(&out, b->id)))
                    goto done;
                after_special = true;
                continue;
            }
            bool first = a->a == 0 && b->a == 0;
            if ((st = tok_pretokenize(t, ns + b->a, b->b - b->a, first, after_special, &pieces, &tmp)))
                goto done;
            for (size_t p = 0; p < pieces.n; p++)
                if ((st = tok_model_encode(t, w, pieces.buf.p + pieces.sp[p].off, pieces.sp[p].len, &out)))
                    goto done;
            after_special = false;
        }
    }
    if (add_special && (st = push_all(&out, t->suffix, t->n_suffix)))
        goto done;
    *ids = out.v;
    *n_ids = out.n;
    out.v = NULL;
done:
    rp_free(out.v);
    rp_free(s);
    rp_free(norm.p);
    tok_pieces_free(&pieces);
    tok_pieces_free(&tmp);
    rp_free(f1.v);
    rp_free(f2.v);
    tok_bpe_work_destroy(w);
    return st;
}

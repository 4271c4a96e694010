/*
 * pretok.c - pre-tokenizers: cut a normalized segment into pieces for BPE.
 *
 * A segment becomes a list of pieces (spans over one buffer); each step reads
 * one list and writes the next:
 *   - Split: PCRE2 regex (or literal) matches, then the HF delimiter behavior
 *     (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous) and
 *     `invert`. Digits, Whitespace, WhitespaceSplit, Punctuation,
 *     CharDelimiterSplit and BertPreTokenizer are loaded as Splits.
 *   - ByteLevel: optional prefix space, optional GPT-2 regex split, then every
 *     byte mapped to its GPT-2 character (the vocabulary's alphabet).
 *   - Metaspace: ' ' -> replacement, the prepend scheme, optional split.
 * Input is valid UTF-8 (rp_tok_encode sanitizes), so PCRE2 runs without its
 * UTF check. Empty pieces are dropped, as HF does.
 */
#include "tokenizer_int.h"

const char *const tok_gpt2_regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
// other 68 bytes to U+0100.. in byte order.
int tok_byte_to_unicode(uint8_t b, char out[2])
{
    uint32_t cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        cp = b;
    else if (b <= 32)
        cp = 256u + b;
    else if (b >= 127 && b <= 160)
        cp = 256u + 33u + (b - 127u);
    else // 173
        cp = 256u + 67u;
    return tok_utf8_encode(cp, out);
}

int tok_unicode_to_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp < 256 || cp >= 256 + 68)
        return -1;
    uint32_t n = cp - 256;
    if (n <= 32)
        return (int)n;
    if (n <= 66)
        return (int)(127 + n - 33);
    return 173;
}

void tok_pre_free(tok_pre *p)
{
    if (p->re)
        pcre2_code_free(p->re);
}

void tok_pieces_free(tok_pieces *p)
{
    rp_free(p->buf.p);
    rp_free(p->sp);
    memset(p, 0, sizeof(*p));
}

static void pieces_reset(tok_pieces *p)
{
    p->buf.len = 0;
    p->n = 0;
}

static rp_status pieces_add_span(tok_pieces *p, size_t off, size_t len)
{
    if (len == 0)
        return RP_OK;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        tok_span *sp = rp_realloc(p->sp, cap * sizeof(*sp));
        if (!sp)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        p->sp = sp;
        p->cap = cap;
    }
    p->sp[p->n++] = (tok_span){off, len};
    return RP_OK;
}

// Appends bytes to the buffer and a piece for them.
static rp_status pieces_add(tok_pieces *p, const char *s, size_t len)
{
    if (len == 0)
        return RP_OK;
    size_t off = p->buf.len;
    if (tok_buf_put(&p->buf, s, len))
        return RP_ERR_NOMEM;
    return pieces_add_span(p, off, len);
}

/* ---- Split ---------------------------------------------------------------- */

typedef struct seg {
    size_t a, b;
    bool match;
} seg;

typedef struct seg_list {
    seg *v;
    size_t n, cap;
} seg_list;

static rp_status seg_push(seg_list *l, size_t a, size_t b, bool match)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        seg *v = rp_realloc(l->v, cap * sizeof(*v));
        if (!v)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (seg){a, b, match};
    return RP_OK;
}

// HF Pattern::find_matches: alternating (non-match, match) segments covering s.
static rp_status find_matches(pcre2_code *re, pcre2_match_data *md, const char *s, size_t len, seg_list *out)
{
    out->n = 0;
    size_t pos = 0, prev = 0;
    while (pos <= len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return RP_ERR(RP_ERR_INVALID, "regex match failed (%d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) { // empty match: yields an empty piece in HF, which is dropped
            if (ms >= len)
                break;
            pos = ms + (size_t)tok_utf8_len((uint8_t)s[ms]);
            continue;
        }
        if (ms > prev && seg_push(out, prev, ms, false))
            return RP_ERR_NOMEM;
        if (seg_push(out, ms, me, true))
            return RP_ERR_NOMEM;
        prev = pos = me;
    }
    if (prev < len && seg_push(out, prev, len, false))
        return RP_ERR_NOMEM;
    return RP_OK;
}

// Applies the delimiter behavior in place (HF SplitDelimiterBehavior).
static void apply_behavior(seg_list *l, int behavior)
{
    size_t n = 0;
    bool prev_match = false;
    switch (behavior) {
    case SPLIT_REMOVED:
        for (size_t i = 0; i < l->n; i++)
            if (!l->v[i].match)
                l->v[n++] = l->v[i];
        break;
    case SPLIT_ISOLATED:
        n = l->n;
        break;
    case SPLIT_MERGED_PREV:
        for (size_t i = 0; i < l->n; i++) {
            seg s = l->v[i];
            if (s.match && !prev_match && n > 0)
                l->v[n - 1].b = s.b;
            else
                l->v[n++] = s;
            prev_match = s.match;
        }
        break;
    case SPLIT_MERGED_NEXT: {
        // Walk right to left, writing from the end, then move down.
        size_t w = l->n;
        for (size_t i = l->n; i-- > 0;) {
            seg s = l->v[i];
            if (s.match && !prev_match && w < l->n)
                l->v[w].a = s.a;
            else
                l->v[--w] = s;
            prev_match = s.match;
        }
        n = l->n - w;
        memmove(l->v, l->v + w, n * sizeof(seg));
        break;
    }
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < l->n; i++) {
            seg s = l->v[i];
            if (n > 0 && s.match == prev_match)
                l->v[n - 1].b = s.b;
            else
                l->v[n++] = s;
            prev_match = s.match;
        }
        break;
    }
    l->n = n;
}

static rp_status split_pieces(pcre2_code *re, int behavior, bool invert, const tok_pieces *in, tok_pieces *out)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    seg_list segs = {0};
    rp_status st = RP_OK;
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->buf.p + in->sp[i].off;
        size_t len = in->sp[i].len;
        if ((st = find_matches(re, md, s, len, &segs)))
            break;
        if (invert)
            for (size_t k = 0; k < segs.n; k++)
                segs.v[k].match = !segs.v[k].match;
        apply_behavior(&segs, behavior);
        for (size_t k = 0; k < segs.n && !st; k++)
            st = pieces_add(out, s + segs.v[k].a, segs.v[k].b - segs.v[k].a);
        if (st)
            break;
    }
    rp_free(segs.v);
    pcre2_match_data_free(md);
    return st;
}

/* ---- ByteLevel ------------------------------------------------------------ */

static rp_status byte_level(const tok_pre *op, const tok_pieces *in, tok_pieces *out, tok_pieces *scratch)
{
    rp_status st;
    const tok_pieces *src = in;
    if (op->add_prefix_space) {
        pieces_reset(scratch);
        for (size_t i = 0; i < in->n; i++) {
            const char *s = in->buf.p + in->sp[i].off;
            size_t off = scratch->buf.len;
            if (s[0] != ' ' && tok_buf_put(&scratch->buf, " ", 1))
                return RP_ERR_NOMEM;
            if (tok_buf_put(&scratch->buf, s, in->sp[i].len))
                return RP_ERR_NOMEM;
            if ((st = pieces_add_span(scratch, off, scratch->buf.len - off)))
                return st;
        }
        src = scratch;
    }
    tok_pieces split = {0};
    if (op->re) {
        if ((st = split_pieces(op->re, SPLIT_ISOLATED, false, src, &split))) {
            tok_pieces_free(&split);
            return st;
        }
        src = &split;
    }
    st = RP_OK;
    for (size_t i = 0; i < src->n && !st; i++) {
        const uint8_t *s = (const uint8_t *)src->buf.p + src->sp[i].off;
        size_t len = src->sp[i].len;
        size_t off = out->buf.len;
        if ((st = tok_buf_reserve(&out->buf, len * 2)))
            break;
        for (size_t k = 0; k < len; k++)
            out->buf.len += (size_t)tok_byte_to_unicode(s[k], out->buf.p + out->buf.len);
        st = pieces_add_span(out, off, out->buf.len - off);
    }
    tok_pieces_free(&split);
    return st;
}

/* ---- Metaspace ------------------------------------------------------------ */

static rp_status metaspace(const tok_pre *op, const tok_pieces *in, bool first, bool after_special,
                           tok_pieces *out)
{
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->buf.p + in->sp[i].off;
        size_t len = in->sp[i].len;
        size_t off = out->buf.len;
        bool starts = (len > 0 && s[0] == ' ') ||
                      (len >= (size_t)op->repl_len && memcmp(s, op->repl, (size_t)op->repl_len) == 0);
        bool prepend = false;
        switch (op->prepend) {
        case PREPEND_ALWAYS:
            prepend = !starts;
            break;
        case PREPEND_FIRST:
            prepend = !starts && i == 0 && first;
            break;
        case PREPEND_LLAMACPP:
            prepend = i == 0 && (first || after_special);
            break;
        default:
            break;
        }
        if (prepend && tok_buf_put(&out->buf, op->repl, (size_t)op->repl_len))
            return RP_ERR_NOMEM;
        for (size_t k = 0; k < len; k++) {
            rp_status st = s[k] == ' ' ? tok_buf_put(&out->buf, op->repl, (size_t)op->repl_len)
                                       : tok_buf_put(&out->buf, s + k, 1);
            if (st)
                return st;
        }
        if (!op->split) {
            if (pieces_add_span(out, off, out->buf.len - off))
                return RP_ERR_NOMEM;
            continue;
        }
        // Split on the replacement, merged with the next piece.
        size_t a = off, end = out->buf.len, k = off;
        while (k < end) {
            if (k > a && k + (size_t)op->repl_len <= end && memcmp(out->buf.p + k, op->repl, (size_t)op->repl_len) == 0) {
                if (pieces_add_span(out, a, k - a))
                    return RP_ERR_NOMEM;
                a = k;
            }
            k++;
        }
        if (pieces_add_span(out, a, end - a))
            return RP_ERR_NOMEM;
    }
    return RP_OK;
}

rp_status tok_pretokenize(const rp_tokenizer *t, const char *s, size_t len, bool first, bool after_special,
                          tok_pieces *out, tok_pieces *tmp)
{
    rp_status st;
    pieces_reset(out);
    if ((st = pieces_add(out, s, len)))
        return st;
    tok_pieces scratch = {0};
    for (int i = 0; i < t->n_pres; i++) {
        const tok_pre *op = &t->pres[i];
        pieces_reset(tmp);
        switch (op->type) {
        case PRE_SPLIT:
            st = split_pieces(op->re, op->behavior, op->invert, out, tmp);
            break;
        case PRE_BYTELEVEL:
            st = byte_level(op, out, tmp, &scratch);
            break;
        case PRE_METASPACE:
            st = metaspace(op, out, first, after_special, tmp);
            break;
        default:
            st = RP_ERR(RP_ERR_INVALID, "unknown pre-tokenizer step %d", op->type);
        }
        if (st)
            break;
        tok_pieces swap = *out;
        *out = *tmp;
        *tmp = swap;
    }
    tok_pieces_free(&scratch);
    return st;
}

/*
 * decode.c - ids to text: HF decoders, per-token pieces, the incremental
 * detokenizer.
 *
 * rp_tok_decode follows HF's Tokenizer::decode: the tokens' strings (special
 * ones dropped when asked) go through the decoder chain, each step mapping a
 * list of strings to a new list (ByteLevel, Replace, ByteFallback, Fuse, Strip,
 * Metaspace), and the result is joined. transformers' clean_up_tokenization is
 * applied when the tokenizer_config asks for it.
 *
 * Streaming cannot rerun the chain per token, so each token also has a
 * "piece": its raw bytes (byte-level chars and <0xNN> tokens turned back into
 * bytes, ▁ into a space). The detokenizer concatenates pieces, drops the
 * first leading space when the decoder strips it, and cuts the byte stream at
 * UTF-8 boundaries, holding an incomplete tail and emitting U+FFFD for bytes
 * that cannot complete.
 */
#include "tokenizer_int.h"

void tok_dec_free(tok_dec *d)
{
    rp_free(d->a);
    rp_free(d->b);
}

/* ---- string lists --------------------------------------------------------- */

typedef struct slist {
    tok_buf buf;
    tok_span *sp;
    size_t n, cap;
} slist;

static void slist_free(slist *l)
{
    rp_free(l->buf.p);
    rp_free(l->sp);
    memset(l, 0, sizeof(*l));
}

// Starts a new (possibly empty) string at the end of the buffer.
static rp_status slist_begin(slist *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 32;
        tok_span *sp = rp_realloc(l->sp, cap * sizeof(*sp));
        if (!sp)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        l->sp = sp;
        l->cap = cap;
    }
    l->sp[l->n++] = (tok_span){l->buf.len, 0};
    return RP_OK;
}

// Appends bytes to the last string.
static rp_status slist_put(slist *l, const char *s, size_t n)
{
    if (tok_buf_put(&l->buf, s, n))
        return RP_ERR_NOMEM;
    l->sp[l->n - 1].len += n;
    return RP_OK;
}

static const char *sl_str(const slist *l, size_t i)
{
    return l->buf.p ? l->buf.p + l->sp[i].off : "";
}

/* ---- decoder steps -------------------------------------------------------- */

// Maps one byte-level token to bytes; false if a char is not in the GPT-2 alphabet.
static bool byte_level_map(const char *s, size_t len, tok_buf *out)
{
    size_t start = out->len;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int n = tok_utf8_decode(s + i, len - i, &cp);
        int b = n > 0 ? tok_unicode_to_byte(cp) : -1;
        if (b < 0) {
            out->len = start;
            return false;
        }
        char c = (char)b;
        if (tok_buf_put(out, &c, 1)) {
            out->len = start;
            return false;
        }
        i += (size_t)n;
    }
    return true;
}

static rp_status put_byte_level(const char *s, size_t len, tok_buf *out)
{
    if (tok_buf_reserve(out, len))
        return RP_ERR_NOMEM;
    if (byte_level_map(s, len, out))
        return RP_OK;
    return tok_buf_put(out, s, len); // HF keeps the token's own bytes then
}

static rp_status put_replaced(const char *s, size_t len, const char *pat, size_t plen, const char *with, size_t wlen,
                              tok_buf *out)
{
    size_t i = 0, last = 0;
    while (plen && i + plen <= len) {
        if (memcmp(s + i, pat, plen) == 0) {
            if (tok_buf_put(out, s + last, i - last) || tok_buf_put(out, with, wlen))
                return RP_ERR_NOMEM;
            i += plen;
            last = i;
        } else {
            i++;
        }
    }
    return tok_buf_put(out, s + last, len - last);
}

static int byte_token(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static bool utf8_all_valid(const char *s, size_t len)
{
    bool inc;
    return tok_utf8_valid_prefix((const uint8_t *)s, len, &inc) == len;
}

static rp_status step(const tok_dec *d, const slist *in, slist *out)
{
    rp_status st = RP_OK;
    switch (d->type) {
    case DEC_BYTELEVEL: {
        tok_buf raw = {0};
        for (size_t i = 0; i < in->n && !st; i++)
            st = put_byte_level(sl_str(in, i), in->sp[i].len, &raw);
        char *clean = NULL;
        size_t clen = 0;
        if (!st && !(st = tok_utf8_sanitize(raw.p ? raw.p : "", raw.len, &clean, &clen)))
            st = slist_begin(out) ? RP_ERR_NOMEM : slist_put(out, clean, clen);
        rp_free(clean);
        rp_free(raw.p);
        return st;
    }
    case DEC_FUSE:
        if ((st = slist_begin(out)))
            return st;
        for (size_t i = 0; i < in->n && !st; i++)
            st = slist_put(out, sl_str(in, i), in->sp[i].len);
        return st;
    case DEC_BYTEFALLBACK: {
        char bytes[256];
        size_t nb = 0;
        for (size_t i = 0; i <= in->n && !st; i++) {
            int b = i < in->n ? byte_token(sl_str(in, i), in->sp[i].len) : -1;
            if (b >= 0 && nb < sizeof(bytes)) {
                bytes[nb++] = (char)b;
                continue;
            }
            if (nb) { // flush the run of byte tokens
                if (utf8_all_valid(bytes, nb)) {
                    st = slist_begin(out) ? RP_ERR_NOMEM : slist_put(out, bytes, nb);
                } else {
                    for (size_t k = 0; k < nb && !st; k++)
                        st = slist_begin(out) ? RP_ERR_NOMEM : slist_put(out, "\xEF\xBF\xBD", 3);
                }
                nb = 0;
            }
            if (b >= 0) { // a run longer than the scratch: start a new one
                bytes[nb++] = (char)b;
                continue;
            }
            if (i < in->n && !st)
                st = slist_begin(out) ? RP_ERR_NOMEM : slist_put(out, sl_str(in, i), in->sp[i].len);
        }
        return st;
    }
    case DEC_REPLACE:
        for (size_t i = 0; i < in->n && !st; i++) {
            if ((st = slist_begin(out)))
                break;
            size_t before = out->buf.len;
            st = put_replaced(sl_str(in, i), in->sp[i].len, d->a, d->a_len, d->b, d->b_len, &out->buf);
            out->sp[out->n - 1].len = out->buf.len - before;
        }
        return st;
    case DEC_STRIP:
        for (size_t i = 0; i < in->n && !st; i++) {
            const char *s = sl_str(in, i);
            size_t len = in->sp[i].len, a = 0, b = len;
            uint32_t cp;
            int n;
            for (int k = 0; k < d->start && a < b && (n = tok_utf8_decode(s + a, b - a, &cp)) > 0 && cp == d->strip_cp; k++)
                a += (size_t)n;
            for (int k = 0; k < d->stop && b > a; k++) {
                size_t j = b - 1;
                while (j > a && ((uint8_t)s[j] & 0xC0) == 0x80)
                    j--;
                if (tok_utf8_decode(s + j, b - j, &cp) <= 0 || cp != d->strip_cp)
                    break;
                b = j;
            }
            st = slist_begin(out) ? RP_ERR_NOMEM : slist_put(out, s + a, b - a);
        }
        return st;
    case DEC_METASPACE:
        for (size_t i = 0; i < in->n && !st; i++) {
            if ((st = slist_begin(out)))
                break;
            size_t before = out->buf.len;
            // HF drops every replacement char of the first token when prepending.
            const char *with = (i == 0 && d->prepend) ? "" : " ";
            st = put_replaced(sl_str(in, i), in->sp[i].len, d->a, d->a_len, with, strlen(with), &out->buf);
            out->sp[out->n - 1].len = out->buf.len - before;
        }
        return st;
    }
    return RP_ERR(RP_ERR_INVALID, "unknown decoder step %d", d->type);
}

static void clean_up(char *s, size_t *len)
{
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t r = 0; r < sizeof(from) / sizeof(from[0]); r++) {
        size_t fl = strlen(from[r]), tl = strlen(to[r]), w = 0;
        for (size_t i = 0; i < *len;) {
            if (i + fl <= *len && memcmp(s + i, from[r], fl) == 0) {
                memmove(s + w, to[r], tl);
                w += tl;
                i += fl;
            } else {
                s[w++] = s[i++];
            }
        }
        *len = w;
    }
    s[*len] = 0;
}

rp_status rp_tok_decode(const rp_tokenizer *t, const int32_t *ids, size_t n, bool skip_special, char **out,
                        size_t *len)
{
    *out = NULL;
    *len = 0;
    rp_status st = RP_OK;
    slist a = {0}, b = {0};
    for (size_t i = 0; i < n && !st; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab || !t->vocab[id].text)
            continue;
        if (skip_special && t->vocab[id].special)
            continue;
        if (!t->has_decoder && a.n > 0 && (st = slist_put(&a, " ", 1)))
            break;
        if (t->has_decoder || a.n == 0)
            st = slist_begin(&a);
        const tok_entry *e = &t->vocab[id];
        if (!st)
            st = e->dec_text ? slist_put(&a, e->dec_text, e->dec_len) : slist_put(&a, e->text, e->len);
    }
    for (int k = 0; k < t->n_decs && !st; k++) {
        b.buf.len = 0;
        b.n = 0;
        st = step(&t->decs[k], &a, &b);
        slist tmp = a;
        a = b;
        b = tmp;
    }
    tok_buf joined = {0};
    for (size_t i = 0; i < a.n && !st; i++)
        st = tok_buf_put(&joined, sl_str(&a, i), a.sp[i].len);
    if (!st) {
        char *clean = NULL;
        size_t clen = 0;
        if (!(st = tok_utf8_sanitize(joined.p ? joined.p : "", joined.len, &clean, &clen))) {
            if (t->clean_up_spaces)
                clean_up(clean, &clen);
            *out = clean;
            *len = clen;
        }
    }
    rp_free(joined.p);
    slist_free(&a);
    slist_free(&b);
    return st;
}

/* ---- pieces --------------------------------------------------------------- */

rp_status tok_make_piece(const rp_tokenizer *t, int32_t id, tok_buf *out)
{
    const tok_entry *e = &t->vocab[id];
    return tok_make_piece_text(t, e->special, e->text, e->len, out);
}

rp_status tok_make_piece_text(const rp_tokenizer *t, bool special, const char *text, size_t len, tok_buf *out)
{
    if (special || !t->has_decoder)
        return tok_buf_put(out, text, len);
    tok_buf cur = {0}, nxt = {0};
    rp_status st = tok_buf_put(&cur, text, len);
    for (int k = 0; k < t->n_decs && !st; k++) {
        const tok_dec *d = &t->decs[k];
        const char *s = cur.p ? cur.p : "";
        nxt.len = 0;
        int b;
        switch (d->type) {
        case DEC_BYTELEVEL:
            st = put_byte_level(s, cur.len, &nxt);
            break;
        case DEC_BYTEFALLBACK:
            if ((b = byte_token(s, cur.len)) >= 0) {
                char c = (char)b;
                st = tok_buf_put(&nxt, &c, 1);
            } else {
                st = tok_buf_put(&nxt, s, cur.len);
            }
            break;
        case DEC_REPLACE:
            st = put_replaced(s, cur.len, d->a, d->a_len, d->b, d->b_len, &nxt);
            break;
        case DEC_METASPACE:
            st = put_replaced(s, cur.len, d->a, d->a_len, " ", 1, &nxt);
            break;
        default: // Fuse, Strip: whole-text rules, not per piece
            st = tok_buf_put(&nxt, s, cur.len);
            break;
        }
        tok_buf tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    if (!st)
        st = tok_buf_put(out, cur.p, cur.len);
    rp_free(cur.p);
    rp_free(nxt.p);
    return st;
}

/* ---- incremental detokenizer ---------------------------------------------- */

void rp_detok_init(rp_detok *d, const rp_tokenizer *t)
{
    memset(d, 0, sizeof(*d));
    d->t = t;
    d->skip_special = true;
    d->at_start = true;
}

void rp_detok_deinit(rp_detok *d)
{
    rp_free(d->buf);
    memset(d, 0, sizeof(*d));
}

static rp_status detok_put(rp_detok *d, const char *s, size_t n)
{
    if (d->len + n + 1 > d->cap) {
        size_t cap = d->cap ? d->cap : 64;
        while (cap < d->len + n + 1)
            cap *= 2;
        char *p = rp_realloc(d->buf, cap);
        if (!p)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        d->buf = p;
        d->cap = cap;
    }
    memcpy(d->buf + d->len, s, n);
    d->len += n;
    d->buf[d->len] = 0;
    return RP_OK;
}

rp_status rp_detok_push(rp_detok *d, int32_t id, const char **text, size_t *len)
{
    const rp_tokenizer *t = d->t;
    d->len = 0;
    *text = "";
    *len = 0;
    if (detok_put(d, "", 0))
        return RP_ERR_NOMEM;
    if (id < 0 || id >= t->n_vocab || !t->vocab[id].piece)
        goto out;
    if (d->skip_special && t->vocab[id].special)
        goto out;
    const uint8_t *p = (const uint8_t *)t->vocab[id].piece;
    size_t n = t->vocab[id].piece_len;
    if (n == 0)
        goto out;
    if (d->at_start) {
        d->at_start = false;
        if (t->strip_leading && d->n_pend == 0 && p[0] == ' ') {
            p++;
            n--;
        }
    }
    // Held tail + piece, cut at UTF-8 boundaries.
    size_t total = (size_t)d->n_pend + n;
    uint8_t small[256];
    uint8_t *in = total <= sizeof(small) ? small : rp_malloc(total);
    if (!in)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    memcpy(in, d->pend, (size_t)d->n_pend);
    memcpy(in + d->n_pend, p, n);
    d->n_pend = 0;
    rp_status st = RP_OK;
    for (size_t i = 0; i < total && !st;) {
        bool inc;
        size_t v = tok_utf8_valid_prefix(in + i, total - i, &inc);
        if (v && (st = detok_put(d, (const char *)in + i, v)))
            break;
        i += v;
        if (i == total)
            break;
        if (inc) {
            memcpy(d->pend, in + i, total - i);
            d->n_pend = (int)(total - i);
            break;
        }
        st = detok_put(d, "\xEF\xBF\xBD", 3);
        i += tok_utf8_bad_len(in + i, total - i);
    }
    if (in != small)
        rp_free(in);
    if (st)
        return st;
out:
    *text = d->buf;
    *len = d->len;
    return RP_OK;
}

rp_status rp_detok_flush(rp_detok *d, const char **text, size_t *len)
{
    d->len = 0;
    if (detok_put(d, "", 0))
        return RP_ERR_NOMEM;
    if (d->n_pend > 0 && detok_put(d, "\xEF\xBF\xBD", 3))
        return RP_ERR_NOMEM;
    d->n_pend = 0;
    d->at_start = true;
    *text = d->buf;
    *len = d->len;
    return RP_OK;
}

/*
 * normalize.c - Hugging Face normalizers over UTF-8 text.
 *
 * Each step maps a valid UTF-8 string to a new one (two buffers used in turn):
 * NFC/NFD/NFKC/NFKD through utf8proc, Lowercase per character as Rust's
 * char::to_lowercase (so U+0130 becomes "i̇"), Strip, Prepend (only a
 * non-empty string), Replace (literal or regex), StripAccents (drops Mn).
 * NORM_SPM is SentencePiece's own normalizer (normalizer.cc) for
 * tokenizer.model files: the precompiled charsmap (a darts-clone double-array
 * trie of replacement rules, longest match), the dummy prefix, removal of
 * extra whitespace and escaping of spaces to ▁.
 * Offsets are not tracked: Rapid only needs the ids.
 */
#include "tokenizer_int.h"

#include <utf8proc.h>

void tok_norm_free(tok_norm *n)
{
    rp_free(n->a);
    rp_free(n->b);
    if (n->re)
        pcre2_code_free(n->re);
}

static rp_status unicode_form(const char *s, size_t len, int type, tok_buf *out)
{
    utf8proc_option_t opt = UTF8PROC_STABLE;
    if (type == NORM_NFC || type == NORM_NFKC)
        opt |= UTF8PROC_COMPOSE;
    else
        opt |= UTF8PROC_DECOMPOSE;
    if (type == NORM_NFKC || type == NORM_NFKD)
        opt |= UTF8PROC_COMPAT;
    if (len == 0)
        return RP_OK;
    if (len > (size_t)INT32_MAX / 8)
        return RP_ERR(RP_ERR_INVALID, "text too long to normalize");
    // Decompose into code points, then compose (utf8proc_normalize_utf32), then re-encode.
    utf8proc_ssize_t n = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, NULL, 0, opt);
    if (n < 0)
        return RP_ERR(RP_ERR_INVALID, "normalization failed: %s", utf8proc_errmsg(n));
    utf8proc_int32_t *cps = rp_malloc(((size_t)n + 1) * sizeof(*cps));
    if (!cps)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    utf8proc_ssize_t m = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, cps, n, opt);
    if (m >= 0 && m <= n)
        m = utf8proc_normalize_utf32(cps, m, opt);
    if (m < 0 || m > n) {
        rp_free(cps);
        return RP_ERR(RP_ERR_INVALID, "normalization failed");
    }
    rp_status st = tok_buf_reserve(out, (size_t)m * 4);
    if (!st) {
        for (utf8proc_ssize_t i = 0; i < m; i++)
            out->len += (size_t)tok_utf8_encode((uint32_t)cps[i], out->p + out->len);
    }
    rp_free(cps);
    return st;
}

static rp_status lowercase(const char *s, size_t len, tok_buf *out)
{
    if (tok_buf_reserve(out, len + 16))
        return RP_ERR_NOMEM;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int n = tok_utf8_decode(s + i, len - i, &cp);
        if (n <= 0) { // cannot happen on sanitized text; copy the byte
            if (tok_buf_put(out, s + i, 1))
                return RP_ERR_NOMEM;
            i++;
            continue;
        }
        i += (size_t)n;
        char enc[8];
        int m;
        if (cp == 0x130) {
            memcpy(enc, "i\xCC\x87", 3);
            m = 3;
        } else {
            m = tok_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), enc);
        }
        if (tok_buf_put(out, enc, (size_t)m))
            return RP_ERR_NOMEM;
    }
    return RP_OK;
}

static rp_status strip(const char *s, size_t len, bool left, bool right, tok_buf *out)
{
    size_t a = 0, b = len;
    uint32_t cp;
    int n;
    while (left && a < b && (n = tok_utf8_decode(s + a, b - a, &cp)) > 0 && tok_is_whitespace(cp))
        a += (size_t)n;
    while (right && b > a) {
        size_t k = b - 1;
        while (k > a && ((uint8_t)s[k] & 0xC0) == 0x80)
            k--;
        if (tok_utf8_decode(s + k, b - k, &cp) > 0 && tok_is_whitespace(cp))
            b = k;
        else
            break;
    }
    return tok_buf_put(out, s + a, b - a);
}

static rp_status replace_literal(const char *s, size_t len, const char *pat, size_t plen, const char *with,
                                 size_t wlen, tok_buf *out)
{
    if (plen == 0)
        return tok_buf_put(out, s, len);
    size_t i = 0, last = 0;
    while (i + plen <= len) {
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

static rp_status replace_regex(const char *s, size_t len, pcre2_code *re, const char *with, size_t wlen,
                               tok_buf *out)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    rp_status st = RP_OK;
    size_t pos = 0, last = 0;
    while (pos <= len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            st = RP_ERR(RP_ERR_INVALID, "regex match failed (%d)", rc);
            goto done;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { // empty match: replace nothing, step one character
            pos = ms < len ? ms + (size_t)tok_utf8_len((uint8_t)s[ms]) : len + 1;
            continue;
        }
        if ((st = tok_buf_put(out, s + last, ms - last)) || (st = tok_buf_put(out, with, wlen)))
            goto done;
        last = pos = me;
    }
    st = tok_buf_put(out, s + last, len - last);
done:
    pcre2_match_data_free(md);
    return st;
}

static rp_status strip_accents(const char *s, size_t len, tok_buf *out)
{
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int n = tok_utf8_decode(s + i, len - i, &cp);
        if (n <= 0)
            n = 1;
        else if (utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_MN) {
            i += (size_t)n;
            continue;
        }
        if (tok_buf_put(out, s + i, (size_t)n))
            return RP_ERR_NOMEM;
        i += (size_t)n;
    }
    return RP_OK;
}

/* ---- SentencePiece ------------------------------------------------------- */

// Longest charsmap rule matching a prefix of s: replacement and bytes consumed.
static size_t spm_rule(const tok_norm *nm, const uint8_t *s, size_t len, const char **repl)
{
    const uint8_t *blob = (const uint8_t *)nm->a;
    if (nm->a_len < 4)
        return 0;
    uint32_t trie_bytes;
    memcpy(&trie_bytes, blob, 4);
    if ((size_t)trie_bytes + 4 > nm->a_len || trie_bytes < 4)
        return 0;
    size_t n_units = trie_bytes / 4;
    const uint8_t *units = blob + 4;
    const char *strs = (const char *)blob + 4 + trie_bytes;
    size_t strs_len = nm->a_len - 4 - trie_bytes;
#define UNIT(i) (memcpy(&u, units + 4 * (size_t)(i), 4), u)
#define OFFSET(x) (((x) >> 10) << (((x) & (1u << 9)) >> 6))
    uint32_t u, unit = UNIT(0);
    size_t pos = OFFSET(unit), best = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == 0)
            break;
        pos ^= s[i];
        if (pos >= n_units)
            break;
        unit = UNIT(pos);
        if ((unit & ((1u << 31) | 0xFF)) != s[i])
            break;
        pos ^= OFFSET(unit);
        if (pos >= n_units)
            break;
        if ((unit >> 8) & 1) {
            uint32_t value = UNIT(pos) & ((1u << 31) - 1);
            if (value < strs_len && memchr(strs + value, 0, strs_len - value)) {
                best = i + 1;
                *repl = strs + value;
            }
        }
    }
#undef UNIT
#undef OFFSET
    return best;
}

static rp_status spm_normalize(const tok_norm *nm, const char *s, size_t len, tok_buf *out)
{
    static const char ws[] = "\xE2\x96\x81";
    const char *space = nm->escape_ws ? ws : " ";
    size_t space_len = nm->escape_ws ? 3 : 1;
    bool is_prev_space = nm->remove_ws;
    if (len == 0)
        return RP_OK;
    if (nm->dummy_prefix && tok_buf_put(out, space, space_len))
        return RP_ERR_NOMEM;
    for (size_t i = 0; i < len;) {
        const char *sp;
        size_t sp_len, used;
        const char *repl = NULL;
        size_t m = spm_rule(nm, (const uint8_t *)s + i, len - i, &repl);
        uint32_t cp;
        if (m > 0) {
            sp = repl;
            sp_len = strlen(repl);
            used = m;
        } else {
            int n = tok_utf8_decode(s + i, len - i, &cp);
            if (n > 0) {
                sp = s + i;
                sp_len = used = (size_t)n;
            } else {
                sp = "\xEF\xBF\xBD";
                sp_len = 3;
                used = 1;
            }
        }
        while (is_prev_space && sp_len > 0 && sp[0] == ' ')
            sp++, sp_len--;
        if (sp_len > 0) {
            for (size_t k = 0; k < sp_len; k++) {
                rp_status st = sp[k] == ' ' ? tok_buf_put(out, space, space_len) : tok_buf_put(out, sp + k, 1);
                if (st)
                    return st;
            }
            is_prev_space = sp[sp_len - 1] == ' ';
        }
        i += used;
        is_prev_space = is_prev_space && nm->remove_ws;
    }
    if (nm->remove_ws)
        while (out->len >= space_len && memcmp(out->p + out->len - space_len, space, space_len) == 0)
            out->len -= space_len;
    return RP_OK;
}

static rp_status norm_step(const tok_norm *nm, const char *s, size_t len, tok_buf *out)
{
    switch (nm->type) {
    case NORM_NFC:
    case NORM_NFD:
    case NORM_NFKC:
    case NORM_NFKD:
        return unicode_form(s, len, nm->type, out);
    case NORM_LOWER:
        return lowercase(s, len, out);
    case NORM_STRIP:
        return strip(s, len, nm->left, nm->right, out);
    case NORM_PREPEND:
        if (len && tok_buf_put(out, nm->a, nm->a_len))
            return RP_ERR_NOMEM;
        return tok_buf_put(out, s, len);
    case NORM_REPLACE:
        if (nm->re)
            return replace_regex(s, len, nm->re, nm->b, nm->b_len, out);
        return replace_literal(s, len, nm->a, nm->a_len, nm->b, nm->b_len, out);
    case NORM_STRIP_ACCENTS:
        return strip_accents(s, len, out);
    case NORM_SPM:
        return spm_normalize(nm, s, len, out);
    }
    return RP_ERR(RP_ERR_INVALID, "unknown normalizer step %d", nm->type);
}

rp_status tok_normalize_steps(const tok_norm *norms, int n, const char *s, size_t len, tok_buf *out)
{
    out->len = 0;
    if (n == 0)
        return tok_buf_put(out, s, len);
    tok_buf tmp = {0};
    rp_status st = RP_OK;
    // Alternate between `out` and `tmp` so the last step lands in `out`.
    tok_buf *bufs[2] = {(n % 2) ? out : &tmp, (n % 2) ? &tmp : out};
    const char *cur = s;
    size_t cur_len = len;
    for (int i = 0; i < n; i++) {
        tok_buf *dst = bufs[i % 2];
        dst->len = 0;
        if ((st = norm_step(&norms[i], cur, cur_len, dst)))
            break;
        cur = dst->p ? dst->p : "";
        cur_len = dst->len;
    }
    rp_free(tmp.p);
    return st;
}

rp_status tok_normalize(const rp_tokenizer *t, const char *s, size_t len, tok_buf *out)
{
    return tok_normalize_steps(t->norms, t->n_norms, s, len, out);
}

/*
 * json_vocab.c - a tokenizer's vocabulary as the JSON mask needs it: every
 * token's decoded bytes, its kind, and a trie over the bytes (grammar_int.h).
 *
 * The bytes are rp_tok_piece's: what the incremental detokenizer writes for the
 * token (byte-level BPE mapped back to bytes, SentencePiece's U+2581 as a
 * space, <0xNN> byte-fallback tokens as the byte). The only difference from
 * the streamed text is the leading space a SentencePiece decoder strips from
 * the first token, and whitespace is allowed before the '{' anyway.
 *
 * The trie is built from the tokens sorted by their bytes: each token adds the
 * nodes past its longest common prefix with the one before, which yields the
 * preorder directly; a node's subtree closes when a later token's common
 * prefix is shorter than the node's depth.
 */
#include <stdlib.h>

#include "grammar_int.h"

// A candidate while sorting (qsort has no context argument, so each carries its bytes).
typedef struct sort_item {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} sort_item;

static int cmp_items(const void *pa, const void *pb)
{
    const sort_item *a = pa, *b = pb;
    int c = memcmp(a->p, b->p, a->len < b->len ? a->len : b->len);
    if (c)
        return c;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

// Bytes of the well-formed UTF-8 character at p (1..4), 0 if there is none.
static size_t utf8_char(const uint8_t *p, size_t n)
{
    uint8_t c = p[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    if (len > n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return len;
}

// ok[i] for 0 <= i <= n: p[i..n) is plain string text (whole UTF-8 characters,
// no '"', '\' or control byte), so a string state reads it and stays a string.
static void plain_suffixes(const uint8_t *p, size_t n, uint8_t *ok)
{
    ok[n] = 1;
    for (size_t i = n; i-- > 0;) {
        uint8_t c = p[i];
        size_t len = c < 0x80 ? (c >= 0x20 && c != '"' && c != '\\') : utf8_char(p + i, n - i);
        ok[i] = len > 0 && ok[i + len];
    }
}

void rp_json_vocab_destroy(rp_json_vocab *v)
{
    if (!v)
        return;
    rp_free(v->kind);
    rp_free(v->off);
    rp_free(v->blob);
    rp_free(v->eog);
    rp_free(v->order);
    rp_free(v->other);
    rp_free(v->byte);
    rp_free(v->plain);
    rp_free(v->cats);
    rp_free(v->depth);
    rp_free(v->end);
    rp_free(v->first);
    rp_free(v);
}

rp_status json_vocab_build(const json_tok *toks, int32_t n, rp_json_vocab **out)
{
    rp_status st = RP_OK;
    uint32_t *stack = NULL; // node per depth on the current path
    uint8_t *ok = NULL;     // plain_suffixes of the current token
    sort_item *items = NULL;
    *out = NULL;
    rp_json_vocab *v = rp_calloc(1, sizeof(*v));
    if (!v)
        return RP_ERR(RP_ERR_NOMEM, "out of memory for the JSON vocabulary");
    if (n < 0 || n > INT32_MAX - 1) {
        st = RP_ERR(RP_ERR_RANGE, "vocabulary of %d tokens", (int)n);
        goto fail;
    }
    v->n_tok = n;
    size_t nn = (size_t)n;
    v->kind = rp_calloc(nn ? nn : 1, 1);
    v->off = rp_malloc((nn + 1) * sizeof(*v->off));
    if (!v->kind || !v->off)
        goto nomem;

    // Kinds, and the candidates' bytes into one blob.
    size_t total = 0;
    for (int32_t id = 0; id < n; id++) {
        uint8_t k = toks[id].kind;
        if (k == JT_CAND && (toks[id].len == 0 || toks[id].len > JSON_MAX_PIECE))
            k = JT_NEVER;
        v->kind[id] = k;
        if (k == JT_CAND) {
            total += toks[id].len;
            v->n_cand++;
            if (toks[id].len > v->max_len)
                v->max_len = (uint32_t)toks[id].len;
        }
        v->n_eog += k == JT_EOG;
    }
    if (total > UINT32_MAX / 2) {
        st = RP_ERR(RP_ERR_RANGE, "vocabulary of %zu bytes", total);
        goto fail;
    }
    v->blob = rp_malloc(total ? total : 1);
    v->n_other = n - v->n_cand - v->n_eog;
    v->eog = rp_malloc(v->n_eog ? (size_t)v->n_eog * sizeof(*v->eog) : 1);
    v->other = rp_malloc(v->n_other ? (size_t)v->n_other * sizeof(*v->other) : 1);
    v->order = rp_malloc(v->n_cand ? (size_t)v->n_cand * sizeof(*v->order) : 1);
    if (!v->blob || !v->eog || !v->other || !v->order)
        goto nomem;
    uint32_t pos = 0;
    int32_t ne = 0, nc = 0, no = 0;
    for (int32_t id = 0; id < n; id++) {
        v->off[id] = pos;
        if (v->kind[id] == JT_CAND) {
            memcpy(v->blob + pos, toks[id].p, toks[id].len);
            pos += (uint32_t)toks[id].len;
            v->order[nc++] = id;
        } else if (v->kind[id] == JT_EOG) {
            v->eog[ne++] = id;
        } else {
            v->other[no++] = id;
        }
    }
    v->off[n] = pos;
    items = rp_malloc(v->n_cand ? (size_t)v->n_cand * sizeof(*items) : 1);
    if (!items)
        goto nomem;
    for (int32_t k = 0; k < nc; k++) {
        int32_t id = v->order[k];
        items[k] = (sort_item){v->blob + v->off[id], v->off[id + 1] - v->off[id], id};
    }
    qsort(items, (size_t)nc, sizeof(*items), cmp_items);
    for (int32_t k = 0; k < nc; k++)
        v->order[k] = items[k].id;
    rp_free(items);
    items = NULL;

    // Trie: at most one node per candidate byte, plus the root.
    size_t cap = total + 1;
    v->byte = rp_malloc(cap);
    v->plain = rp_malloc(cap);
    v->cats = rp_malloc(cap);
    v->depth = rp_malloc(cap * sizeof(*v->depth));
    v->end = rp_malloc(cap * sizeof(*v->end));
    v->first = rp_malloc((cap + 1) * sizeof(*v->first));
    stack = rp_malloc(((size_t)v->max_len + 1) * sizeof(*stack));
    ok = rp_malloc((size_t)v->max_len + 1);
    uint8_t *sfx = rp_malloc((size_t)v->max_len + 1); // categories of the current token's suffixes
    if (!v->byte || !v->plain || !v->cats || !v->depth || !v->end || !v->first || !stack || !ok || !sfx) {
        rp_free(sfx);
        goto nomem;
    }
    uint32_t n_node = 1;
    v->byte[0] = 0;
    v->plain[0] = 1;
    v->cats[0] = 0;
    v->depth[0] = 0;
    v->first[0] = 0;
    stack[0] = 0;
    size_t prev_len = 0;
    const uint8_t *prev = NULL;
    for (int32_t k = 0; k < v->n_cand; k++) {
        int32_t id = v->order[k];
        const uint8_t *p = v->blob + v->off[id];
        size_t len = v->off[id + 1] - v->off[id], lcp = 0;
        while (prev && lcp < len && lcp < prev_len && p[lcp] == prev[lcp])
            lcp++;
        // Close the previous token's nodes deeper than the common prefix.
        for (size_t d = prev_len; d > lcp; d--)
            v->end[stack[d]] = n_node;
        for (size_t d = lcp + 1; d <= len; d++) {
            uint32_t node = n_node++;
            v->byte[node] = p[d - 1];
            v->plain[node] = 1;
            v->cats[node] = 0;
            v->depth[node] = (uint16_t)d;
            v->first[node] = (uint32_t)k;
            stack[d] = node;
        }
        // The nodes on this token's path stay plain only if its remainder past them is.
        plain_suffixes(p, len, ok);
        sfx[len] = 0;
        for (size_t d = len; d-- > 0;)
            sfx[d] = (uint8_t)(sfx[d + 1] | byte_cat(p[d]));
        for (size_t d = 0; d <= len; d++) {
            v->plain[stack[d]] &= ok[d];
            v->cats[stack[d]] |= sfx[d];
        }
        prev = p;
        prev_len = len;
    }
    for (size_t d = prev_len; d > 0; d--)
        v->end[stack[d]] = n_node;
    v->end[0] = n_node;
    v->first[n_node] = (uint32_t)v->n_cand;
    v->n_node = (int32_t)n_node;
    // Shared prefixes leave most of the room unused: give it back (keeping the
    // larger block where shrinking fails).
    void *p;
    if ((p = rp_realloc(v->byte, n_node)))
        v->byte = p;
    if ((p = rp_realloc(v->plain, n_node)))
        v->plain = p;
    if ((p = rp_realloc(v->cats, n_node)))
        v->cats = p;
    if ((p = rp_realloc(v->depth, n_node * sizeof(*v->depth))))
        v->depth = p;
    if ((p = rp_realloc(v->end, n_node * sizeof(*v->end))))
        v->end = p;
    if ((p = rp_realloc(v->first, (n_node + 1) * sizeof(*v->first))))
        v->first = p;
    rp_free(stack);
    rp_free(ok);
    rp_free(sfx);
    *out = v;
    return RP_OK;
nomem:
    st = RP_ERR(RP_ERR_NOMEM, "out of memory for the JSON vocabulary (%d tokens)", (int)n);
fail:
    rp_free(items);
    rp_free(ok);
    rp_free(stack);
    rp_json_vocab_destroy(v);
    return st;
}

rp_status rp_json_vocab_create(const rp_tokenizer *t, rp_json_vocab **out)
{
    *out = NULL;
    int32_t n = rp_tok_n_vocab(t);
    json_tok *toks = rp_calloc(n > 0 ? (size_t)n : 1, sizeof(*toks));
    if (!toks)
        return RP_ERR(RP_ERR_NOMEM, "out of memory for the JSON vocabulary (%d tokens)", (int)n);
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        const char *p = rp_tok_piece(t, id, &len);
        toks[id].p = (const uint8_t *)p;
        toks[id].len = len;
        if (rp_tok_is_eog(t, id))
            toks[id].kind = JT_EOG;
        else if (p && !rp_tok_is_special(t, id))
            toks[id].kind = JT_CAND;
        else
            toks[id].kind = JT_NEVER;
    }
    rp_status st = json_vocab_build(toks, n, out);
    rp_free(toks);
    return st;
}

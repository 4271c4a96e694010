/*
 * bpe.c - the BPE models: merge one pre-tokenized piece into token ids.
 *
 * Two merge orders, each a faithful copy of its reference's algorithm:
 *   - rank-based BPE (HF tokenizers' Word::merge_all): symbols start as the
 *     piece's characters (unknown ones through byte fallback or unk, fused if
 *     fuse_unk); a heap pops the pair with the lowest merge rank, leftmost
 *     first; stale entries are recognised as HF does (the pair at that
 *     position no longer yields the same new id).
 *   - score-based SentencePiece BPE (llama.cpp's llm_tokenizer_spm): a heap of
 *     adjacent pairs whose concatenation is a token, highest score first,
 *     leftmost on ties; leftovers that are not tokens become <0xNN> bytes.
 * One heap serves both: key descending (-rank or score), then left ascending.
 * Work arrays live in a tok_bpe_work reused across the pieces of one encode.
 */
#include "tokenizer_int.h"

typedef struct sym {
    int32_t id;         // BPE: token id
    int32_t prev, next; // neighbors in the chain, -1 at the ends
    uint32_t off, len;  // bytes in the piece (len 0: merged away)
} sym;

typedef struct heap_e {
    double key;
    int32_t left, right; // right: SPM only
    int32_t new_id;      // BPE only
    uint32_t size;       // SPM only
} heap_e;

struct tok_bpe_work {
    sym *syms;
    size_t cap_syms;
    heap_e *heap;
    size_t n_heap, cap_heap;
};

rp_status tok_ids_push(tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = rp_realloc(ids->v, cap * sizeof(*v));
        if (!v)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return RP_OK;
}

rp_status tok_bpe_work_create(tok_bpe_work **out)
{
    *out = rp_calloc(1, sizeof(**out));
    return *out ? RP_OK : RP_ERR(RP_ERR_NOMEM, "out of memory");
}

void tok_bpe_work_destroy(tok_bpe_work *w)
{
    if (!w)
        return;
    rp_free(w->syms);
    rp_free(w->heap);
    rp_free(w);
}

static rp_status syms_reserve(tok_bpe_work *w, size_t n)
{
    if (n <= w->cap_syms)
        return RP_OK;
    size_t cap = w->cap_syms ? w->cap_syms : 64;
    while (cap < n)
        cap *= 2;
    sym *s = rp_realloc(w->syms, cap * sizeof(*s));
    if (!s)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    w->syms = s;
    w->cap_syms = cap;
    return RP_OK;
}

static bool heap_before(const heap_e *a, const heap_e *b)
{
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static rp_status heap_push(tok_bpe_work *w, heap_e e)
{
    if (w->n_heap == w->cap_heap) {
        size_t cap = w->cap_heap ? w->cap_heap * 2 : 64;
        heap_e *h = rp_realloc(w->heap, cap * sizeof(*h));
        if (!h)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        w->heap = h;
        w->cap_heap = cap;
    }
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_before(&e, &w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = e;
    return RP_OK;
}

static heap_e heap_pop(tok_bpe_work *w)
{
    heap_e top = w->heap[0];
    heap_e last = w->heap[--w->n_heap];
    size_t n = w->n_heap, i = 0;
    while (n > 0) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!heap_before(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

/* ---- rank-based BPE (HF) ------------------------------------------------- */

static rp_status add_sym(tok_bpe_work *w, size_t *n, int32_t id, uint32_t off, uint32_t len)
{
    if (syms_reserve(w, *n + 1))
        return RP_ERR_NOMEM;
    w->syms[*n] = (sym){id, (int32_t)*n - 1, -1, off, len};
    if (*n > 0)
        w->syms[*n - 1].next = (int32_t)*n;
    (*n)++;
    return RP_OK;
}

static rp_status push_pair(const rp_tokenizer *t, tok_bpe_work *w, int32_t left)
{
    const sym *l = &w->syms[left];
    if (l->next < 0)
        return RP_OK;
    int32_t rank, id;
    if (!tok_pairmap_get(&t->merges, l->id, w->syms[l->next].id, &rank, &id))
        return RP_OK;
    return heap_push(w, (heap_e){-(double)rank, left, -1, id, 0});
}

static rp_status bpe_encode(const rp_tokenizer *t, tok_bpe_work *w, const char *s, size_t len, tok_ids *out)
{
    rp_status st;
    if (t->ignore_merges) {
        int32_t id = tok_strmap_get(&t->vocab_map, s, len);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    size_t n = 0;
    bool unk = false;
    uint32_t unk_off = 0, unk_len = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = (size_t)tok_utf8_len((uint8_t)s[i]);
        if (cl > len - i)
            cl = len - i;
        int32_t id = tok_strmap_get(&t->vocab_map, s + i, cl);
        if (id >= 0) {
            if (unk) {
                if ((st = add_sym(w, &n, t->unk_id, unk_off, unk_len)))
                    return st;
                unk = false;
            }
            if ((st = add_sym(w, &n, id, (uint32_t)i, (uint32_t)cl)))
                return st;
            i += cl;
            continue;
        }
        if (t->byte_fallback) {
            bool all = true;
            for (size_t k = 0; k < cl; k++)
                all = all && t->byte_ids[(uint8_t)s[i + k]] >= 0;
            if (all) {
                // HF adds the bytes without flushing a pending unk first.
                for (size_t k = 0; k < cl; k++)
                    if ((st = add_sym(w, &n, t->byte_ids[(uint8_t)s[i + k]], (uint32_t)(i + k), 1)))
                        return st;
                i += cl;
                continue;
            }
        }
        if (t->unk_id >= 0) {
            if (unk && t->fuse_unk) {
                unk_len += (uint32_t)cl;
            } else {
                if (unk && (st = add_sym(w, &n, t->unk_id, unk_off, unk_len)))
                    return st;
                unk = true;
                unk_off = (uint32_t)i;
                unk_len = (uint32_t)cl;
            }
        }
        i += cl;
    }
    if (unk && (st = add_sym(w, &n, t->unk_id, unk_off, unk_len)))
        return st;

    w->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if ((st = push_pair(t, w, (int32_t)i)))
            return st;
    while (w->n_heap > 0) {
        heap_e top = heap_pop(w);
        sym *l = &w->syms[top.left];
        if (l->len == 0 || l->next < 0)
            continue;
        int32_t next = l->next;
        int32_t rank, id;
        if (!tok_pairmap_get(&t->merges, l->id, w->syms[next].id, &rank, &id) || id != top.new_id)
            continue;
        sym *r = &w->syms[next];
        l->id = top.new_id;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->syms[r->next].prev = top.left;
        if (l->prev >= 0 && (st = push_pair(t, w, l->prev)))
            return st;
        if ((st = push_pair(t, w, top.left)))
            return st;
    }
    for (size_t i = 0; i < n; i++)
        if (w->syms[i].len != 0 && (st = tok_ids_push(out, w->syms[i].id)))
            return st;
    return RP_OK;
}

/* ---- score-based SentencePiece BPE (llama.cpp) --------------------------- */

static rp_status spm_try_bigram(const rp_tokenizer *t, tok_bpe_work *w, const char *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return RP_OK;
    const sym *l = &w->syms[left], *r = &w->syms[right];
    uint32_t size = l->len + r->len;
    int32_t id = tok_strmap_get(&t->vocab_map, s + l->off, size);
    if (id < 0)
        return RP_OK;
    return heap_push(w, (heap_e){(double)t->vocab[id].score, left, right, -1, size});
}

static rp_status spm_bytes(const rp_tokenizer *t, const char *s, size_t len, tok_ids *out)
{
    for (size_t k = 0; k < len; k++) {
        uint8_t b = (uint8_t)s[k];
        int32_t id = t->byte_ids[b];
        if (id < 0)
            id = tok_strmap_get(&t->vocab_map, (const char *)&b, 1);
        if (id < 0)
            id = t->unk_id;
        if (id >= 0 && tok_ids_push(out, id))
            return RP_ERR_NOMEM;
    }
    return RP_OK;
}

static rp_status spm_encode(const rp_tokenizer *t, tok_bpe_work *w, const char *s, size_t len, tok_ids *out)
{
    rp_status st;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t cl = (size_t)tok_utf8_len((uint8_t)s[i]);
        if (cl > len - i)
            cl = len - i;
        if ((st = add_sym(w, &n, -1, (uint32_t)i, (uint32_t)cl)))
            return st;
        i += cl;
    }
    w->n_heap = 0;
    for (size_t i = 1; i < n; i++)
        if ((st = spm_try_bigram(t, w, s, (int32_t)i - 1, (int32_t)i)))
            return st;
    while (w->n_heap > 0) {
        heap_e b = heap_pop(w);
        sym *l = &w->syms[b.left], *r = &w->syms[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size)
            continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->syms[r->next].prev = b.left;
        if ((st = spm_try_bigram(t, w, s, l->prev, b.left)) || (st = spm_try_bigram(t, w, s, b.left, l->next)))
            return st;
    }
    for (int32_t i = n ? 0 : -1; i != -1; i = w->syms[i].next) {
        const sym *y = &w->syms[i];
        int32_t id = tok_strmap_get(&t->vocab_map, s + y->off, y->len);
        if (id >= 0)
            st = tok_ids_push(out, id);
        else
            st = spm_bytes(t, s + y->off, y->len, out);
        if (st)
            return st;
    }
    return RP_OK;
}

rp_status tok_model_encode(const rp_tokenizer *t, tok_bpe_work *w, const char *s, size_t len, tok_ids *out)
{
    if (len == 0)
        return RP_OK;
    if (len > UINT32_MAX / 2)
        return RP_ERR(RP_ERR_INVALID, "pre-tokenized piece too long (%zu bytes)", len);
    return t->model == TOK_MODEL_SPM ? spm_encode(t, w, s, len, out) : bpe_encode(t, w, s, len, out);
}

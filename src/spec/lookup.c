/*
 * lookup.c - prompt lookup: the n-gram index of one sequence.
 *
 * Design:
 *   - tokens[0..len) is the sequence. For the n-gram ending at position i
 *     (n = 1..N, N = max_ngram) a 64-bit hash is built backwards from tokens[i]
 *     (each step mixes in one more token, so the hash of n+1 extends that of n).
 *   - One open-addressing table (linear probing, power-of-two size, at most half
 *     full) maps a hash to `last`: the latest position where that n-gram ended.
 *   - prev[i*N + n-1] is the value `last` had before position i took it: the
 *     previous occurrence of the n-gram ending at i. Proposing reads it for the
 *     sequence's end (no probe at all); truncating walks back from the end and
 *     puts every replaced value back, so the index is exactly what it was.
 *   - A hash match is confirmed by comparing the tokens, so a collision can
 *     only lose a match, never propose a wrong continuation.
 * Appending costs N hash steps and N probes per token; memory is 4(N+1) bytes
 * per token plus 16 bytes per distinct n-gram, both grown by doubling.
 */
#include "spec.h"

typedef struct entry {
    uint64_t key;
    int32_t last; // latest end position, -1 when every occurrence was truncated away
    int32_t used;
} entry;

struct rp_spec_lookup {
    int n_max;       // N
    int32_t *tokens; // (cap)
    int32_t *prev;   // (cap * N)
    int32_t len, cap;
    entry *table; // (table_cap)
    uint32_t table_cap, table_used;
};

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// The hash of the n-gram ending at `end` given the one of n-1 (h = 0 for n = 1).
static inline uint64_t extend(uint64_t h, int32_t token, int n)
{
    return mix64(h + 0x9e3779b97f4a7c15ULL * (uint64_t)n + (uint64_t)(uint32_t)token);
}

static entry *probe(entry *table, uint32_t cap, uint64_t key)
{
    uint32_t i = (uint32_t)key & (cap - 1);
    while (table[i].used && table[i].key != key)
        i = (i + 1) & (cap - 1);
    return &table[i];
}

static rp_status grow_table(rp_spec_lookup *x, uint64_t need)
{
    if (need * 2 <= x->table_cap)
        return RP_OK;
    uint32_t cap = x->table_cap ? x->table_cap : 256;
    while (need * 2 > cap) {
        if (cap > (1u << 30))
            return RP_ERR(RP_ERR_NOMEM, "prompt lookup: index too large");
        cap *= 2;
    }
    entry *t = rp_calloc(cap, sizeof(entry));
    if (!t)
        return RP_ERR(RP_ERR_NOMEM, "prompt lookup: out of memory");
    for (uint32_t i = 0; i < x->table_cap; i++)
        if (x->table[i].used)
            *probe(t, cap, x->table[i].key) = x->table[i];
    rp_free(x->table);
    x->table = t;
    x->table_cap = cap;
    return RP_OK;
}

static rp_status grow_tokens(rp_spec_lookup *x, int64_t need)
{
    if (need <= x->cap)
        return RP_OK;
    int64_t cap = x->cap ? x->cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > INT32_MAX / RP_SPEC_NGRAM_MAX)
        return RP_ERR(RP_ERR_NOMEM, "prompt lookup: sequence too long");
    int32_t *t = rp_realloc(x->tokens, (size_t)cap * sizeof(int32_t));
    if (!t)
        return RP_ERR(RP_ERR_NOMEM, "prompt lookup: out of memory");
    x->tokens = t;
    int32_t *p = rp_realloc(x->prev, (size_t)cap * x->n_max * sizeof(int32_t));
    if (!p)
        return RP_ERR(RP_ERR_NOMEM, "prompt lookup: out of memory");
    x->prev = p;
    x->cap = (int32_t)cap;
    return RP_OK;
}

rp_status rp_spec_lookup_create(int max_ngram, rp_spec_lookup **out)
{
    *out = NULL;
    if (max_ngram < 1 || max_ngram > RP_SPEC_NGRAM_MAX)
        return RP_ERR(RP_ERR_INVALID, "prompt lookup: n-gram length %d is out of range (1..%d)", max_ngram,
                      RP_SPEC_NGRAM_MAX);
    rp_spec_lookup *x = rp_calloc(1, sizeof(*x));
    if (!x)
        return RP_ERR(RP_ERR_NOMEM, "prompt lookup: out of memory");
    x->n_max = max_ngram;
    *out = x;
    return RP_OK;
}

void rp_spec_lookup_destroy(rp_spec_lookup *x)
{
    if (!x)
        return;
    rp_free(x->tokens);
    rp_free(x->prev);
    rp_free(x->table);
    rp_free(x);
}

int rp_spec_lookup_len(const rp_spec_lookup *x)
{
    return x->len;
}

rp_status rp_spec_lookup_append(rp_spec_lookup *x, const int32_t *tokens, int n)
{
    if (n <= 0)
        return RP_OK;
    // Reserve everything first: past this point nothing can fail.
    rp_status st = grow_tokens(x, (int64_t)x->len + n);
    if (!st)
        st = grow_table(x, x->table_used + (uint64_t)n * (uint64_t)x->n_max);
    if (st)
        return st;
    for (int k = 0; k < n; k++) {
        int32_t i = x->len++;
        x->tokens[i] = tokens[k];
        uint64_t h = 0;
        int top = i + 1 < x->n_max ? i + 1 : x->n_max;
        for (int g = 1; g <= x->n_max; g++) {
            int32_t *pv = &x->prev[(size_t)i * x->n_max + g - 1];
            if (g > top) {
                *pv = -1;
                continue;
            }
            h = extend(h, x->tokens[i - g + 1], g);
            entry *e = probe(x->table, x->table_cap, h);
            if (!e->used) {
                e->used = 1;
                e->key = h;
                e->last = -1;
                x->table_used++;
            }
            *pv = e->last;
            e->last = i;
        }
    }
    return RP_OK;
}

void rp_spec_lookup_truncate(rp_spec_lookup *x, int n_tokens)
{
    if (n_tokens < 0)
        n_tokens = 0;
    while (x->len > n_tokens) {
        int32_t i = --x->len;
        uint64_t h = 0;
        int top = i + 1 < x->n_max ? i + 1 : x->n_max;
        for (int g = 1; g <= top; g++) {
            h = extend(h, x->tokens[i - g + 1], g);
            entry *e = probe(x->table, x->table_cap, h);
            RP_ASSERT(e->used && e->last == i);
            e->last = x->prev[(size_t)i * x->n_max + g - 1];
        }
    }
}

int rp_spec_lookup_propose(const rp_spec_lookup *x, int min_ngram, int max_tokens, int32_t *out, int *match_len)
{
    if (match_len)
        *match_len = 0;
    int32_t end = x->len - 1;
    if (max_tokens <= 0 || end < 1)
        return 0;
    if (min_ngram < 1)
        min_ngram = 1;
    const int32_t *t = x->tokens;
    for (int g = end < x->n_max ? end : x->n_max; g >= min_ngram; g--) {
        int32_t j = x->prev[(size_t)end * x->n_max + g - 1];
        if (j < g - 1) // no earlier occurrence (or not enough tokens before it to be one)
            continue;
        if (memcmp(t + j - g + 1, t + end - g + 1, (size_t)g * sizeof(int32_t)) != 0)
            continue; // a hash collision
        int32_t period = end - j;
        for (int k = 0; k < max_tokens; k++)
            out[k] = j + 1 + k <= end ? t[j + 1 + k] : out[k - period];
        if (match_len)
            *match_len = g;
        return max_tokens;
    }
    return 0;
}

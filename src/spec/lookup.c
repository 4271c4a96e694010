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
 *
 * Following a copy (rp_spec_lookup_follow): a text being copied with edits (a
 * file returned whole with a name changed) has n-grams that occur in several
 * places, and the most recent occurrence of the longest one is often not the place
 * being copied (the file repeats itself; the copy so far repeats the file), so its
 * continuation is wrong while the copy is not. Candidates are therefore judged by
 * their agreement: how many tokens before them equal the sequence's end (up to
 * AGREE_MAX): the longest n-gram's occurrences (the most recent CHAIN_MAX, through
 * prev) and the copy pointer, i.e. where the last proposal that agreed at length
 * (COPY_MIN) or came from the pointer itself came from, moved on by the tokens
 * emitted since. While the copy goes on the pointer agrees the most and wins
 * (ties too); where the copy broke (an edit), the pointer's neighbourhood is searched
 * for the token just emitted, from RESYNC_BACK before the point where the copy
 * would stand to RESYNC_AHEAD after it (an old name of up to RESYNC_AHEAD more
 * tokens than the new one skipped), so drafting resumes one token after the edit
 * instead of once an n-gram through the new text recurs.
 */
#include "spec.h"

typedef struct entry {
    uint64_t key;
    int32_t last; // latest end position, -1 when every occurrence was truncated away
    int32_t used;
} entry;

#define AGREE_MAX 64    // agreement is counted up to this many tokens
#define CHAIN_MAX 8     // occurrences of the longest n-gram compared by agreement
#define RESYNC_BACK 4   // the resync window around where a broken copy would stand
#define RESYNC_AHEAD 16 // (old text up to this many tokens longer than the new)
#define COPY_DROP 64    // a copy pointer not used for this many tokens is dropped
#define COPY_MIN 16     // the agreement that makes a place the copy pointer

struct rp_spec_lookup {
    int32_t src, at; // copy pointer: tokens[src] was aligned with tokens[at] (src < 0: none)
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
    x->src = -1;
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
    if (x->at >= n_tokens)
        x->src = -1;
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

// The tokens after position j (< end), going on with the period end - j past the end.
static int continuation(const rp_spec_lookup *x, int32_t j, int max_tokens, int32_t *out)
{
    int32_t end = x->len - 1, period = end - j;
    for (int k = 0; k < max_tokens; k++)
        out[k] = j + 1 + k <= end ? x->tokens[j + 1 + k] : out[k - period];
    return max_tokens;
}

// The longest n (n_max down to min_ngram) whose last n tokens occurred earlier:
// returns n (0: none) and *j, where its most recent earlier occurrence ends.
static int longest_match(const rp_spec_lookup *x, int min_ngram, int32_t *j)
{
    int32_t end = x->len - 1;
    const int32_t *t = x->tokens;
    for (int g = end < x->n_max ? end : x->n_max; g >= min_ngram; g--) {
        *j = x->prev[(size_t)end * x->n_max + g - 1];
        if (*j < g - 1) // no earlier occurrence (or not enough tokens before it to be one)
            continue;
        if (memcmp(t + *j - g + 1, t + end - g + 1, (size_t)g * sizeof(int32_t)) != 0)
            continue; // a hash collision
        return g;
    }
    return 0;
}

int rp_spec_lookup_propose(const rp_spec_lookup *x, int min_ngram, int max_tokens, int32_t *out, int *match_len)
{
    if (match_len)
        *match_len = 0;
    if (max_tokens <= 0 || x->len < 2)
        return 0;
    int32_t j;
    int g = longest_match(x, min_ngram < 1 ? 1 : min_ngram, &j);
    if (!g)
        return 0;
    if (match_len)
        *match_len = g;
    return continuation(x, j, max_tokens, out);
}

// How many tokens up to AGREE_MAX before and at j (< end) equal those at the end.
static int agreement(const rp_spec_lookup *x, int32_t j)
{
    const int32_t *t = x->tokens;
    int32_t end = x->len - 1;
    int n = 0;
    while (n < AGREE_MAX && j - n >= 0 && t[j - n] == t[end - n])
        n++;
    return n;
}

// The copy pointer's candidate: where the copy stands now if it goes on, else the
// best agreeing place in the resync window around it (nearest on ties). -1: none.
static int32_t copy_candidate(const rp_spec_lookup *x, int *agree)
{
    int32_t end = x->len - 1;
    *agree = 0;
    if (x->src < 0)
        return -1;
    int32_t p = x->src + (end - x->at), best = -1;
    if (p >= 0 && p < end && x->tokens[p] == x->tokens[end]) {
        *agree = agreement(x, p);
        return p;
    }
    for (int32_t d = 0; d <= RESYNC_AHEAD; d++) // nearest first: p, p + 1, p - 1, p + 2, ...
        for (int side = 0; side < 2; side++) {
            int32_t q = side ? p - d : p + d;
            if ((side && (d == 0 || d > RESYNC_BACK)) || q < 0 || q >= end)
                continue;
            int a = x->tokens[q] == x->tokens[end] ? agreement(x, q) : 0;
            if (a > *agree) {
                *agree = a;
                best = q;
            }
        }
    return best;
}

int rp_spec_lookup_follow(rp_spec_lookup *x, int min_ngram, int max_tokens, int32_t *out, int *match_len)
{
    if (match_len)
        *match_len = 0;
    int32_t end = x->len - 1;
    if (max_tokens <= 0 || end < 1)
        return 0;
    if (x->src >= 0 && end - x->at > COPY_DROP)
        x->src = -1;
    int agree;
    int32_t best = copy_candidate(x, &agree), j;
    bool from_copy = best >= 0;
    int g = longest_match(x, min_ngram < 1 ? 1 : min_ngram, &j);
    // the longest n-gram's earlier occurrences, most recent first, against the pointer
    for (int c = 0; g && c < CHAIN_MAX && j >= g - 1; c++) {
        int a = agreement(x, j);
        if (a > agree) {
            agree = a;
            best = j;
            from_copy = false;
        }
        j = x->prev[(size_t)j * x->n_max + g - 1];
    }
    if (best < 0)
        return 0;
    // The pointer moves with the copy, or to a place that agrees at length (a copy
    // under way); a short match elsewhere (right after an edit) leaves it where the
    // copy broke, for the resync.
    if (from_copy || agree >= COPY_MIN) {
        x->src = best;
        x->at = end;
    }
    if (match_len)
        *match_len = agree;
    return continuation(x, best, max_tokens, out);
}

/*
 * json_match.c - the byte-level JSON-object recognizer, the per-step token mask
 * and the request's position in the grammar.
 *
 * The recognizer (json_step) is a pushdown automaton for exactly one RFC 8259
 * object: the stack is one bit per open container, so the whole state is a
 * 16-byte struct. Beyond the RFC it refuses what would make the text invalid
 * for common decoders or let a model stall: strings must be valid UTF-8 (a
 * multi-byte character may span tokens: the state holds how many bytes are
 * still due and their range), \u escapes must pair surrogates, containers nest
 * at most JSON_MAX_DEPTH deep, and at most JSON_MAX_WS whitespace bytes follow
 * each other between tokens (leading whitespace before '{' and trailing
 * whitespace after the final '}' included). A number has no terminator of its
 * own: the byte after it (',', ']', '}' or whitespace) ends it and is then
 * read as that byte.
 *
 * The mask walks the vocab's trie (grammar_int.h) from the current state: a
 * byte the state rejects cuts off every token below it, and inside a string,
 * a node whose remaining tokens are all plain text is allowed whole without
 * descending. The walk yields the allowed tokens as runs in trie order; then
 * either the few allowed logits are kept aside while the whole row is set to
 * -inf, or, when most are allowed, only the gaps between the runs are. End-
 * of-generation tokens are allowed once the object is complete, or when
 * nothing else could follow (a vocabulary that cannot continue), so a step
 * never has no token left.
 */
#include <math.h>

#include "grammar_int.h"

/* ---- recognizer ------------------------------------------------------------- */

static const char *const literals[3] = {"true", "false", "null"};
static const uint8_t literal_len[3] = {4, 5, 4};

void json_state_init(json_state *s)
{
    memset(s, 0, sizeof(*s));
    s->mode = JM_START;
}

static inline bool is_ws(uint8_t c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline int hex_val(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static inline bool push(json_state *s, bool object)
{
    if (s->depth >= JSON_MAX_DEPTH)
        return false;
    uint64_t bit = (uint64_t)1 << s->depth;
    s->stack = object ? s->stack | bit : s->stack & ~bit;
    s->depth++;
    s->mode = object ? JM_OBJ_FIRST : JM_ARR_FIRST;
    return true;
}

static inline bool top_is_object(const json_state *s)
{
    return (s->stack >> (s->depth - 1)) & 1;
}

static inline void pop(json_state *s)
{
    s->depth--;
    s->mode = s->depth ? JM_AFTER : JM_DONE;
}

// The first byte of a multi-byte character (Unicode table 3-7 of well-formed sequences).
static inline bool utf8_lead(json_state *s, uint8_t c)
{
    uint8_t n, lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 2;
        if (c == 0xE0)
            lo = 0xA0; // no overlong forms
        else if (c == 0xED)
            hi = 0x9F; // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 3;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F; // nothing above U+10FFFF
    } else {
        return false;
    }
    s->mode = JM_STR_UTF8;
    s->aux = n;
    s->lo = lo;
    s->hi = hi;
    return true;
}

// A value starts with c (modes JM_VALUE and JM_ARR_FIRST).
static inline bool value_start(json_state *s, uint8_t c)
{
    switch (c) {
    case '"':
        s->mode = JM_STR;
        s->flags = 0;
        return true;
    case '{':
        return push(s, true);
    case '[':
        return push(s, false);
    case '-':
        s->mode = JM_NUM_MINUS;
        return true;
    case '0':
        s->mode = JM_NUM_ZERO;
        return true;
    case 't':
    case 'f':
    case 'n':
        s->mode = JM_LIT;
        s->aux = c == 't' ? 0 : c == 'f' ? 1 : 2;
        s->lo = 1;
        return true;
    default:
        if (c >= '1' && c <= '9') {
            s->mode = JM_NUM_INT;
            return true;
        }
        return false;
    }
}

// json_step's body, inlined into the mask's walk.
static inline bool step(json_state *s, uint8_t c)
{
    switch (s->mode) {
    case JM_STR:
        if (c == '"') {
            s->mode = (s->flags & JF_KEY) ? JM_COLON : JM_AFTER;
            s->flags = 0;
            s->ws = 0;
            return true;
        }
        if (c == '\\') {
            s->mode = JM_STR_ESC;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c < 0x80)
            return true;
        return utf8_lead(s, c);
    case JM_STR_UTF8:
        if (c < s->lo || c > s->hi)
            return false;
        s->lo = 0x80;
        s->hi = 0xBF;
        if (--s->aux == 0)
            s->mode = JM_STR;
        return true;
    case JM_STR_ESC:
        switch (c) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
            s->mode = JM_STR;
            return true;
        case 'u':
            s->mode = JM_STR_HEX;
            s->aux = 0;
            return true;
        default:
            return false;
        }
    case JM_STR_HEX: {
        int h = hex_val(c);
        if (h < 0)
            return false;
        if (s->aux == 0) {
            if (s->flags & JF_LOW) {
                if (h != 0xD)
                    return false;
            } else if (h == 0xD) {
                s->flags |= JF_D0;
            }
        } else if (s->aux == 1) {
            if (s->flags & JF_LOW) {
                if (h < 0xC)
                    return false;
            } else if (s->flags & JF_D0) {
                if (h >= 0xC)
                    return false; // a low surrogate with no high one before it
                if (h >= 0x8)
                    s->flags |= JF_HIGH;
            }
        } else if (s->aux == 3) {
            if (s->flags & JF_HIGH) {
                s->mode = JM_STR_LOW_BS;
                s->flags = (uint8_t)((s->flags & JF_KEY) | JF_LOW);
            } else {
                s->mode = JM_STR;
                s->flags &= JF_KEY;
            }
            return true;
        }
        s->aux++;
        return true;
    }
    case JM_STR_LOW_BS:
        if (c != '\\')
            return false;
        s->mode = JM_STR_LOW_U;
        return true;
    case JM_STR_LOW_U:
        if (c != 'u')
            return false;
        s->mode = JM_STR_HEX;
        s->aux = 0;
        return true;
    case JM_LIT:
        if (c != (uint8_t)literals[s->aux][s->lo])
            return false;
        if (++s->lo == literal_len[s->aux]) {
            s->mode = JM_AFTER;
            s->ws = 0;
        }
        return true;
    case JM_NUM_MINUS:
        if (c == '0')
            s->mode = JM_NUM_ZERO;
        else if (c >= '1' && c <= '9')
            s->mode = JM_NUM_INT;
        else
            return false;
        return true;
    case JM_NUM_INT:
        if (c >= '0' && c <= '9')
            return true;
        /* fall through */
    case JM_NUM_ZERO:
        if (c == '.') {
            s->mode = JM_NUM_DOT;
            return true;
        }
        if (c == 'e' || c == 'E') {
            s->mode = JM_NUM_E;
            return true;
        }
        goto number_end;
    case JM_NUM_DOT:
        if (c < '0' || c > '9')
            return false;
        s->mode = JM_NUM_FRAC;
        return true;
    case JM_NUM_FRAC:
        if (c >= '0' && c <= '9')
            return true;
        if (c == 'e' || c == 'E') {
            s->mode = JM_NUM_E;
            return true;
        }
        goto number_end;
    case JM_NUM_E:
        if (c == '+' || c == '-') {
            s->mode = JM_NUM_ESIGN;
            return true;
        }
        /* fall through */
    case JM_NUM_ESIGN:
        if (c < '0' || c > '9')
            return false;
        s->mode = JM_NUM_EXP;
        return true;
    case JM_NUM_EXP:
        if (c >= '0' && c <= '9')
            return true;
        goto number_end;
    default:
        break;
    }

structural:
    // Structural modes, and JM_DONE (trailing whitespace only): whitespace is counted, anything else resets the count.
    if (is_ws(c)) {
        if (s->ws >= JSON_MAX_WS)
            return false;
        s->ws++;
        return true;
    }
    s->ws = 0;
    switch (s->mode) {
    case JM_START:
        return c == '{' && push(s, true);
    case JM_OBJ_FIRST:
        if (c == '}') {
            pop(s);
            return true;
        }
        /* fall through */
    case JM_OBJ_KEY:
        if (c != '"')
            return false;
        s->mode = JM_STR;
        s->flags = JF_KEY;
        return true;
    case JM_COLON:
        if (c != ':')
            return false;
        s->mode = JM_VALUE;
        return true;
    case JM_ARR_FIRST:
        if (c == ']') {
            pop(s);
            return true;
        }
        /* fall through */
    case JM_VALUE:
        return value_start(s, c);
    case JM_AFTER:
        if (c == ',') {
            s->mode = top_is_object(s) ? JM_OBJ_KEY : JM_VALUE;
            return true;
        }
        if (c == (top_is_object(s) ? '}' : ']')) {
            pop(s);
            return true;
        }
        return false;
    default:
        return false;
    }

number_end:
    // The number is complete; c is the next byte after a value.
    s->mode = JM_AFTER;
    s->ws = 0;
    goto structural;
}

bool json_step(json_state *s, uint8_t c)
{
    return step(s, c);
}

bool json_feed(json_state *s, const uint8_t *p, size_t n)
{
    json_state t = *s;
    for (size_t i = 0; i < n; i++)
        if (!step(&t, p[i]))
            return false;
    *s = t;
    return true;
}

/* ---- matching ------------------------------------------------------------- */

// A run [a, b) of candidates in trie order.
typedef struct cand_range {
    uint32_t a, b;
} cand_range;

// Threads: one at a time (the mask writes the scratch arrays).
struct rp_json_match {
    const rp_json_vocab *v;
    json_state state;
    // scratch of the mask
    json_state *states; // (v->max_len + 1) the walk's state per depth
    cand_range *ranges; // (v->n_cand / 2 + 1) allowed candidates, disjoint and not touching
    float *saved;       // (v->n_cand / 2 + 1) allowed logits while the row is cleared
    float *eog_logit;   // (v->n_eog + 1) end-of-generation logits while masking
};

rp_status rp_json_match_create(const rp_json_vocab *v, rp_json_match **out)
{
    *out = NULL;
    rp_json_match *m = rp_calloc(1, sizeof(*m));
    if (!m)
        return RP_ERR(RP_ERR_NOMEM, "out of memory for a JSON matcher");
    m->v = v;
    json_state_init(&m->state);
    size_t half = (size_t)v->n_cand / 2 + 1;
    m->states = rp_malloc(((size_t)v->max_len + 1) * sizeof(*m->states));
    m->ranges = rp_malloc(half * sizeof(*m->ranges));
    m->saved = rp_malloc(half * sizeof(*m->saved));
    m->eog_logit = rp_malloc(((size_t)v->n_eog + 1) * sizeof(*m->eog_logit));
    if (!m->states || !m->ranges || !m->saved || !m->eog_logit) {
        rp_json_match_destroy(m);
        return RP_ERR(RP_ERR_NOMEM, "out of memory for a JSON matcher (%d tokens)", (int)v->n_cand);
    }
    *out = m;
    return RP_OK;
}

void rp_json_match_destroy(rp_json_match *m)
{
    if (!m)
        return;
    rp_free(m->states);
    rp_free(m->ranges);
    rp_free(m->saved);
    rp_free(m->eog_logit);
    rp_free(m);
}

const json_state *json_match_state(const rp_json_match *m)
{
    return &m->state;
}

void rp_json_match_copy(rp_json_match *dst, const rp_json_match *src)
{
    RP_ASSERT(dst->v == src->v);
    dst->state = src->state;
}

bool rp_json_match_done(const rp_json_match *m)
{
    return json_done(&m->state);
}

static inline void add_range(cand_range *r, size_t *n, uint32_t a, uint32_t b)
{
    if (*n && r[*n - 1].b == a)
        r[*n - 1].b = b;
    else
        r[(*n)++] = (cand_range){a, b};
}

// Lists in m->ranges the candidates whose bytes continue the grammar from the
// current state; returns how many there are. (The ranges are scratch: the
// pointer is const, the memory is the match's own.)
static size_t walk(const rp_json_match *m, size_t *n_ranges)
{
    const rp_json_vocab *v = m->v;
    cand_range *ranges = m->ranges;
    json_state *states = m->states;
    const uint8_t *byte = v->byte, *plain = v->plain;
    const uint16_t *depth = v->depth;
    const uint32_t *end = v->end, *first = v->first;
    size_t n_allowed = 0, nr = 0;

    *n_ranges = 0;
    if (v->n_cand == 0)
        return 0;
    if (m->state.mode == JM_STR && plain[0]) { // every token is plain text
        ranges[0] = (cand_range){0, (uint32_t)v->n_cand};
        *n_ranges = 1;
        return (size_t)v->n_cand;
    }
    states[0] = m->state;
    for (uint32_t k = 1; k < (uint32_t)v->n_node;) {
        json_state s = states[depth[k] - 1];
        if (!step(&s, byte[k])) {
            k = end[k];
            continue;
        }
        if (s.mode == JM_STR && plain[k]) { // the whole subtree stays inside the string
            uint32_t a = first[k], b = first[end[k]];
            add_range(ranges, &nr, a, b);
            n_allowed += b - a;
            k = end[k];
            continue;
        }
        states[depth[k]] = s;
        uint32_t a = first[k], b = first[k + 1];
        if (b > a) {
            add_range(ranges, &nr, a, b);
            n_allowed += b - a;
        }
        k++;
    }
    *n_ranges = nr;
    return n_allowed;
}

void rp_json_match_mask(const rp_json_match *m, float *logits, int32_t n_vocab)
{
    const rp_json_vocab *v = m->v;
    const int32_t *order = v->order;
    size_t nr;
    size_t n_allowed = walk(m, &nr);
    const cand_range *r = m->ranges;
    if (n_vocab < v->n_tok) { // the model's row is shorter than the vocabulary: count what is inside
        n_allowed = 0;
        for (size_t i = 0; i < nr; i++)
            for (uint32_t k = r[i].a; k < r[i].b; k++)
                n_allowed += order[k] < n_vocab;
    }
    int32_t n_eog = 0;
    float *eog_logit = m->eog_logit;
    for (int32_t i = 0; i < v->n_eog; i++) {
        if (v->eog[i] < n_vocab) {
            eog_logit[i] = logits[v->eog[i]];
            n_eog++;
        }
    }
    if (n_allowed == 0 && n_eog == 0)
        return; // nothing can come next and no token ends: mask nothing rather than everything

    if (n_allowed * 2 <= (size_t)v->n_cand) {
        // Few allowed: keep their logits, clear the row, put them back.
        float *saved = m->saved;
        size_t j = 0;
        for (size_t i = 0; i < nr; i++)
            for (uint32_t k = r[i].a; k < r[i].b; k++)
                if (order[k] < n_vocab)
                    saved[j++] = logits[order[k]];
        for (int32_t id = 0; id < n_vocab; id++)
            logits[id] = -INFINITY;
        j = 0;
        for (size_t i = 0; i < nr; i++)
            for (uint32_t k = r[i].a; k < r[i].b; k++)
                if (order[k] < n_vocab)
                    logits[order[k]] = saved[j++];
    } else {
        // Many allowed: clear the gaps between the ranges, then every non-candidate.
        uint32_t k = 0;
        for (size_t i = 0; i <= nr; i++) {
            uint32_t gap_end = i < nr ? r[i].a : (uint32_t)v->n_cand;
            for (; k < gap_end; k++)
                if (order[k] < n_vocab)
                    logits[order[k]] = -INFINITY;
            if (i < nr)
                k = r[i].b;
        }
        for (int32_t i = 0; i < v->n_other; i++)
            if (v->other[i] < n_vocab)
                logits[v->other[i]] = -INFINITY;
        for (int32_t id = v->n_tok; id < n_vocab; id++)
            logits[id] = -INFINITY;
    }
    // End-of-generation tokens: open once the object is complete or when nothing else can come.
    bool open = json_done(&m->state) || n_allowed == 0;
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] < n_vocab)
            logits[v->eog[i]] = open ? eog_logit[i] : -INFINITY;
}

rp_status rp_json_match_accept(rp_json_match *m, int32_t id)
{
    const rp_json_vocab *v = m->v;
    if (id < 0 || id >= v->n_tok)
        return RP_ERR(RP_ERR_INVALID, "token %d is outside the vocabulary (%d tokens)", (int)id, (int)v->n_tok);
    switch (v->kind[id]) {
    case JT_EOG: {
        // Allowed once the object is complete, or when the mask had to leave it as the only way on.
        size_t nr;
        if (json_done(&m->state) || walk(m, &nr) == 0)
            return RP_OK;
        return RP_ERR(RP_ERR_INVALID, "end-of-generation token %d before the JSON object is complete", (int)id);
    }
    case JT_CAND:
        if (json_feed(&m->state, v->blob + v->off[id], v->off[id + 1] - v->off[id]))
            return RP_OK;
        return RP_ERR(RP_ERR_INVALID, "token %d does not continue the JSON object", (int)id);
    default:
        return RP_ERR(RP_ERR_INVALID, "token %d (special, unused or empty) cannot appear in JSON output", (int)id);
    }
}

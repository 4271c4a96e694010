/*
 * json_match.c - the byte-level JSON lexer, the schema matcher on top of it,
 * the per-step token mask and the request's position in the grammar.
 *
 * json_object mode is the schema "any object" (json_schema_any_object): one
 * matcher serves both. The schema layer (mstep) reads structure itself (keys
 * in schema order, array counts, literal sets, bounded numbers, pattern DFAs)
 * and hands strings, numbers and unconstrained values to the lexer below.
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
 * The schema layer never lets the text reach a state with no way to finish:
 * keys only in the window the schema order leaves (no required one skipped),
 * '}' and ']' only once required properties / minItems are met, a bounded
 * number's digit only if some completion stays in bounds, a container only if
 * the fewest levels its value needs still fit in SC_MAX_DEPTH frames, pattern
 * DFAs with the states that cannot accept cut off.
 *
 * The mask walks the vocab's trie (grammar_int.h) from the current state: a
 * byte the state rejects cuts off every token below it, and inside a string,
 * a node whose remaining tokens are all plain text is allowed whole without
 * descending (inside a pattern's string: all of categories that keep the DFA
 * state); a plain ASCII byte inside a free string shares its parent's state
 * instead of copying it. The walk yields the allowed tokens as runs in trie order; then
 * either the few allowed logits are kept aside while the whole row is set to
 * -inf, or, when most are allowed, only the gaps between the runs are. End-
 * of-generation tokens are allowed once the value is complete, or when
 * nothing else could follow (a vocabulary that cannot continue), so a step
 * never has no token left.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

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

// One more whitespace byte in a run (at most JSON_MAX_WS).
static inline bool ws_step(uint8_t *ws)
{
    if (*ws >= JSON_MAX_WS)
        return false;
    (*ws)++;
    return true;
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
    if (is_ws(c))
        return ws_step(&s->ws);
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

/* ---- the schema matcher ------------------------------------------------------------ */

// A complete number that c does not continue ends before c.
static inline bool num_complete(const json_state *x)
{
    return x->mode == JM_NUM_ZERO || x->mode == JM_NUM_INT || x->mode == JM_NUM_FRAC || x->mode == JM_NUM_EXP;
}

static inline bool num_more(const json_state *x, uint8_t c)
{
    bool digit = c >= '0' && c <= '9';
    switch (x->mode) {
    case JM_NUM_ZERO: return c == '.' || c == 'e' || c == 'E';
    case JM_NUM_INT: return digit || c == '.' || c == 'e' || c == 'E';
    case JM_NUM_FRAC: return digit || c == 'e' || c == 'E';
    case JM_NUM_EXP: return digit;
    default: return true; // incomplete: c must continue it
    }
}

static inline bool byte_in(const uint64_t *b, uint8_t c)
{
    return (b[c >> 6] >> (c & 63)) & 1;
}

// The leaf of node that a value starting with c takes, or SC_NONE.
static inline uint16_t resolve(const rp_json_schema *sc, uint16_t node, uint8_t c)
{
    for (int hops = 0; hops < 64; hops++) {
        const sc_node *n = &sc->nodes[node];
        if (!byte_in(n->first, c))
            return SC_NONE;
        if (n->kind != SK_UNION)
            return node;
        uint16_t next = SC_NONE;
        for (uint32_t a = 0; a < n->n && next == SC_NONE; a++)
            if (byte_in(sc->nodes[sc->alts[n->first_prop + a]].first, c))
                next = sc->alts[n->first_prop + a];
        node = next;
    }
    return SC_NONE;
}

// A value of node may start with open containers in use.
static inline bool fits(const rp_json_schema *sc, const match_state *s, uint16_t node)
{
    return s->depth + (unsigned)sc->nodes[node].depth <= SC_MAX_DEPTH;
}

// Narrows the candidates [lo, hi) of set (sharing their first off bytes) to those whose byte off is c.
static inline bool narrow(const rp_json_schema *sc, const sc_strs *set, uint16_t *lo, uint16_t *hi, uint16_t off,
                          uint8_t c)
{
    const sc_str *e = sc->strs + set->first;
    const uint8_t *blob = sc->blob;
    uint32_t a = *lo, b = *hi;
    if (a < b && e[a].len == off) // the one that ends here sorts first
        a++;
    uint32_t l = a, r = b;
    while (l < r) {
        uint32_t m = (l + r) / 2;
        if (blob[e[m].off + off] < c)
            l = m + 1;
        else
            r = m;
    }
    uint32_t start = l;
    r = b;
    while (l < r) {
        uint32_t m = (l + r) / 2;
        if (blob[e[m].off + off] <= c)
            l = m + 1;
        else
            r = m;
    }
    if (start == l)
        return false;
    *lo = (uint16_t)start;
    *hi = (uint16_t)l;
    return true;
}

// Property index val may come next in the object on top (keys go in schema order, no required one skipped).
static inline bool key_ok(const rp_json_schema *sc, const match_state *s, uint16_t val)
{
    const sc_frame *f = &s->f[s->depth - 1];
    const sc_node *o = &sc->nodes[f->node];
    return val >= f->pos && val <= sc->next_req[o->req + f->pos] && val < o->n &&
           fits(sc, s, sc->props[o->first_prop + val].node);
}

static inline bool keys_ok(const rp_json_schema *sc, const match_state *s, uint16_t lo, uint16_t hi)
{
    const sc_frame *f = &s->f[s->depth - 1];
    const sc_str *e = sc->strs + sc->sets[sc->nodes[f->node].set].first;
    for (uint32_t i = lo; i < hi; i++)
        if (key_ok(sc, s, e[i].val))
            return true;
    return false;
}

static inline bool any_key(const rp_json_schema *sc, const match_state *s)
{
    const sc_node *o = &sc->nodes[s->f[s->depth - 1].node];
    return keys_ok(sc, s, 0, (uint16_t)sc->sets[o->set].n);
}

// [a, b] and [c, d] (each end open or closed) meet.
static inline bool meet(double a, bool ao, double b, bool bo, double c, bool co, double d, bool dop)
{
    double l = a > c ? a : c, r = b < d ? b : d;
    bool lo = a > c ? ao : c > a ? co : (ao || co);
    bool ro = b < d ? bo : d < b ? dop : (bo || dop);
    return l < r || (l == r && !lo && !ro);
}

// Some completion of the number read so far is within the node's bounds.
static bool num_live(const sc_node *n, const match_state *s)
{
    double lo = (n->flags & SF_MIN) ? n->num_min : -INFINITY, hi = (n->flags & SF_MAX) ? n->num_max : INFINITY;
    bool xlo = n->flags & SF_XMIN, xhi = n->flags & SF_XMAX, integer = n->kind == SK_INT;
    if (s->lex.mode == JM_NUM_MINUS) // any negative number
        return meet(-INFINITY, true, integer ? -1 : 0, !integer, lo, xlo, hi, xhi);
    double v = (double)s->mant;
    for (int k = 0; k <= 17; k++) {
        double a, b;
        bool bopen;
        if (s->frac >= 0) { // after '.': [m / 10^f, (m + 1) / 10^f)
            double p = pow(10, s->frac);
            a = v / p, b = a + 1 / p, bopen = true; // (v + 1 would round to v past 2^53)
            if (b <= a)
                b = nextafter(a, INFINITY); // past double precision: some neighbour still reads as a
        } else if (s->lex.mode == JM_NUM_ZERO) { // a leading zero: 0, or 0.x
            a = 0, b = integer ? 0 : 1, bopen = !integer;
        } else { // k more integer digits, then (numbers) a fraction
            double p = pow(10, k);
            a = v * p, b = integer ? (v + 1) * p - 1 : (v + 1) * p, bopen = !integer;
        }
        bool ok = s->neg ? meet(-b, bopen, -a, false, lo, xlo, hi, xhi) : meet(a, false, b, bopen, lo, xlo, hi, xhi);
        if (ok)
            return true;
        if (s->frac >= 0 || s->lex.mode == JM_NUM_ZERO || s->ndig + k >= 17)
            return false;
    }
    return false;
}

// The complete number read so far is within the bounds (compared as the double it reads as, like a validator).
static bool num_in_bounds(const sc_node *n, const match_state *s)
{
    char text[48];
    snprintf(text, sizeof(text), "%s%llde-%d", s->neg ? "-" : "", (long long)s->mant, s->frac > 0 ? s->frac : 0);
    double x = strtod(text, NULL);
    if ((n->flags & SF_MIN) && (x < n->num_min || (x == n->num_min && (n->flags & SF_XMIN))))
        return false;
    if ((n->flags & SF_MAX) && (x > n->num_max || (x == n->num_max && (n->flags & SF_XMAX))))
        return false;
    return true;
}

static inline void value_done(match_state *s)
{
    s->ws = 0;
    if (s->depth == 0) {
        s->mode = SM_DONE;
        s->off = 0; // suffix bytes read
        return;
    }
    s->mode = SM_AFTER;
}

// A value of node starts with byte c.
static inline bool start_value(const rp_json_schema *sc, match_state *s, uint16_t node, uint8_t c)
{
    node = resolve(sc, node, c);
    if (node == SC_NONE)
        return false;
    const sc_node *n = &sc->nodes[node];
    s->node = node;
    switch (n->kind) {
    case SK_OBJ:
        if (!fits(sc, s, node))
            return false;
        if (n->flags & SF_OBJ_FREE)
            goto free_value;
        s->f[s->depth++] = (sc_frame){node, 0};
        s->mode = SM_OBJ_FIRST;
        return true;
    case SK_ARR:
        if (!fits(sc, s, node))
            return false;
        s->f[s->depth++] = (sc_frame){node, 0};
        s->mode = SM_ARR_FIRST;
        return true;
    case SK_STR:
        s->mode = SM_STR;
        s->lex.mode = JM_STR;
        s->lex.flags = 0;
        s->off = 0;
        return true;
    case SK_NUM:
    case SK_INT:
        s->mode = SM_NUM;
        s->lex.mode = JM_VALUE;
        s->lex.depth = 0;
        s->mant = 0;
        s->ndig = 0;
        s->frac = -1;
        s->neg = c == '-';
        if (!value_start(&s->lex, c))
            return false;
        if (c >= '0' && c <= '9')
            s->mant = c - '0', s->ndig = c != '0';
        return !(n->flags & (SF_MIN | SF_MAX)) || num_live(n, s);
    case SK_LIT:
        s->mode = SM_LIT;
        s->lo = 0;
        s->hi = (uint16_t)sc->sets[n->set].n;
        s->off = 0;
        if (!narrow(sc, &sc->sets[n->set], &s->lo, &s->hi, 0, c))
            return false;
        s->off = 1;
        return true;
    default: // SK_ANY
    free_value:
        s->mode = SM_FREE;
        memset(&s->lex, 0, sizeof(s->lex));
        s->lex.mode = JM_VALUE;
        return value_start(&s->lex, c);
    }
}

static inline bool mstep(const rp_json_schema *sc, match_state *s, uint8_t c)
{
again:
    switch (s->mode) {
    case SM_FREE:
        if (s->lex.depth == 0 && num_complete(&s->lex) && !num_more(&s->lex, c)) {
            value_done(s);
            goto again;
        }
        if (!step(&s->lex, c))
            return false;
        if (s->lex.depth == 0 && (s->lex.mode == JM_AFTER || s->lex.mode == JM_DONE))
            value_done(s);
        return true;
    case SM_STR: {
        int32_t dfa = sc->nodes[s->node].dfa;
        if (s->lex.mode == JM_STR && c == '"') {
            if (dfa >= 0 && !sc->dfas[dfa].accept[s->off])
                return false;
            value_done(s);
            return true;
        }
        if (dfa < 0)
            return step(&s->lex, c);
        if (c == '\\' || !step(&s->lex, c))
            return false;
        uint16_t nx = sc->dfas[dfa].next[(size_t)s->off * 256 + c];
        if (nx == RX_DEAD)
            return false;
        s->off = nx;
        return true;
    }
    case SM_KEY: {
        const sc_strs *set = &sc->sets[sc->nodes[s->f[s->depth - 1].node].set];
        if (s->lex.mode == JM_STR && c == '"') {
            const sc_str *e = sc->strs + set->first + s->lo;
            if (s->lo >= s->hi || e->len != s->off || !key_ok(sc, s, e->val))
                return false;
            sc_frame *f = &s->f[s->depth - 1];
            f->pos = (uint16_t)(e->val + 1);
            s->node = sc->props[sc->nodes[f->node].first_prop + e->val].node;
            s->mode = SM_COLON;
            s->ws = 0;
            return true;
        }
        if (!step(&s->lex, c) || !narrow(sc, set, &s->lo, &s->hi, s->off, c))
            return false;
        s->off++;
        return keys_ok(sc, s, s->lo, s->hi);
    }
    case SM_LIT: {
        const sc_strs *set = &sc->sets[sc->nodes[s->node].set];
        if (narrow(sc, set, &s->lo, &s->hi, s->off, c)) {
            s->off++;
            return true;
        }
        if (sc->strs[set->first + s->lo].len != s->off)
            return false;
        value_done(s);
        goto again;
    }
    case SM_NUM: {
        const sc_node *n = &sc->nodes[s->node];
        bool bounded = n->flags & (SF_MIN | SF_MAX);
        if (num_complete(&s->lex) && !num_more(&s->lex, c)) {
            if (bounded && !num_in_bounds(n, s))
                return false;
            value_done(s);
            goto again;
        }
        bool e = c == 'e' || c == 'E';
        if ((n->kind == SK_INT && (c == '.' || e)) || (bounded && e))
            return false;
        if (!step(&s->lex, c))
            return false;
        if (!bounded)
            return true;
        if (c == '.') {
            s->frac = 0;
        } else if (c >= '0' && c <= '9') {
            if (s->ndig >= 18 || s->frac >= 18)
                return false;
            s->mant = s->mant * 10 + (c - '0');
            s->ndig += s->mant != 0;
            if (s->frac >= 0)
                s->frac++;
        }
        return num_live(n, s);
    }
    case SM_DONE:
        if (!sc->suffix_len)
            break; // whitespace only
        if (s->off < sc->suffix_len && c == (uint8_t)sc->suffix[s->off]) {
            s->off++;
            return true;
        }
        return s->off == 0 && is_ws(c) && ws_step(&s->ws); // whitespace before the suffix
    default:
        break;
    }
    // Structural modes: bounded whitespace, then the byte.
    if (is_ws(c))
        return ws_step(&s->ws);
    s->ws = 0;
    switch (s->mode) {
    case SM_VALUE:
        return start_value(sc, s, s->node, c);
    case SM_OBJ_FIRST:
    case SM_OBJ_KEY: {
        const sc_node *o = &sc->nodes[s->f[s->depth - 1].node];
        if (c == '}' && s->mode == SM_OBJ_FIRST) {
            if (sc->next_req[o->req] != o->n)
                return false;
            s->depth--;
            value_done(s);
            return true;
        }
        if (c != '"' || !any_key(sc, s))
            return false;
        s->mode = SM_KEY;
        s->lo = 0;
        s->hi = (uint16_t)sc->sets[o->set].n;
        s->off = 0;
        s->lex.mode = JM_STR;
        s->lex.flags = JF_KEY;
        return true;
    }
    case SM_COLON:
        if (c != ':')
            return false;
        s->mode = SM_VALUE;
        return true;
    case SM_ARR_FIRST: {
        const sc_node *a = &sc->nodes[s->f[s->depth - 1].node];
        if (c == ']') {
            if (a->min_items > 0)
                return false;
            s->depth--;
            value_done(s);
            return true;
        }
        if (a->max_items == 0 || !fits(sc, s, a->items))
            return false;
        s->f[s->depth - 1].pos = 1;
        return start_value(sc, s, a->items, c);
    }
    case SM_AFTER: {
        sc_frame *f = &s->f[s->depth - 1];
        const sc_node *x = &sc->nodes[f->node];
        if (x->kind == SK_OBJ) {
            if (c == ',') {
                if (!any_key(sc, s))
                    return false;
                s->mode = SM_OBJ_KEY;
                return true;
            }
            if (c != '}' || sc->next_req[x->req + f->pos] != x->n)
                return false;
        } else {
            if (c == ',') {
                if (f->pos >= x->max_items || f->pos == SC_NONE || !fits(sc, s, x->items))
                    return false;
                f->pos++;
                s->mode = SM_VALUE;
                s->node = x->items;
                return true;
            }
            if (c != ']' || f->pos < x->min_items)
                return false;
        }
        s->depth--;
        value_done(s);
        return true;
    }
    default: // SM_DONE: trailing whitespace only
        return false;
    }
}

void match_state_init(match_state *s, const rp_json_schema *sc)
{
    memset(s, 0, sizeof(*s));
    json_state_init(&s->lex);
    s->mode = SM_VALUE;
    s->node = sc->root;
}

bool match_step(const rp_json_schema *sc, match_state *s, uint8_t c)
{
    return mstep(sc, s, c);
}

bool match_feed(const rp_json_schema *sc, match_state *s, const uint8_t *p, size_t n)
{
    match_state t = *s;
    for (size_t i = 0; i < n; i++)
        if (!mstep(sc, &t, p[i]))
            return false;
    *s = t;
    return true;
}

bool match_complete(const rp_json_schema *sc, const match_state *s)
{
    if (sc->suffix_len)
        return s->mode == SM_DONE && s->off == sc->suffix_len;
    if (s->mode == SM_DONE)
        return true;
    if (s->depth != 0)
        return false;
    switch (s->mode) {
    case SM_FREE: return s->lex.depth == 0 && num_complete(&s->lex);
    case SM_NUM: {
        const sc_node *n = &sc->nodes[s->node];
        return num_complete(&s->lex) && (!(n->flags & (SF_MIN | SF_MAX)) || num_in_bounds(n, s));
    }
    case SM_LIT: return sc->strs[sc->sets[sc->nodes[s->node].set].first + s->lo].len == s->off;
    default: return false;
    }
}

// Inside a string any plain text may continue (a free string: no pattern).
static inline bool in_plain_string(const rp_json_schema *sc, const match_state *s)
{
    if (s->lex.mode != JM_STR)
        return false;
    return s->mode == SM_FREE || (s->mode == SM_STR && sc->nodes[s->node].dfa < 0);
}

// Inside a pattern's string at a state that stays itself on every byte category in cats.
static inline bool in_loop_string(const rp_json_schema *sc, const match_state *s, uint8_t cats)
{
    if (s->mode != SM_STR || s->lex.mode != JM_STR)
        return false;
    int32_t dfa = sc->nodes[s->node].dfa;
    return dfa >= 0 && (cats & ~sc->dfas[dfa].loop[s->off]) == 0;
}

/* ---- matching ------------------------------------------------------------- */

// A run [a, b) of candidates in trie order.
typedef struct cand_range {
    uint32_t a, b;
} cand_range;

// Threads: one at a time (the mask writes the scratch arrays).
struct rp_json_match {
    const rp_json_vocab *v;
    const rp_json_schema *sc; // the grammar now (after a copy: src's, borrowed)
    rp_json_schema *own;      // the reference taken at create
    match_state state;
    // scratch of the mask
    match_state *states; // (v->max_len + 1) the walk's state per depth
    const match_state **at; // (v->max_len + 1) the state in force per depth (states[d] or an ancestor's)
    json_state *lex_states; // (v->max_len + 1) walk_free's state per depth
    cand_range *ranges;  // (v->n_cand / 2 + 1) allowed candidates, disjoint and not touching
    float *saved;        // (v->n_cand / 2 + 1) allowed logits while the row is cleared
    float *eog_logit;    // (v->n_eog + 1) end-of-generation logits while masking
};

rp_status rp_json_match_create(const rp_json_vocab *v, const rp_json_schema *schema, rp_json_match **out)
{
    *out = NULL;
    rp_json_match *m = rp_calloc(1, sizeof(*m));
    if (!m)
        return RP_ERR(RP_ERR_NOMEM, "out of memory for a JSON matcher");
    m->v = v;
    m->own = rp_json_schema_ref(schema ? schema : json_schema_any_object());
    m->sc = m->own;
    match_state_init(&m->state, m->sc);
    size_t half = (size_t)v->n_cand / 2 + 1;
    m->states = rp_malloc(((size_t)v->max_len + 1) * sizeof(*m->states));
    m->at = rp_malloc(((size_t)v->max_len + 1) * sizeof(*m->at));
    m->lex_states = rp_malloc(((size_t)v->max_len + 1) * sizeof(*m->lex_states));
    m->ranges = rp_malloc(half * sizeof(*m->ranges));
    m->saved = rp_malloc(half * sizeof(*m->saved));
    m->eog_logit = rp_malloc(((size_t)v->n_eog + 1) * sizeof(*m->eog_logit));
    if (!m->states || !m->at || !m->lex_states || !m->ranges || !m->saved || !m->eog_logit) {
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
    rp_json_schema_unref(m->own);
    rp_free(m->states);
    rp_free(m->at);
    rp_free(m->lex_states);
    rp_free(m->ranges);
    rp_free(m->saved);
    rp_free(m->eog_logit);
    rp_free(m);
}

const match_state *json_match_state(const rp_json_match *m)
{
    return &m->state;
}

const rp_json_schema *json_match_schema(const rp_json_match *m)
{
    return m->sc;
}

void rp_json_match_copy(rp_json_match *dst, const rp_json_match *src)
{
    RP_ASSERT(dst->v == src->v);
    dst->sc = src->sc;
    dst->state = src->state;
}

bool rp_json_match_done(const rp_json_match *m)
{
    return match_complete(m->sc, &m->state);
}

// dst = src, copying only the frames in use (those above are never read before a push
// writes them), four at a time: the walk's copy per trie node stays small.
static inline void state_copy(match_state *dst, const match_state *src)
{
    memcpy(dst, src, offsetof(match_state, f));
    for (unsigned i = 0; i < src->depth; i += 4)
        memcpy(&dst->f[i], &src->f[i], 4 * sizeof(sc_frame));
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
// walk() for a free container at the top (json_object mode, a schema such as {"type": "object"})
// before it closes: the lexer alone decides, on 16-byte states, and its JM_DONE reads what
// SM_DONE would after the close (bounded whitespace; no suffix).
static size_t walk_free(const rp_json_match *m, size_t *n_ranges)
{
    const rp_json_vocab *v = m->v;
    cand_range *ranges = m->ranges;
    json_state *states = m->lex_states;
    const uint8_t *byte = v->byte, *plain = v->plain;
    const uint16_t *depth = v->depth;
    const uint32_t *end = v->end, *first = v->first;
    size_t n_allowed = 0, nr = 0;
    states[0] = m->state.lex;
    for (uint32_t k = 1; k < (uint32_t)v->n_node;) {
        json_state s = states[depth[k] - 1];
        if (!step(&s, byte[k])) {
            k = end[k];
            continue;
        }
        uint32_t a = first[k], b = s.mode == JM_STR && plain[k] ? first[end[k]] : first[k + 1];
        if (b > a) {
            add_range(ranges, &nr, a, b);
            n_allowed += b - a;
        }
        if (s.mode == JM_STR && plain[k]) { // the whole subtree stays inside the string
            k = end[k];
            continue;
        }
        states[depth[k]] = s;
        k++;
    }
    *n_ranges = nr;
    return n_allowed;
}

static size_t walk(const rp_json_match *m, size_t *n_ranges)
{
    const rp_json_vocab *v = m->v;
    const rp_json_schema *sc = m->sc;
    cand_range *ranges = m->ranges;
    match_state *states = m->states;
    const uint8_t *byte = v->byte, *plain = v->plain, *cats = v->cats;
    const uint16_t *depth = v->depth;
    const uint32_t *end = v->end, *first = v->first;
    size_t n_allowed = 0, nr = 0;

    *n_ranges = 0;
    if (v->n_cand == 0)
        return 0;
    if (plain[0] && in_plain_string(sc, &m->state)) { // every token is plain text
        ranges[0] = (cand_range){0, (uint32_t)v->n_cand};
        *n_ranges = 1;
        return (size_t)v->n_cand;
    }
    if (m->state.mode == SM_FREE && m->state.depth == 0 && m->state.lex.depth > 0 && !sc->suffix_len)
        return walk_free(m, n_ranges);
    // at[d]: the state after the first d bytes of the current path; a byte that leaves the
    // state as it was (plain text inside a free string) shares its parent's instead of a copy.
    const match_state **at = m->at;
    states[0] = m->state;
    at[0] = &states[0];
    for (uint32_t k = 1; k < (uint32_t)v->n_node;) {
        unsigned d = depth[k];
        const match_state *parent = at[d - 1];
        uint8_t c = byte[k];
        const match_state *now;
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\' && in_plain_string(sc, parent)) { // stays in the string
            now = parent;
        } else {
            match_state *s = &states[d];
            state_copy(s, parent);
            if (!mstep(sc, s, c)) {
                k = end[k];
                continue;
            }
            now = s;
        }
        at[d] = now;
        if ((plain[k] && in_plain_string(sc, now)) || in_loop_string(sc, now, cats[k])) {
            // the whole subtree stays inside the string (and at the pattern's state)
            uint32_t a = first[k], b = first[end[k]];
            add_range(ranges, &nr, a, b);
            n_allowed += b - a;
            k = end[k];
            continue;
        }
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
    // End-of-generation tokens: open once the value is complete or when nothing else can come.
    bool open = rp_json_match_done(m) || n_allowed == 0;
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] < n_vocab)
            logits[v->eog[i]] = open ? eog_logit[i] : -INFINITY;
}

rp_status rp_json_match_feed(rp_json_match *m, const char *text, size_t n)
{
    if (match_feed(m->sc, &m->state, (const uint8_t *)text, n))
        return RP_OK;
    return RP_ERR(RP_ERR_INVALID, "the grammar refuses the forced text \"%.*s\"", (int)(n < 80 ? n : 80), text);
}

rp_status rp_json_match_accept(rp_json_match *m, int32_t id)
{
    const rp_json_vocab *v = m->v;
    if (id < 0 || id >= v->n_tok)
        return RP_ERR(RP_ERR_INVALID, "token %d is outside the vocabulary (%d tokens)", (int)id, (int)v->n_tok);
    switch (v->kind[id]) {
    case JT_EOG: {
        // Allowed once the value is complete, or when the mask had to leave it as the only way on.
        size_t nr;
        if (rp_json_match_done(m) || walk(m, &nr) == 0)
            return RP_OK;
        return RP_ERR(RP_ERR_INVALID, "end-of-generation token %d before the JSON value is complete", (int)id);
    }
    case JT_CAND:
        if (match_feed(m->sc, &m->state, v->blob + v->off[id], v->off[id + 1] - v->off[id]))
            return RP_OK;
        return RP_ERR(RP_ERR_INVALID, "token %d does not continue the JSON value the grammar allows", (int)id);
    default:
        return RP_ERR(RP_ERR_INVALID, "token %d (special, unused or empty) cannot appear in JSON output", (int)id);
    }
}

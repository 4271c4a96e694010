/*
 * brute.h - what the token mask must say for one token, by simulation: the
 * brute force both grammar tests check rp_json_match_mask against.
 */
#ifndef RP_TEST_GRAMMAR_BRUTE_H
#define RP_TEST_GRAMMAR_BRUTE_H

#include "grammar/grammar_int.h"

// Token id from state s of grammar sc: a candidate whose bytes continue, or an
// end-of-generation token once the value is complete (or when no candidate can
// continue: any_cand false).
static bool brute_allowed(const rp_json_vocab *v, const rp_json_schema *sc, const match_state *s, int32_t id,
                          bool any_cand)
{
    if (id >= v->n_tok)
        return false;
    switch (v->kind[id]) {
    case JT_CAND: {
        match_state t = *s;
        return match_feed(sc, &t, v->blob + v->off[id], v->off[id + 1] - v->off[id]);
    }
    case JT_EOG:
        return match_complete(sc, s) || !any_cand;
    default:
        return false;
    }
}

#endif

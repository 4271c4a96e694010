/*
 * spec_int.h - the spec module's internals, for its own files and its tests.
 */
#ifndef RP_SPEC_INT_H
#define RP_SPEC_INT_H

#include "spec.h"

// The acceptance rule rp_spec_verify applies. Only RP_SPEC_RULE_EXACT is
// correct; the other exists so the distribution test can show that it detects
// a plausible bug (a negative control).
typedef enum rp_spec_rule {
    RP_SPEC_RULE_EXACT = 0,      // accept min(1, p/q); on rejection draw from normalize(max(0, p - q))
    RP_SPEC_RULE_RESAMPLE_P = 1, // biased: on rejection draw from p itself (favours the draft token)
} rp_spec_rule;

// rp_spec_verify_ex with a chosen rule (RESAMPLE_P never takes the coupled
// path of deterministic drafts: it draws as for sampled ones, with q one-hot).
rp_status rp_spec_verify_rule(rp_sampler *s, const float *logits, const int32_t *draft, const float *q, int k,
                              float *work, int *n_accepted, int32_t *next, rp_spec_rule rule, rp_spec_row_fn on_row,
                              void *ctx);

#endif

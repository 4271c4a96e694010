/*
 * spec_opts.c - the speculative-decoding flags `rapid run` and `rapid serve`
 * share: --no-spec-decode, --speculative-config JSON, --draft-model PATH, and
 * the drafted/accepted summary of the stats line.
 *
 * --speculative-config takes one JSON object with the keys
 *   method                  "auto" | "ngram" | "mtp" | "draft"
 *   num_speculative_tokens  the cap on drafts per step, 1..RP_SPEC_K_MAX
 *   adaptive                true (the controller picks) | false (always the cap)
 *   prompt_lookup_min, prompt_lookup_max   n-gram lengths prompt lookup matches
 * Any other key, or a value of the wrong type, is an error that names it.
 */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>

static const char KEYS[] = "method, num_speculative_tokens, adaptive, prompt_lookup_min, prompt_lookup_max";

static rp_status int_key(json_t *v, const char *key, int lo, int hi, int *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return RP_ERR(RP_ERR_INVALID, "--speculative-config: \"%s\" must be an integer in [%d, %d]", key, lo, hi);
    *out = (int)json_integer_value(v);
    return RP_OK;
}

rp_status rp_cli_spec_config(const char *text, rp_engine_spec_params *p)
{
    json_error_t jerr;
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    rp_status st = RP_OK;
    if (!json_is_object(o)) {
        st = o ? RP_ERR(RP_ERR_INVALID, "--speculative-config must be a JSON object, like '{\"method\": \"ngram\"}'")
               : RP_ERR(RP_ERR_INVALID, "--speculative-config is not valid JSON: %s (column %d)", jerr.text,
                        jerr.column);
        json_decref(o);
        return st;
    }
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        if (strcmp(key, "method") == 0) {
            const char *s = json_string_value(v);
            if (s && strcmp(s, "auto") == 0)
                p->method = RP_ENGINE_SPEC_AUTO;
            else if (s && strcmp(s, "ngram") == 0)
                p->method = RP_ENGINE_SPEC_NGRAM;
            else if (s && strcmp(s, "mtp") == 0)
                p->method = RP_ENGINE_SPEC_MTP;
            else if (s && strcmp(s, "draft") == 0)
                p->method = RP_ENGINE_SPEC_DRAFT;
            else
                st = RP_ERR(RP_ERR_INVALID,
                            "--speculative-config: \"method\" must be \"auto\", \"ngram\", \"mtp\" or \"draft\"");
        } else if (strcmp(key, "num_speculative_tokens") == 0) {
            st = int_key(v, key, 1, RP_SPEC_K_MAX, &p->k_max);
        } else if (strcmp(key, "adaptive") == 0) {
            if (json_is_boolean(v))
                p->adaptive = json_is_true(v);
            else
                st = RP_ERR(RP_ERR_INVALID, "--speculative-config: \"adaptive\" must be true or false");
        } else if (strcmp(key, "prompt_lookup_min") == 0) {
            st = int_key(v, key, 1, RP_SPEC_NGRAM_MAX, &p->ngram_min);
        } else if (strcmp(key, "prompt_lookup_max") == 0) {
            st = int_key(v, key, 1, RP_SPEC_NGRAM_MAX, &p->ngram_max);
        } else {
            st = RP_ERR(RP_ERR_INVALID, "--speculative-config: unknown key \"%s\" (known: %s)", key, KEYS);
        }
        if (st)
            break;
    }
    json_decref(o);
    return st;
}

void rp_cli_spec_summary(const rp_engine_stats *es, const rp_gen_stats *gs, char *buf, size_t cap)
{
    size_t at = 0;
    bool any = false;
    for (int m = 0; m < RP_SPEC_N_METHODS && at < cap; m++) {
        if (!es->spec_methods[m])
            continue;
        at += (size_t)snprintf(buf + at, cap - at, "%s%s %d/%d",
                               any ? ", " : "spec accepted/drafted: ", rp_spec_method_name((rp_spec_method)m),
                               gs->spec_accepted[m], gs->spec_drafted[m]);
        any = true;
    }
    if (!any)
        snprintf(buf, cap, "spec: off");
}

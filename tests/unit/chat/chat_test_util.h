/*
 * chat_test_util.h - helpers for the chat template tests: render a template
 * from a conversation in tests/data/chat/conversations.json and compare with a
 * recorded reference (tools/fixtures/make_template_refs.py).
 */
#ifndef RP_CHAT_TEST_UTIL_H
#define RP_CHAT_TEST_UTIL_H

#include "test_util.h"

#include "chat/chat.h"

static inline json_t *chat_load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j)
        fail_msg("%s: %s (line %d)", path, e.text, e.line);
    return j;
}

static inline const json_t *chat_find_conversation(const json_t *convs, const char *name)
{
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(convs, "conversations"), i, c)
    {
        if (!strcmp(json_string_value(json_object_get(c, "name")), name))
            return c;
    }
    fail_msg("no conversation named %s", name);
    return NULL;
}

// Renders conversation `conv` with template t; returns the status, output in *out (rp_free).
static inline rp_status chat_render_conv(const rp_chat_template *t, const json_t *conv, const char *bos,
                                         const char *eos, char **out, size_t *len)
{
    rp_chat_render_params p = {
        .messages = json_object_get(conv, "messages"),
        .tools = json_object_get(conv, "tools"),
        .add_generation_prompt = json_is_true(json_object_get(conv, "add_generation_prompt")),
        .kwargs = json_object_get(conv, "kwargs"),
        .bos_token = bos,
        .eos_token = eos,
    };
    return rp_chat_template_render(t, &p, out, len);
}

// Index of the first differing byte (or the shorter length).
static inline size_t chat_first_diff(const char *a, size_t na, const char *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

// Checks every case of an expected-output file against template source `src`.
// Returns the number of mismatches (each is printed).
static inline int chat_check_expected(const char *src, size_t src_len, const json_t *expected, const json_t *convs,
                                      int *n_cases)
{
    const char *name = json_string_value(json_object_get(expected, "template"));
    const char *bos = json_string_value(json_object_get(expected, "bos_token"));
    const char *eos = json_string_value(json_object_get(expected, "eos_token"));
    rp_chat_template *t = NULL;
    rp_status st = rp_chat_template_create(src, src_len, &t);
    if (st) {
        print_error("%s: does not parse: %s\n", name, rp_error_message());
        return (int)json_array_size(json_object_get(expected, "cases"));
    }
    int bad = 0;
    size_t i;
    const json_t *cs;
    json_array_foreach(json_object_get(expected, "cases"), i, cs)
    {
        const char *conv_name = json_string_value(json_object_get(cs, "conversation"));
        const json_t *want = json_object_get(cs, "output");
        char *out = NULL;
        size_t len = 0;
        (*n_cases)++;
        st = chat_render_conv(t, chat_find_conversation(convs, conv_name), bos, eos, &out, &len);
        if (!want) {
            if (!st) {
                print_error("%s / %s: the reference raised (%s) but Rapid rendered %zu bytes\n", name, conv_name,
                            json_string_value(json_object_get(cs, "error")), len);
                bad++;
            }
        } else if (st) {
            print_error("%s / %s: Rapid failed: %s\n", name, conv_name, rp_error_message());
            bad++;
        } else if (len != json_string_length(want) || memcmp(out, json_string_value(want), len) != 0) {
            size_t at = chat_first_diff(out, len, json_string_value(want), json_string_length(want));
            size_t from = at > 40 ? at - 40 : 0;
            print_error("%s / %s: differs at byte %zu\n  rapid: [%.*s]\n  want:  [%.*s]\n", name, conv_name, at,
                        (int)(len - from < 100 ? len - from : 100), out + from,
                        (int)(json_string_length(want) - from < 100 ? json_string_length(want) - from : 100),
                        json_string_value(want) + from);
            bad++;
        }
        rp_free(out);
    }
    rp_chat_template_destroy(t);
    return bad;
}

#endif

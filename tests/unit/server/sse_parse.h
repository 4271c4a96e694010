/*
 * sse_parse.h - splits a server-sent-events body into frames for the tests:
 * each frame's `event:` name (NULL when it has none) and its `data:` payload
 * parsed as JSON. Frames are "event: NAME\n" (optional) + "data: ...\n" +
 * "\n"; anything else fails the test.
 */
#ifndef RP_TEST_SSE_PARSE_H
#define RP_TEST_SSE_PARSE_H

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct sse_frame {
    char *event;  // NULL when the frame has no event line
    char *data;   // the raw payload
    json_t *json; // the payload parsed (NULL when it is not JSON, e.g. [DONE])
} sse_frame;

// Parses text into at most cap frames; returns how many.
static int sse_parse(const char *text, sse_frame *out, int cap)
{
    int n = 0;
    const char *p = text ? text : "";
    while (*p) {
        const char *end = strstr(p, "\n\n");
        if (!end)
            fail_msg("an SSE frame without its blank line: %.80s", p);
        if (n >= cap)
            fail_msg("more than %d SSE frames", cap);
        sse_frame *f = &out[n++];
        memset(f, 0, sizeof(*f));
        if (strncmp(p, "event: ", 7) == 0) {
            const char *nl = strchr(p, '\n');
            f->event = strndup(p + 7, (size_t)(nl - p - 7));
            p = nl + 1;
        }
        if (strncmp(p, "data: ", 6) != 0)
            fail_msg("an SSE frame without its data line: %.80s", p);
        f->data = strndup(p + 6, (size_t)(end - p - 6));
        if (strchr(f->data, '\n'))
            fail_msg("a data line with a raw newline: %.80s", f->data);
        f->json = json_loads(f->data, 0, NULL);
        p = end + 2;
    }
    return n;
}

static void sse_free(sse_frame *f, int n)
{
    for (int i = 0; i < n; i++) {
        free(f[i].event);
        free(f[i].data);
        json_decref(f[i].json);
    }
}

static const char *sse_str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static long long sse_int(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("'%s' is not an integer", key);
    return json_integer_value(v);
}

#endif

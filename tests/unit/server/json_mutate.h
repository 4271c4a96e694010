/*
 * json_mutate.h - a type-confusion sweep for request readers: every value of a
 * valid body, at any depth, is replaced in turn by each of a set of wrong
 * values (null, booleans, numbers at the edges, strings, empty and odd
 * containers), and every object key is removed in turn; each variant is handed
 * to a callback as JSON text. Run under ASan, a reader that survives the sweep
 * cannot be crashed by a single wrong field.
 */
#ifndef RP_TEST_JSON_MUTATE_H
#define RP_TEST_JSON_MUTATE_H

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef void (*json_mutate_fn)(const char *body, void *ctx);

static const char *const json_mutate_values[] = {
    "null",
    "true",
    "false",
    "0",
    "-1",
    "1e300",
    "2.5",
    "\"\"",
    "\"x\"",
    "[]",
    "{}",
    "[{}]",
    "[null]",
    "{\"type\":\"zzz\"}",
    "[{\"type\":\"text\"}]",
};

static void json_mutate_emit(json_t *root, json_mutate_fn fn, void *ctx, int *count)
{
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s) {
        fn(s, ctx);
        free(s);
        (*count)++;
    }
}

static void json_mutate_walk(json_t *root, json_t *node, json_mutate_fn fn, void *ctx, int *count)
{
    size_t nv = sizeof(json_mutate_values) / sizeof(json_mutate_values[0]);
    if (json_is_object(node)) {
        // Keys are copied first: the object is modified (and restored) while visiting them.
        size_t n = json_object_size(node), k = 0;
        char **keys = calloc(n ? n : 1, sizeof(*keys));
        const char *key;
        json_t *v;
        json_object_foreach(node, key, v) keys[k++] = strdup(key);
        for (size_t i = 0; i < n; i++) {
            const char *kc = keys[i];
            json_t *orig = json_incref(json_object_get(node, kc));
            for (size_t r = 0; r < nv; r++) {
                json_object_set_new(node, kc, json_loads(json_mutate_values[r], JSON_DECODE_ANY, NULL));
                json_mutate_emit(root, fn, ctx, count);
            }
            json_object_del(node, kc);
            json_mutate_emit(root, fn, ctx, count);
            json_object_set(node, kc, orig);
            json_mutate_walk(root, orig, fn, ctx, count);
            json_decref(orig);
        }
        for (size_t i = 0; i < n; i++)
            free(keys[i]);
        free(keys);
    } else if (json_is_array(node)) {
        for (size_t i = 0; i < json_array_size(node); i++) {
            json_t *orig = json_incref(json_array_get(node, i));
            for (size_t r = 0; r < nv; r++) {
                json_array_set_new(node, i, json_loads(json_mutate_values[r], JSON_DECODE_ANY, NULL));
                json_mutate_emit(root, fn, ctx, count);
            }
            json_array_set(node, i, orig);
            json_mutate_walk(root, orig, fn, ctx, count);
            json_decref(orig);
        }
    }
}

// Runs fn on every one-value variant of the JSON text `body`; returns how many variants ran.
static int json_mutate_all(const char *body, json_mutate_fn fn, void *ctx)
{
    json_t *root = json_loads(body, 0, NULL);
    if (!root)
        return 0;
    int count = 0;
    json_mutate_walk(root, root, fn, ctx, &count);
    json_decref(root);
    return count;
}

#endif

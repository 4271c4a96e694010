/*
 * lookup_replay.c - prompt lookup replayed over a finished generation, without a model:
 * how many verification steps greedy speculation with rp_spec_lookup_follow needs for a
 * known output (every draft token that equals the output is accepted, then the output's
 * next token is emitted, as verification does), and where the short steps are.
 *
 * Not part of the build or the test suite. Build against a configured tree:
 *   cc -O2 -I src bench/lookup_replay.c build/librapid_core.a -lm -lpthread -o /tmp/lookup-replay
 *   /tmp/lookup-replay PROMPT.ids FULL.ids [K] [-v]
 * PROMPT.ids and FULL.ids hold token ids separated by spaces or commas (`rapid tokenize
 * MODEL --no-bos --file F`): the prompt, and the prompt followed by the output. K is the
 * draft cap (default 32). -v prints every step that yields fewer than 4 tokens.
 */
#include "spec/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t *read_ids(const char *path, int *n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(1);
    }
    int cap = 1024;
    int32_t *v = malloc(sizeof(int32_t) * cap);
    *n = 0;
    int c, x = 0, in = 0;
    while ((c = fgetc(f)) != EOF) {
        if (c >= '0' && c <= '9') {
            x = x * 10 + (c - '0');
            in = 1;
        } else if (in) {
            if (*n == cap)
                v = realloc(v, sizeof(int32_t) * (cap *= 2));
            v[(*n)++] = x;
            x = in = 0;
        }
    }
    if (in)
        v[(*n)++] = x;
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PROMPT.ids FULL.ids [K] [-v]\n", argv[0]);
        return 2;
    }
    int np, nf;
    int32_t *p = read_ids(argv[1], &np), *f = read_ids(argv[2], &nf);
    int k = argc > 3 && argv[3][0] != '-' ? atoi(argv[3]) : 32;
    int verbose = argc > 3 && strcmp(argv[argc - 1], "-v") == 0;
    if (nf <= np || memcmp(p, f, sizeof(int32_t) * np) != 0) {
        fprintf(stderr, "FULL does not start with PROMPT\n");
        return 1;
    }
    rp_spec_lookup *lk;
    if (rp_spec_lookup_create(8, &lk) || rp_spec_lookup_append(lk, p, np))
        return 1;
    int32_t draft[RP_SPEC_K_MAX];
    int pos = np, steps = 0, drafted = 0, accepted = 0, hist[5] = {0};
    while (pos < nf) {
        int want = nf - pos - 1 < k ? nf - pos - 1 : k;
        int d = want > 0 ? rp_spec_lookup_follow(lk, 1, want, draft, NULL) : 0;
        int a = 0;
        while (a < d && draft[a] == f[pos + a])
            a++;
        int got = a + 1; // the accepted drafts and the target's own next token
        if (verbose && got < 4)
            printf("step %d at %d: drafted %d, yields %d\n", steps, pos - np, d, got);
        rp_spec_lookup_append(lk, f + pos, got);
        pos += got;
        steps++;
        drafted += d;
        accepted += a;
        hist[got < 2 ? 0 : got < 4 ? 1 : got < 16 ? 2 : got <= k ? 3 : 4]++;
    }
    printf("%d output tokens, cap %d: %d steps (%.1f tokens a step), drafted %d, accepted %d; steps "
           "yielding 1: %d, 2-3: %d, 4-15: %d, 16+: %d\n",
           nf - np, k, steps, (double)(nf - np) / steps, drafted, accepted, hist[0], hist[1], hist[2],
           hist[3] + hist[4]);
    rp_spec_lookup_destroy(lk);
    free(p);
    free(f);
    return 0;
}

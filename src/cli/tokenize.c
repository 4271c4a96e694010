/*
 * tokenize.c - `rapid tokenize MODEL [--no-bos] (TEXT | --file F)`.
 *
 * Loads the tokenizer of MODEL (an HF folder, a tokenizer.json, or a .gguf,
 * tokenizer-only GGUF files included) and prints the ids of TEXT on one line,
 * space separated. --no-bos adds no special tokens (HF add_special_tokens=False).
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#include "../tokenizer/tokenizer.h"

static int usage(void)
{
    fprintf(stderr, "usage: rapid tokenize MODEL [--no-bos] (TEXT | --file F)\n"
                    "  MODEL   a Hugging Face model folder, a tokenizer.json, or a .gguf file, or a repo id\n"
                    "          or alias already in the hub cache (`rapid models`)\n"
                    "  --no-bos  add no special tokens (BOS/EOS)\n"
                    "  --file F  read the text from file F instead of the command line\n");
    return 2;
}

int rp_cli_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL;
    bool add_special = true, have_text = false;
    bool opts = true; // "--" ends the options
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts && !strcmp(a, "--")) {
            opts = false;
        } else if (opts && !strcmp(a, "--no-bos")) {
            add_special = false;
        } else if (opts && !strcmp(a, "--file")) {
            if (i + 1 >= argc || file || have_text)
                return usage();
            file = argv[++i];
        } else if (opts && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
            usage();
            return 0;
        } else if (opts && a[0] == '-' && a[1] == '-') {
            return usage();
        } else if (!model) {
            model = a;
        } else if (!have_text && !file) {
            text = a;
            have_text = true;
        } else {
            return usage();
        }
    }
    if (!model || (!have_text && !file))
        return usage();
    char *buf = NULL;
    size_t len = 0;
    if (file) {
        if (rp_file_read(file, &buf, &len)) {
            fprintf(stderr, "rapid: %s\n", rp_error_message());
            return 1;
        }
    } else {
        len = strlen(text);
    }
    rp_hub_resolved where;
    if (rp_cli_resolve_model("tokenize", model, false, NULL, &where, NULL)) {
        rp_free(buf);
        return 1;
    }
    rp_tokenizer *t = NULL;
    if (rp_tok_load_file(where.path, &t)) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        rp_free(buf);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 0;
    if (rp_tok_encode(t, file ? buf : text, len, add_special, &ids, &n)) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        rc = 1;
    } else {
        for (size_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", (int)ids[i]);
        printf("\n");
    }
    rp_free(ids);
    rp_tok_destroy(t);
    rp_free(buf);
    return rc;
}

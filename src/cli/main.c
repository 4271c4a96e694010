/*
 * main.c - the `rapid` command: dispatches to the subcommands.
 *
 * Only subcommands that work appear in the help. Exit codes: 0 success,
 * 1 failure (with a message), 2 bad usage.
 */
#include "cli.h"

#include "../base/base.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: rapid <command> [options]\n"
               "\n"
               "Rapid %s - a fast local LLM inference engine.\n"
               "\n"
               "commands:\n"
               "  serve [MODEL]           serve the OpenAI and Anthropic HTTP APIs (default: 127.0.0.1:8000)\n"
               "  run MODEL -p PROMPT     generate text from a prompt\n"
               "  tokenize MODEL TEXT     print the token ids of TEXT\n"
               "  template MODEL          print the chat prompt MODEL's template makes of --messages FILE\n"
               "  bench --base-url URL    measure an OpenAI-compatible server task by task; bench compare A B\n"
               "  pull NAME               download a model into the Hugging Face hub cache\n"
               "  models [--catalog]      list the models in the hub cache (--catalog: the aliases)\n"
               "  rm NAME                 delete a model from the hub cache\n"
               "  ps                      what a running server has loaded and how busy it is\n"
               "\n"
               "MODEL is a folder (config.json + safetensors), a .gguf file, a Hugging Face repo id\n"
               "(org/name[@REV], org/name-GGUF:Q4_K_M) or an alias (qwen3-8b); a name is looked up in the\n"
               "hub cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub) and downloaded by run\n"
               "and serve when missing (--no-download, HF_HUB_OFFLINE=1: never).\n"
               "\n"
               "  rapid <command> --help  options of a command\n"
               "  rapid --version         print the version\n",
               RP_VERSION);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        printf("rapid %s\n", RP_VERSION);
        return 0;
    }
    if (strcmp(cmd, "serve") == 0)
        return rp_cli_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return rp_cli_run(argc - 1, argv + 1);
    if (strcmp(cmd, "tokenize") == 0)
        return rp_cli_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "template") == 0)
        return rp_cli_template(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return rp_cli_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "pull") == 0)
        return rp_cli_pull(argc - 1, argv + 1);
    if (strcmp(cmd, "models") == 0)
        return rp_cli_models(argc - 1, argv + 1);
    if (strcmp(cmd, "rm") == 0)
        return rp_cli_rm(argc - 1, argv + 1);
    if (strcmp(cmd, "ps") == 0)
        return rp_cli_ps(argc - 1, argv + 1);
    return rp_cli_usage_error(NULL, "unknown command '%s'", cmd);
}

/* main.c — subcommand dispatch only. */
#include <stdio.h>
#include <string.h>

#include "onebit.h"
#include "tools/tools.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"serve", ob_cmd_serve, "OpenAI-compatible HTTP server (llama-server's flags)"},
    {"run", ob_cmd_run, "generate a continuation of a prompt"},
    {"bench", ob_cmd_bench, "prompt-processing and decode speed (like llama-bench)"},
    {"convert", ob_cmd_convert, "Hugging Face checkpoint (or random weights) -> GGUF"},
    {"quantize", ob_cmd_quantize, "GGUF -> GGUF of another weight type (llama-quantize's types and mixes)"},
    {"perplexity", ob_cmd_perplexity, "perplexity of a model over a text file"},
    {"registry", ob_cmd_registry, "architectures and weight types this build runs"},
    {"tokenize", ob_cmd_tokenize, "token ids of a text (or --decode: the text of ids)"},
    {"template", ob_cmd_template, "a conversation rendered by the model's chat template"},
};

static int usage(FILE *f) {
    fprintf(f, "1bit %s — LLM inference for very-low-bit weights\n\nusage: 1bit COMMAND [options]\n\ncommands:\n",
            OB_VERSION_STRING);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'1bit COMMAND --help' for a command's options.\n");
    return f == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(stderr);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) return usage(stdout);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("1bit %s\n", OB_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "1bit: unknown command '%s'\n\n", argv[1]);
    return usage(stderr);
}

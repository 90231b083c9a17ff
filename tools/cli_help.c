// cli_help.c: `g4cu COMMAND --help` and the check of a command line against the command's
// option tables (tools/cli.h g4_opt), so that the help and the accepted options are one list.
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"

#define HELP_WIDTH 99 // every line shorter than 100 characters
#define NAME_COL   24 // where an option's help starts

// A table like the commands' own: it ends with {NULL}.
static const g4_opt help_opt[] = {{"--help", NULL, "this help"}, {NULL, NULL, NULL}};

static const g4_opt *find(const g4_opt *t, const char *a) {
    for (; t && t->name; t++)
        if (!strcmp(t->name, a)) return t;
    return NULL;
}

// Prints text from column `col` (the cursor already there), words wrapped at HELP_WIDTH, the
// continuation lines indented to `indent`.
static void wrap(FILE *f, const char *text, int col, int indent) {
    const char *p = text;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        int len = (int)strcspn(p, " ");
        if (col > indent && col + 1 + len > HELP_WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        // A word longer than the line is cut: the width holds for every line.
        while (len > HELP_WIDTH - col) {
            int part = HELP_WIDTH - col;
            fprintf(f, "%.*s\n%*s", part, p, indent, "");
            p += part, len -= part, col = indent;
        }
        fprintf(f, "%.*s", len, p);
        col += len;
        p += len;
    }
    fputc('\n', f);
}

static void print_opts(FILE *f, const g4_opt *t) {
    for (; t && t->name; t++) {
        char head[96];
        snprintf(head, sizeof head, "  %s%s%s", t->name, t->value ? " " : "",
                 t->value ? t->value : "");
        int col = (int)strlen(head);
        fputs(head, f);
        if (col + 1 >= NAME_COL) {
            fprintf(f, "\n%*s", NAME_COL, "");
        } else {
            fprintf(f, "%*s", NAME_COL - col, "");
        }
        wrap(f, t->help, NAME_COL, NAME_COL);
    }
}

void g4_cli_help(FILE *f, const g4_cmd *c) {
    char head[64];
    snprintf(head, sizeof head, "usage: g4cu %s", c->name);
    fputs(head, f);
    wrap(f, c->usage, (int)strlen(head), 4);
    fprintf(f, "\noptions:\n");
    print_opts(f, c->opts);
    print_opts(f, c->shared);
    print_opts(f, g4_cli_global_opts);
    print_opts(f, help_opt);
}

int g4_cli_prepare(const g4_cmd *c, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            g4_cli_help(stdout, c);
            return 0;
        }
        if (!c->opts || strncmp(a, "--", 2) != 0 || !a[2]) continue;
        const g4_opt *o = find(c->opts, a);
        if (!o) o = find(c->shared, a);
        if (!o) return g4_cli_usage_error(c->name, "unknown option '%s'", a);
        if (o->value) i++; // its value, whatever it looks like
    }
    return -1;
}

// g4cu inspect PKG [--tensor NAME] [--summary]: what the package holds and what it implies.
// Opening the package already validates every tensor and cross-checks the configs, so a
// successful inspect is also the check; it also reads every weight for NaN/Inf (which the
// engine refuses as it binds them), and lists what it finds, and problems that do not stop
// opening (overlapping data), at the end (exit 1 when there are any). --json prints the same
// as one JSON object. On the public C API (include/g4cu_dev.h: g4cu_dev_inspect).
#include <g4cu_dev.h>
#include <stdio.h>

#include "tools/cli.h"

static int cmd_inspect(int argc, char **argv) {
    const char *pkg_dir = NULL;
    g4cu_dev_inspect_params o;
    g4cu_dev_inspect_params_default(&o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tensor")) {
            if (++i >= argc) return g4_cli_usage_error("inspect", "--tensor needs a name");
            o.tensor = argv[i];
        } else if (!strcmp(argv[i], "--summary")) {
            o.summary = 1;
        } else if (!strcmp(argv[i], "--json")) {
            o.json = 1;
        } else if (argv[i][0] == '-') {
            return g4_cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        } else if (!pkg_dir) {
            pkg_dir = argv[i];
        } else {
            return g4_cli_usage_error("inspect", "unexpected argument '%s'", argv[i]);
        }
    }
    if (!pkg_dir) return g4_cli_usage_error("inspect", "missing package directory");
    int n_issues = 0, rc = g4cu_dev_inspect(pkg_dir, &o, stdout, &n_issues);
    return rc ? g4_cli_fail(rc) : n_issues ? 1 : 0;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt inspect_opts[] = {
    {"--tensor", "NAME", "one tensor's details (default: every table)"},
    {"--summary", NULL, "components and totals only (default: the full tables)"},
    {"--json", NULL, "one JSON object on stdout (default: text)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_inspect = {"inspect", cmd_inspect,
                               "PKG [--tensor NAME] [--summary] [--json]   components, tensors, "
                               "dtypes, derived config; checks all",
                               inspect_opts, NULL};

// g4cu features PKG (--image F | --audio F) [--out F.npy]: runs the image or audio front end
// with the package's processor configs and prints the shapes and soft-token counts. --out writes
// what the tower would get: pixel_values float32 [patches, 768] (and <F>.positions.npy int32
// [patches, 2], x = column, y = row) or input_features float32 [T, 128] (and <F>.mask.npy int32
// [T]). On the public C API (include/g4cu_dev.h: g4cu_dev_features).
#include <g4cu_dev.h>
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"

static int cmd_features(int argc, char **argv) {
    const char *pkg_dir = NULL;
    g4cu_dev_features_params o;
    g4cu_dev_features_params_default(&o);
    for (int i = 1; i < argc; i++) {
        const char **dst = !strcmp(argv[i], "--image")   ? &o.image
                           : !strcmp(argv[i], "--audio") ? &o.audio
                           : !strcmp(argv[i], "--out")   ? &o.out
                                                         : NULL;
        if (dst) {
            if (++i >= argc) return g4_cli_usage_error("features", "%s needs a file", argv[i - 1]);
            *dst = argv[i];
        } else if (argv[i][0] == '-') {
            return g4_cli_usage_error("features", "unknown option '%s'", argv[i]);
        } else if (!pkg_dir) {
            pkg_dir = argv[i];
        } else {
            return g4_cli_usage_error("features", "unexpected argument '%s'", argv[i]);
        }
    }
    if (!pkg_dir) return g4_cli_usage_error("features", "missing package directory");
    if (!o.image == !o.audio)
        return g4_cli_usage_error("features", "give exactly one of --image, --audio");
    int rc = g4cu_dev_features(pkg_dir, &o, stdout);
    return rc ? g4_cli_fail(rc) : 0;
}

// The options, with their defaults: the help and the accepted list (tools/cli.h).
static const g4_opt features_opts[] = {
    {"--image", "F", "an image: the vision front end's patches and soft-token count"},
    {"--audio", "F", "an audio file: the log-mel frames and soft-token count"},
    {"--out", "F.npy", "also write the front end's output (default: none)"},
    {NULL, NULL, NULL}};

const g4_cmd g4_cmd_features = {
    "features", cmd_features,
    "PKG (--image F | --audio F) [--out F.npy]   front-end output: shapes, soft tokens",
    features_opts, NULL};

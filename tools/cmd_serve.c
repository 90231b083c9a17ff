// g4cu serve PKG [--host 127.0.0.1] [--port 8080] [options]: the OpenAI-compatible server
// (tools/serve.c).
#include "tools/cli.h"
#include "tools/serve.h"

const g4_cmd g4_cmd_serve = {
    "serve", g4_serve_main,
    "PKG [--host 127.0.0.1] [--port 8080 (0: a free one)] [--backend cpu|cuda|auto]\n"
    "            [--tokenizer F] [--parallel N] [--queue N] [--max-body BYTES] [--max-tokens N]\n"
    "            [--max-media N] [--max-audio-seconds S] [--timeout S] [--n-ctx N] [--name ID]\n"
    "            OpenAI-compatible HTTP\n"
    "            server: /v1/chat/completions, /v1/audio/transcriptions, /v1/models, /health,\n"
    "            /metrics"};

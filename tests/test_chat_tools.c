// test_chat_tools.c: Gemma-4's tool format (engine/chat_tools.h) against the E2B template as
// Jinja2 renders it (tests/fixtures/chat/tool_cases.jsonl, tools/python/make_tool_fixture.py):
//  - the declarations of each case's tools equal the template's system turn after the system
//    text, byte for byte (case-blind key order, nested objects, arrays, enums, nullable, a tool
//    without parameters);
//  - each case's call, as the template writes it in an assistant turn, parses back to its name
//    and arguments (compared as JSON values);
//  - the whole prompt (engine/chat.c with the declarations in its system turn) equals the
//    fixture's rendering, with and without a system message;
//  - the calls among generated ids (the call text tokenized by the fixture tokenizer, between
//    other text and the closing <|tool_response>) come out with the text around them; a span
//    that does not parse stays text;
//  - malformed calls and bad tool lists are user errors naming what is wrong.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"
#include "engine/chat_tools.h"
#include "tests/chat_fixture.h"
#include "tests/test_util.h"

static g4_tokenizer *tok;

static void check_extract(const char *name, const char *call_text, const cJSON *call) {
    char *gen = g4_sprintf("Sure.%s<|tool_response>", call_text);
    g4_ids ids = {0};
    CHECK(g4_tokenizer_encode(tok, gen, strlen(gen), 0, &ids) == G4_OK);
    g4_tool_call *calls = NULL;
    int n = 0;
    char *text = NULL;
    size_t len = 0;
    CHECK_MSG(g4_tool_calls_extract(tok, ids.v, (int)ids.n, &calls, &n, &text, &len) == G4_OK,
              "%s: %s", name, g4_error());
    CHECK_MSG(n == 1 && text && !strcmp(text, "Sure."), "%s: %d calls, text '%s'", name, n,
              text ? text : "-");
    if (n == 1) {
        cJSON *args = cJSON_Parse(calls[0].arguments);
        CHECK(!strcmp(calls[0].name, cf_str(call, "name")));
        CHECK(cJSON_Compare(args, cJSON_GetObjectItem(call, "arguments"), 1));
        cJSON_Delete(args);
    }
    g4_tool_calls_free(calls, n);
    free(text);
    g4_ids_free(&ids);
    free(gen);
}

int main(void) {
    char *tp = g4_sprintf("%s/chat/chat_bpe.json", g4t_env("G4_FIXTURES"));
    if (g4_tokenizer_open(tp, &tok)) return fprintf(stderr, "%s\n", g4_error()), 1;
    free(tp);
    char *path = g4_sprintf("%s/chat/tool_cases.jsonl", g4t_env("G4_FIXTURES"));
    cf_lines l = cf_read(path);
    free(path);
    int n = 0;
    for (int i = 0; i < l.n; i++) {
        const cJSON *o = l.line[i];
        const char *name = cf_str(o, "name"), *rendered = cf_str(o, "rendered");
        const cJSON *sys = cJSON_GetObjectItem(o, "system");
        // the expected block: after "<|turn>system\n" and the system text, up to "<turn|>"
        char *head = g4_sprintf("<bos><|turn>system\n%s", cJSON_IsString(sys) ? sys->valuestring : "");
        const char *a = strncmp(rendered, head, strlen(head)) ? NULL : rendered + strlen(head);
        const char *e = a ? strstr(a, "<turn|>") : NULL;
        CHECK_MSG(a && e, "%s: the fixture's rendering has no system turn", name);
        char *tools = cJSON_PrintUnformatted(cJSON_GetObjectItem(o, "tools")), *got = NULL;
        CHECK_MSG(g4_chat_tools_render(tools, strlen(tools), &got) == G4_OK, "%s: %s", name,
                  g4_error());
        CHECK_MSG(got && a && e && strlen(got) == (size_t)(e - a) && !memcmp(got, a, (size_t)(e - a)),
                  "%s:\n got  %s\n want %.*s", name, got ? got : "(none)", a && e ? (int)(e - a) : 0,
                  a ? a : "");
        // the whole prompt
        g4_chat_request rq = {0};
        rq.system = cJSON_IsString(sys) ? sys->valuestring : NULL;
        rq.text = "Hi";
        rq.tools = got;
        char *prompt = NULL;
        CHECK_MSG(g4_chat_render(&rq, &prompt) == G4_OK && !strcmp(prompt, rendered),
                  "%s: the prompt\n got  %s\n want %s", name, prompt ? prompt : "-", rendered);
        free(prompt);
        // the call
        const char *ct = cf_str(o, "call_text");
        check_extract(name, ct, cJSON_GetObjectItem(o, "call"));
        const size_t open = strlen("<|tool_call>"), close = strlen("<tool_call|>");
        char *cn = NULL, *args = NULL;
        CHECK_MSG(g4_tool_call_parse(ct + open, strlen(ct) - open - close, &cn, &args) == G4_OK,
                  "%s: %s", name, g4_error());
        const cJSON *call = cJSON_GetObjectItem(o, "call");
        cJSON *want = cJSON_GetObjectItem(call, "arguments"), *parsed = args ? cJSON_Parse(args) : NULL;
        CHECK_MSG(cn && !strcmp(cn, cf_str(call, "name")), "%s: call name %s", name, cn ? cn : "-");
        CHECK_MSG(parsed && cJSON_Compare(parsed, want, 1), "%s: arguments %s", name, args ? args : "-");
        cJSON_Delete(parsed);
        free(cn);
        free(args);
        free(got);
        free(tools);
        free(head);
        n++;
    }
    CHECK_INT(n, 3);

    static const char *const bad_calls[] = {
        "get_weather{}", "call:{}", "call:f", "call:f{a:}", "call:f{a:<|\"|>x}", "call:f{a:1}x",
        "call:f{a:[1,}", "call:f{a:1,}", "call:f{:1}", "call:f{a:tru}",
    };
    for (size_t k = 0; k < sizeof bad_calls / sizeof *bad_calls; k++) {
        char *cn = NULL, *args = NULL;
        const int rc = g4_tool_call_parse(bad_calls[k], strlen(bad_calls[k]), &cn, &args);
        CHECK_MSG(rc == G4_EUSER && strstr(g4_error(), "tool call") && !cn && !args,
                  "'%s': rc %d", bad_calls[k], rc);
    }
    static const struct {
        const char *tools, *word;
    } bad_tools[] = {
        {"{}", "array"},
        {"[1]", "tools[0]"},
        {"[{\"type\":\"function\",\"function\":{}}]", "tools[0]"},
        {"[{\"type\":\"retrieval\",\"function\":{\"name\":\"f\"}}]", "tools[0].type"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", "function.name"},
        {"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":3}}]", "parameters"},
    };
    for (size_t k = 0; k < sizeof bad_tools / sizeof *bad_tools; k++) {
        char *got = NULL;
        const int rc = g4_chat_tools_render(bad_tools[k].tools, strlen(bad_tools[k].tools), &got);
        CHECK_MSG(rc == G4_EUSER && strstr(g4_error(), bad_tools[k].word) && !got, "'%s': %d %s",
                  bad_tools[k].tools, rc, g4_error());
    }
    { // a span that does not parse stays text; no span: no calls, no text
        const char *g = "a<|tool_call>call:f{x:<tool_call|>b";
        g4_ids ids = {0};
        CHECK(g4_tokenizer_encode(tok, g, strlen(g), 0, &ids) == G4_OK);
        g4_tool_call *calls = NULL;
        int nc = -1;
        char *text = NULL;
        size_t len = 0;
        CHECK(g4_tool_calls_extract(tok, ids.v, (int)ids.n, &calls, &nc, &text, &len) == G4_OK);
        CHECK(nc == 0 && !calls && !text);
        g4_ids_free(&ids);
    }
    cf_free(&l);
    g4_tokenizer_close(tok);
    return g4t_finish("test_chat_tools");
}

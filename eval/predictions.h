// predictions.h: the eval runner's predictions file: JSONL, one line per item, appended as each
// item finishes and made durable (write + fsync) before the next one starts, so a crash or a
// kill loses at most the item in flight.
//
// A line: {"id": "...", "prediction": "...", and, as the runner writes them, "task",
//          "fingerprint" (what made it, fingerprint.h), "stop_reason", "prompt_tokens",
//          "new_tokens", "tokens": [...], "item_ms", "prefill_ms", "decode_ms", and when it
//          applies "audio_truncated_s" (the audio file's length, when only its first 30 s
//          were heard)}; an item that could not be run (a prompt longer than the context, a
//          corrupt media file) is {"id", "task", "fingerprint", "prediction": "", "error":
//          "<the reason>"}: recorded as failed (scored as an empty response, counted as failed
//          in the scores) so that a resume goes on past it.
// Only id and prediction are required (so recorded predictions from elsewhere can be scored);
// the other fields, when present, must have their types. "prediction" is the response as
// generated (thought channel removed, cut before an active stop string), not yet stripped: the
// scorers apply lmms-eval's .strip(). A NUL byte of the response is written as U+0001 and
// counted in "nul_bytes" (see runner.c response_text).
//
// A torn line: a crash mid-write leaves a last line without its '\n'. Reading with repair
// drops it and truncates the file to the end of the last whole line (--resume); reading
// without repair (eval-merge) reports it as an error. A bad line anywhere else is an error.
#ifndef G4_EVAL_PREDICTIONS_H
#define G4_EVAL_PREDICTIONS_H

#include <stdint.h>

typedef struct {
    char *id;
    char *prediction;
    int line; // 1-based line of the file
    // Optional statistics (-1 when the line has none).
    double item_ms;    // wall time of the item: media front end + towers + generation
    double prefill_ms; // prompt forward passes (g4_gen_result.prefill_ms)
    double decode_ms;  // later steps
    int prompt_tokens;
    int new_tokens;
    int stop_reason; // g4_stop_reason, or -1
    char *fingerprint; // NULL: the line has none (written by another tool or an older g4cu)
    char *error;       // NULL: predicted; else why the item failed
} g4_eval_pred;

typedef struct {
    char *path;
    g4_eval_pred *v; // [n] in file order
    int n;
    long torn_bytes; // bytes of a torn last line that was dropped (0: none)
} g4_eval_preds;

// Reads path. missing_ok: a missing file is an empty list. task: when not NULL, a line's
// "task" field (if any) must name it (so --resume cannot mix tasks). repair: see above.
// Duplicate ids are an error naming both lines.
int g4_eval_preds_read(const char *path, const char *task, int missing_ok, int repair,
                       g4_eval_preds *out);
void g4_eval_preds_free(g4_eval_preds *p);

// An open predictions file (O_APPEND), locked (flock) against a second writer.
typedef struct {
    int fd;
    char *path;
} g4_eval_pred_file;

// Creates the file when missing. A user error when another process holds it open for writing.
int g4_eval_pred_file_open(const char *path, g4_eval_pred_file *f);
// Writes json (one JSON object, no newline) + '\n' in one write and fsyncs the file.
int g4_eval_pred_file_append(g4_eval_pred_file *f, const char *json);
void g4_eval_pred_file_close(g4_eval_pred_file *f);

#endif

// media.h: media files -> soft tokens for a prompt ("media -> soft tokens", the one interface
// the generate / asr / vqa paths use for images and audio).
//
//   image file -> image_fe (decode, resize, patches)  -> vision tower -> rows [n, hidden]
//   audio file -> audio_fe (decode, 16 kHz, log-mel)   -> audio tower  -> rows [n, hidden]
//
// Two steps, so the caller can size the rows before any tower runs: g4_media_load runs the
// front end on the host and fixes n (the soft-token count the chat template writes, chat.h);
// g4_media_encode runs the tower on a backend handle and writes the n rows of the text
// model's width into backend memory (a text state's soft rows, g4_text_state_soft_rows),
// where g4_text_forward / g4_text_step put them in place of the placeholder ids
// (g4_soft_tokens, text_model.h), in prompt order. The rows never visit the host.
// The tower step is a pair of function pointers: by default the package's towers
// (engine/multimodal.h: vision_tower.h, audio_tower.h, each loaded on first use); a test can
// install a stand-in.
#ifndef G4_MEDIA_H
#define G4_MEDIA_H

#include "engine/audio_fe.h"
#include "engine/image_fe.h"
#include "engine/text_model.h"

typedef enum { G4_MEDIA_IMAGE = 0, G4_MEDIA_AUDIO = 1 } g4_media_kind;

// One media item after its front end.
typedef struct {
    g4_media_kind kind;
    int n_tokens;              // soft tokens (= placeholders in the prompt)
    g4_image_features image;   // kind image
    g4_audio_features audio;   // kind audio
    // Audio longer than the audio tower's window (G4_AUDIO_MAX_SAMPLES, 30 s) is cut to it, as
    // HF's feature extractor does (long-form ASR cuts its own windows first: asr_window.h):
    // truncated = 1, and the file's length and the seconds used, for the caller to say so.
    int truncated;
    double src_seconds, used_seconds;
} g4_media_input;
void g4_media_input_free(g4_media_input *in);

// Features -> rows (F32 [f->n_soft_tokens, width] in backend memory), run on handle ex.
typedef int (*g4_image_tower_fn)(void *ctx, g4_backend *ex, const g4_image_features *f,
                                 g4_buf *rows);
typedef int (*g4_audio_tower_fn)(void *ctx, g4_backend *ex, const g4_audio_features *f,
                                 g4_buf *rows);

typedef struct g4_media_encoder g4_media_encoder;

// An encoder for pkg's media on be (the package's towers). A package without a vision or
// audio component still opens; a request for that kind of media is then a user error.
int g4_media_encoder_new(const g4_package *pkg, g4_backend *be, g4_media_encoder **out);
void g4_media_encoder_free(g4_media_encoder *e);
// Replaces the tower step of each kind given (NULL keeps that kind's), with ctx as its argument.
void g4_media_encoder_set_towers(g4_media_encoder *e, g4_image_tower_fn image,
                                 g4_audio_tower_fn audio, void *ctx);

// Runs the front end on one file (host). Errors name the file.
int g4_media_load(g4_media_encoder *e, g4_media_kind kind, const char *path,
                  g4_media_input *out);
// The same from memory (the C API's image and PCM inputs): an RGB image, or mono float32 PCM at
// `rate` Hz (resampled to the front end's rate as a file's samples are, and cut to the audio
// window the same way). `what` names the input in errors.
int g4_media_load_rgb(g4_media_encoder *e, const g4_image *img, const char *what,
                      g4_media_input *out);
int g4_media_load_pcm(g4_media_encoder *e, const float *pcm, int64_t n, int rate,
                      const char *what, g4_media_input *out);
// Runs the tower of in on handle ex (NULL: the encoder's backend) into rows (F32
// [in->n_tokens, width] in backend memory). path names the file in errors.
int g4_media_encode(g4_media_encoder *e, g4_backend *ex, const g4_media_input *in,
                    const char *path, g4_buf *rows);

// The soft-token count of an image of height x width under cfg, without decoding it
// (Gemma4Processor's num_soft_tokens: (Ht / patch) * (Wt / patch) / k^2 of the resized size).
int g4_image_soft_tokens(const g4_image_proc_config *cfg, int height, int width, int *n);

#endif

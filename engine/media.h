// media.h: media files -> soft tokens for a prompt ("media -> soft tokens", the one interface
// the generate / asr / vqa paths use for images and audio).
//
//   image file -> image_fe (decode, resize, patches)  -> vision tower -> rows [n, hidden]
//   audio file -> audio_fe (decode, 16 kHz, log-mel)   -> audio tower  -> rows [n, hidden]
//
// The front end fixes n (the soft-token count the chat template writes, chat.h); the tower
// turns the features into n rows of the text model's width, which g4_text_forward puts in
// place of the placeholder ids (g4_soft_tokens, text_model.h), in prompt order.
// The tower step is a pair of function pointers: by default the package's towers
// (engine/multimodal.h: vision_tower.h, audio_tower.h, each loaded on first use); a test can
// install a stand-in.
#ifndef G4_MEDIA_H
#define G4_MEDIA_H

#include "engine/audio_fe.h"
#include "engine/image_fe.h"
#include "engine/text_model.h"

typedef enum { G4_MEDIA_IMAGE = 0, G4_MEDIA_AUDIO = 1 } g4_media_kind;

// One media item as soft tokens.
typedef struct {
    g4_media_kind kind;
    int n_tokens; // soft tokens (= placeholders in the prompt)
    int width;    // text hidden size
    float *rows;  // host [n_tokens, width]
    // Audio longer than the audio tower's window (G4_AUDIO_MAX_SAMPLES, 30 s) is cut to it, as
    // HF's feature extractor does (long-form audio is not supported yet): truncated = 1, and
    // the file's length and the seconds used, for the caller to say so.
    int truncated;
    double src_seconds, used_seconds;
} g4_media_embeds;
void g4_media_embeds_free(g4_media_embeds *m);

// Features -> rows [f->n_soft_tokens, width] (host memory, allocated by the caller).
typedef int (*g4_image_tower_fn)(void *ctx, const g4_image_features *f, float *rows);
typedef int (*g4_audio_tower_fn)(void *ctx, const g4_audio_features *f, float *rows);

typedef struct g4_media_encoder g4_media_encoder;

// An encoder for pkg's media on be (the package's towers). A package without a vision or
// audio component still opens; a request for that kind of media is then a user error.
int g4_media_encoder_new(const g4_package *pkg, g4_backend *be, g4_media_encoder **out);
void g4_media_encoder_free(g4_media_encoder *e);
// Replaces the tower step of each kind given (NULL keeps that kind's), with ctx as its argument.
void g4_media_encoder_set_towers(g4_media_encoder *e, g4_image_tower_fn image,
                                 g4_audio_tower_fn audio, void *ctx);

// Runs the front end and the tower on one file. Errors name the file.
int g4_media_encode_file(g4_media_encoder *e, g4_media_kind kind, const char *path,
                         g4_media_embeds *out);

// The soft-token count of an image of height x width under cfg, without decoding it
// (Gemma4Processor's num_soft_tokens: (Ht / patch) * (Wt / patch) / k^2 of the resized size).
int g4_image_soft_tokens(const g4_image_proc_config *cfg, int height, int width, int *n);

#endif

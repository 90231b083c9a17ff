// dump_run.h: run a package on the inputs of an HF reference dump and capture every
// intermediate under the dump's names, multimodal dumps included (for `g4cu compare`).
//
// A text dump (tools/python/make_reference.py) holds input_ids and the tensors to compare. A
// multimodal dump (tools/python/mm_reference.py) also holds:
//   image_file, audio_file (uint8: UTF-8 paths relative to the dump's directory),
//   image_max_soft_tokens (int, optional: the image budget the processor was called with),
//   pixel_values / pixel_position_ids (the image processor's real patches),
//   input_features / input_features_mask (the audio processor's output),
//   "<name>.rows" (int32 [k]): the dump holds only these rows of tensor <name>,
//   logits_argmax (int [S]): the argmax of every row of HF's logits.
// The image goes through our front end (bit-identical to HF's, tests/test_frontends.c) and the
// vision tower; the audio tower runs on the dump's own input_features and mask, so its layers
// are compared in isolation from the log-mel (whose small float32-FFT difference to ours is the
// front end's business); our log-mel of the file is captured as "input_features" too. The
// image and audio soft tokens are merged at the placeholder ids and the text model runs.
#ifndef G4_DUMP_RUN_H
#define G4_DUMP_RUN_H

#include "engine/multimodal.h"
#include "fidelity/capture.h"
#include "fidelity/npy.h"

// 1 when a dump member is an input or bookkeeping (input_ids, the media paths, the image
// budget, "<name>.rows") rather than a tensor the engine produces.
int g4_dump_member_is_meta(const char *name);

// Opens pkg_dir, runs it on the dump's input_ids (and media, see above) and records every
// intermediate, reduced to the dump's rows where the dump holds a subset; adds
// "logits_argmax" (float [S, 1]) when the dump has it. Errors name the dump, file or tensor.
int g4_capture_dump(const char *pkg_dir, g4_backend *be, g4_npz *ref, const char *ref_path,
                    g4_capture *out);

// The dump's input_ids (1-D int64/int32, non-empty) as a new int32 array of *n ids.
int g4_dump_input_ids(g4_npz *ref, const char *ref_path, int32_t **ids, int *n);

// Member `name` (image_file / audio_file: uint8 UTF-8, relative to the dump's directory) as a
// path (new string).
int g4_dump_media_path(g4_npz *ref, const char *ref_path, const char *name, char **out);

// Sets the dump's clip bounds (clip_names / clip_bounds, tools/python/mm_reference.py --clip)
// on the towers' clipped linears, loading the package's towers first. Every name must be a
// clipped linear of the package.
int g4_dump_apply_clip_bounds(g4_mm_towers *tw, g4_npz *ref, const char *ref_path);

#endif

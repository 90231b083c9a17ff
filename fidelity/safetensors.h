// safetensors.h: read-only .safetensors files (HF checkpoints and reference dumps), mapped.
//
// Layout: u64 little-endian N, then N bytes of JSON {"name": {"dtype": "F16", "shape": [..],
// "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}, then the data buffer;
// offsets are relative to the buffer. Read dtypes: F32 F16 BF16 I64 I32 U8 BOOL (as the ONNX
// enum values G4_DT_FLOAT ... G4_DT_BOOL, so the loader's g4_tensor helpers apply). Checked at
// open: the header fits the file, each entry has a known dtype, a shape of non-negative
// integers, begin <= end inside the buffer, end - begin == numel x element size, no two
// tensors overlap and no name repeats. Errors are one line naming the file and the tensor.
#ifndef G4_SAFETENSORS_H
#define G4_SAFETENSORS_H

#include "loader/onnx_model.h"

typedef struct g4_safetensors {
    char *path;
    int n_tensors;
    g4_tensor *tensors; // in header order; data points into the mapped file (unaligned possible)
    struct g4_st_private *priv;
} g4_safetensors;

// Maps path and validates its header.
int g4_safetensors_open(const char *path, g4_safetensors **out);
// Parses an in-memory file (for the fuzzer and tests); bytes must outlive the result.
int g4_safetensors_parse(const uint8_t *bytes, size_t size, const char *path_for_errors,
                         g4_safetensors **out);
void g4_safetensors_close(g4_safetensors *st);
// Tensor by exact name, or NULL.
const g4_tensor *g4_safetensors_get(const g4_safetensors *st, const char *name);

#endif

// npy.h: numpy .npy and .npz files (the HF reference dumps and `g4cu logits --out`).
//
// .npy: magic "\x93NUMPY", version 1.x (uint16 header length), 2.x or 3.x (uint32), then a
// Python-literal dict {'descr': '<f4', 'fortran_order': False, 'shape': (S, V), } and the raw
// little-endian C-order data. Read dtypes: <f4 <f2 <f8 <i8 <i4 |b1 |u1 (as G4_DT_FLOAT,
// FLOAT16, DOUBLE, INT64, INT32, BOOL, UINT8). fortran_order True, big-endian and structured
// dtypes are errors. A 0-d array has ndim 0 and one element.
//
// .npz: a zip archive of .npy members (np.savez: stored; np.savez_compressed: deflated). We
// read the central directory ourselves (zip64 records and extra fields included, which numpy
// writes for large members), inflate with zlib, check the CRC-32 and parse each member as .npy.
// Members are parsed when first asked for, so opening a large dump is cheap.
//
// Every malformed input is a G4_EUSER error with one line naming the file, the member and
// what was expected; nothing here trusts a size or offset it has not checked (fuzzed).
#ifndef G4_NPY_H
#define G4_NPY_H

#include "loader/onnx_model.h"

typedef struct {
    char *name;                 // member name without ".npy"; a .npy file's base name
    int dtype;                  // G4_DT_FLOAT, FLOAT16, DOUBLE, INT64, INT32, BOOL or UINT8
    int ndim;                   // 0 for a 0-d array
    int64_t shape[G4_MAX_DIMS]; // C order (last dim fastest)
    uint64_t numel;             // product of shape (1 for 0-d)
    uint64_t nbytes;            // numel x element size
    void *data;                 // owned, malloc-aligned, little-endian; NULL when nbytes == 0
} g4_array;

void g4_array_free(g4_array *a);
// A g4_tensor view of a (borrowing its name and data) so g4_tensor_get & co. apply.
g4_tensor g4_array_view(const g4_array *a);
// Copies the numel elements as float32 (any supported dtype; int64 beyond 2^24 rounds).
void g4_array_to_f32(const g4_array *a, float *dst);
// "[2, 3]" into buf.
const char *g4_array_shape_str(const g4_array *a, char *buf, size_t n);

// Reads a .npy file.
int g4_npy_read(const char *path, g4_array *out);
// Parses .npy bytes; `what` names them in errors ("dump.npz: member 'x.npy'"); `name` becomes
// out->name. The bytes are copied.
int g4_npy_parse(const uint8_t *bytes, size_t size, const char *what, const char *name,
                 g4_array *out);
// Writes a C-order .npy (format 1.0) atomically. dtype: G4_DT_FLOAT, G4_DT_INT32 or
// G4_DT_INT64; ndim 0..G4_MAX_DIMS.
int g4_npy_write(const char *path, int dtype, int ndim, const int64_t *shape, const void *data);

typedef struct g4_npz g4_npz;

// Opens path (mapped read-only) and reads its central directory.
int g4_npz_open(const char *path, g4_npz **out);
// Reads an in-memory archive (for the fuzzer); bytes must outlive the g4_npz.
int g4_npz_parse(const uint8_t *bytes, size_t size, const char *path_for_errors, g4_npz **out);
void g4_npz_close(g4_npz *z);

// Number of members and the name of member i without ".npy" (in archive order).
int g4_npz_count(const g4_npz *z);
const char *g4_npz_name(const g4_npz *z, int i);
// Index of member `name` (with or without the ".npy" suffix), or -1.
int g4_npz_find(const g4_npz *z, const char *name);
// Member `name` (with or without ".npy"), inflated and parsed on first use and kept until
// close. An absent name is an error that names the archive.
int g4_npz_get(g4_npz *z, const char *name, const g4_array **out);
// Member i (0 <= i < count).
int g4_npz_get_index(g4_npz *z, int i, const g4_array **out);

#endif

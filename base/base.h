// base.h: what every g4 layer shares: error reporting, checked allocation and sizes, fp16/bf16
// conversion, files (mapped, read whole, written atomically), a string -> int map.
//
// Errors: library functions return G4_OK (0) or a negative code and leave one line in a
// thread-local buffer (g4_error()). The line names the file, the tensor or value and what was
// expected, so a command can print it as is and exit 1 (user error) or 2 (internal error).
#ifndef G4_BASE_H
#define G4_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    G4_OK = 0,
    G4_EUSER = -1,     // bad input: file, config, tensor or argument (exit code 1)
    G4_EINTERNAL = -2, // a bug or an environment failure (exit code 2)
};

#if defined(__GNUC__)
#define G4_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define G4_NORETURN __attribute__((noreturn))
#else
#define G4_PRINTF(a, b)
#define G4_NORETURN
#endif

// Records the message (printf-style) and returns code, so callers write `return g4_fail(...)`.
int g4_fail(int code, const char *fmt, ...) G4_PRINTF(2, 3);
// The last recorded message of this thread ("" when none).
const char *g4_error(void);
// Prefixes the recorded message with "<ctx>: " (to add the file name at an outer level).
void g4_error_prefix(const char *fmt, ...) G4_PRINTF(1, 2);
// Replaces every "from" in the recorded message with "to": a path the code opened on the
// caller's behalf (a memfd's /proc/self/fd/N) becomes the name the caller knows it by.
void g4_error_rename(const char *from, const char *to);
// Aborts with file:line when an invariant the code relies on is false (not for user input).
#define G4_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) g4_assert_failed(#cond, __FILE__, __LINE__);                                  \
    } while (0)
G4_NORETURN void g4_assert_failed(const char *what, const char *file, int line);
// The precondition idiom: what a function requires of its caller (the types, shapes and ranges
// an op supports). When cond is false: one line "g4cu: internal error: <message>: requires
// <cond> (file:line)" with the values in the printf-style message, and exit code 2 (the
// internal-error contract: a caller bug; user input is checked before it gets here and refused
// with g4_fail(G4_EUSER, ...)). kernels/ uses it through G4K_REQUIRE and the backends' need*.
#define G4_REQUIRE(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) g4_require_failed(#cond, __FILE__, __LINE__, __VA_ARGS__);                    \
    } while (0)
G4_NORETURN void g4_require_failed(const char *cond, const char *file, int line, const char *fmt,
                                   ...) G4_PRINTF(4, 5);

// Allocation that never returns NULL (aborts with the size on failure).
void *g4_malloc(size_t n);
void *g4_calloc(size_t n, size_t size);
void *g4_realloc(void *p, size_t n);
char *g4_strdup(const char *s);
char *g4_strndup(const char *s, size_t n);
// printf into a new string.
char *g4_sprintf(const char *fmt, ...) G4_PRINTF(1, 2);

// 1 when the environment variable `name` is set to exactly `value` (the engine's A/B switches:
// G4_FUSE=0, G4_QKV=0, G4_BATCH_GRAPH=0, ...).
int g4_env_is(const char *name, const char *value);

// The integer in environment variable `name` (*out = def when unset or empty); a value that is
// not an integer in [lo, hi] fails with the one-line error "NAME 'v': expected an integer lo to
// hi" (G4_EUSER). The A/B knobs of the quantize methods (G4_IMATRIX_*).
int g4_env_int(const char *name, int def, int lo, int hi, int *out);

// 64-bit FNV-1a over n bytes, continuing from h (start with G4_HASH64_INIT): identity checks
// (eval's fingerprints), not security.
#define G4_HASH64_INIT 1469598103934665603ull
uint64_t g4_hash64(uint64_t h, const void *data, size_t n);

// Overflow-checked size arithmetic: return 0 and leave *out alone on overflow.
int g4_mul_u64(uint64_t a, uint64_t b, uint64_t *out);
int g4_add_u64(uint64_t a, uint64_t b, uint64_t *out);

// --- half precision ---------------------------------------------------------------------
// IEEE binary16 -> float32, exact for every input including subnormals, inf and NaN.
static inline float g4_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { // subnormal: normalise the mantissa
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// float32 -> IEEE binary16, round to nearest even (as numpy/torch .half() do).
static inline uint16_t g4_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) // inf or NaN (keep NaN quiet and non-zero)
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // rounds to >= 65520: inf
    if (absx < 0x38800000u) {                                    // result is subnormal or zero
        if (absx < 0x33000000u) return (uint16_t)sign;           // < 2^-25: rounds to zero
        uint32_t e = absx >> 23;
        uint32_t man = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; // 14..24
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

// bfloat16 is the upper half of a float32.
static inline float g4_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// float32 -> bfloat16 bits, round to nearest even (NaN stays NaN).
static inline uint16_t g4_bf16_round(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Rounds a float32 to the nearest fp16 value and back (what storing as fp16 does).
static inline float g4_round_f16(float f) { return g4_f16_to_f32(g4_f32_to_f16(f)); }

// --- files ------------------------------------------------------------------------------
// Inputs: every file g4 reads is opened by g4_open_input, which refuses anything but a regular
// file before reading a byte (a FIFO would block, /dev/zero and /dev/urandom never end, a
// directory is not a file) and a file larger than the caller's bound for its format. It opens
// with O_NONBLOCK, so that even opening a FIFO cannot hang, and clears it once the file is known
// to be regular. The device and inode of every input are remembered (however the file was
// named), so that an output can refuse to replace one (g4_check_output).
//
// Size bounds, per format (bytes; what the readers load into memory whole):
#define G4_MAX_JSON_BYTES      (64ull << 20) // JSON configs and run files (KBs in practice)
#define G4_MAX_TOKENIZER_BYTES (1ull << 30)  // tokenizer.json (E2B's: 32 MB)
#define G4_MAX_ONNX_BYTES      (2ull << 30)  // model.onnx: protobuf's 2 GiB message limit
#define G4_MAX_LINES_BYTES     (1ull << 30)  // manifests, predictions (MBs for 10k items)
#define G4_MAX_IMAGE_BYTES     (1ull << 30)  // PNG / JPEG (PIL's pixel limit is ~0.5 GB RGB)
#define G4_MAX_AUDIO_BYTES     (16ull << 30) // WAV / FLAC (only the head is decoded)
#define G4_MAX_TEXT_BYTES      (64ull << 20) // text read from stdin (--prompt -, tokenize -)
#define G4_MAX_READ_BYTES      (1ull << 30)  // g4_read_file without a format's bound
#define G4_NO_MAX_BYTES        UINT64_MAX    // mapped data (model.onnx.data, dumps): no bound

// Opens path read-only (O_CLOEXEC) after checking it is a regular file of at most max_bytes;
// *fd is blocking, *size its size. Errors are one line naming the path: "cannot open: <errno>",
// "is a FIFO / a character device / a directory ..., not a regular file", "N bytes, over the
// M-byte limit for this file".
int g4_open_input(const char *path, uint64_t max_bytes, int *fd, uint64_t *size);

// A read-only memory map of a whole file.
typedef struct {
    char *path;
    const uint8_t *data; // NULL for an empty file
    uint64_t size;
} g4_mapped_file;

// Maps path read-only (through g4_open_input; no size bound). Errors name the path.
int g4_map_file(const char *path, g4_mapped_file *out);
// The same with a size bound.
int g4_map_file_max(const char *path, uint64_t max_bytes, g4_mapped_file *out);
void g4_unmap_file(g4_mapped_file *m);
// Reads a whole file into a NUL-terminated buffer (through g4_open_input, at most
// G4_MAX_READ_BYTES; g4_read_file_max takes the format's bound).
int g4_read_file(const char *path, char **data, size_t *size);
int g4_read_file_max(const char *path, uint64_t max_bytes, char **data, size_t *size);
// Reads all of fd (a pipe: stdin) into a NUL-terminated buffer, at most max_bytes; `what`
// names it in errors ("stdin").
int g4_read_fd(int fd, const char *what, uint64_t max_bytes, char **data, size_t *size);
// 1 when path exists and is a directory / a regular file.
int g4_is_dir(const char *path);
int g4_is_file(const char *path);
// dir + "/" + name (new string).
char *g4_path_join(const char *dir, const char *name);

// Outputs: every file g4 writes is checked by g4_check_output first, which refuses a target that
// exists and is neither a regular file, a FIFO nor a character device (a directory, a block
// device, a socket) and a target that is one of this process's inputs (the same device and
// inode: a hard link, a symlink or another spelling of an input's name), so that an output
// never destroys what it was made from. A FIFO, a character device (/dev/null, a terminal) and
// a file named by an open descriptor (/dev/stdout, /dev/fd/N, /proc/self/fd/N) are written in
// place, appending, as a stream: never replaced by a new file.
int g4_check_output(const char *path);
// An output being written: a temporary file beside path, renamed over it at commit; or, for
// the in-place targets above, path itself.
typedef struct {
    int fd;
    char *tmp;  // the temporary file (NULL: written in place)
    char *path; // the target
} g4_out_file;
// g4_check_output, then the temporary file (created exclusively) or path opened in place.
int g4_out_open(const char *path, g4_out_file *o);
int g4_out_write(g4_out_file *o, const void *data, size_t size);
// Closes, and renames the temporary file over the target; g4_out_abort removes it instead.
int g4_out_commit(g4_out_file *o);
void g4_out_abort(g4_out_file *o);
// Writes data to path after g4_check_output: a new temporary file beside it, then rename, so a
// failed or interrupted write never leaves a half-written file under the name (in place for a
// FIFO, a character device or /dev/stdout).
int g4_write_file_atomic(const char *path, const void *data, size_t size);
// Opens path for appending (created when missing) after g4_check_output; refuses a non-regular
// file (it is read back: eval's predictions), also one that appears meanwhile. Returns the fd
// in *fd.
int g4_open_output_append(const char *path, int *fd);
// Input directories (a package): an output directory may be neither one of them nor inside one.
void g4_note_input_dir(const char *dir);
// G4_OK when dir (existing or about to be created) is not an input directory and lies in none
// (compared by device and inode up the parent chain, not by name); else a user error.
int g4_check_output_dir(const char *dir);
// A file this process reads and then rewrites itself (eval's run and predictions files, which
// a resume continues): it stops counting as an input that an output must not replace.
void g4_forget_input(const char *path);

// --- string -> int map (open addressing; keys are borrowed, not copied) -------------------
typedef struct {
    const char **keys;
    int *vals;
    size_t cap; // power of two
    size_t n;
} g4_strmap;

void g4_strmap_init(g4_strmap *m, size_t expected);
void g4_strmap_free(g4_strmap *m);
// Inserts key -> val; returns 0 when the key was already present (its value is left as is).
int g4_strmap_put(g4_strmap *m, const char *key, int val);
// The value of key, or -1 when absent.
int g4_strmap_get(const g4_strmap *m, const char *key);

#ifdef __cplusplus
}
#endif

#endif

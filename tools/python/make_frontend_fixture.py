#!/usr/bin/env python3
"""Fixtures for the image and audio front ends (tests/test_frontends.c), from HF transformers.

Writes synthetic media (PNG in every colour type PIL distinguishes, Adam7 interlaced, JPEG,
WAV 16-bit / float / 8-bit stereo, FLAC) under OUT/media and, under OUT/ref, what the HF
processors make of them. uint8 pictures are stored delta coded (delta2d below) so that zlib
shrinks them; the reader takes running sums along columns, then rows, mod 256.

  images.npz   per case: <name>.pixd uint8 [k, 768]: round(pixel_values * 255) of real patches
               0, S, 2S, ... and the last (S = the manifest's PATCH_STRIDE), each delta coded as
               a 16x16x3 block (the script checks pixel_values == uint8 * float32(1/255)
               exactly, so the uint8 form is lossless); <name>.pos int32 [n, 2]
               image_position_ids of all real patches. HF's padding rows are checked here
               (zero patches at (-1, -1)) and not stored; the manifest's CHECKSUM covers every
               patch.
  decode.npz   <name>.rgbd uint8 [h, w, 3]: PIL Image.open(f).convert("RGB"), the decoder's
               reference, for the images up to 200x200.
  resize.npz   r<i>.ind / r<i>.outd uint8 [h, w, 3]: torchvision tvF.resize(uint8, BICUBIC,
               antialias=True) on noise / synthetic images of many shapes (the resampler alone).
  audio.npz    per clip: <name>.frames int32 [k] (the frames stored), <name>.hf float32 [k, 128]
               HF's input_features at those frames, <name>.oracle float32 [k, 128] the same
               extractor code run on the float64 waveform (its FFT then runs in float64: what
               our C computes), <name>.mask uint8 [T], <name>.wave float32 [m] and
               <name>.wave_at int32 [m]: samples of the 16 kHz waveform HF saw.
  melbank.npz  window float32 [320], mel_filters float64 [257, 128] of the extractor.
  manifest.txt one line per case with the sizes and counts HF reported (format in its comments).

The HF side is what AutoProcessor uses in transformers 5.17: Gemma4ImageProcessor (torchvision
backend) on PIL images, and Gemma4AudioFeatureExtractor on the waveform librosa.load(path,
sr=16000) would give (soundfile float32 samples, channel mean, soxr.resample "soxr_hq",
fix_length to ceil) - librosa itself is not installed, those four steps are done here with the
same libraries. Both processors are built from the package's image_processor.json and
audio_feature_extraction.json; nothing is downloaded.

Usage (venv with torch, torchvision, transformers, pillow, soundfile, soxr):
  python tools/python/make_frontend_fixture.py [--package tests/fixtures/mobius-tiny-f16/package]
      [--out tests/fixtures/frontends]
"""
import argparse
import json
import math
import os
import struct
import zlib

import numpy as np
import soundfile as sf
import soxr
import torch
import torchvision
import transformers
from PIL import Image
from torchvision.transforms.v2 import functional as tvF
from transformers.feature_extraction_utils import BatchFeature
from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
from transformers.models.gemma4.image_processing_gemma4 import (Gemma4ImageProcessor,
                                                                get_aspect_ratio_preserving_size)
from transformers.models.gemma4.processing_gemma4 import Gemma4Processor

SEED = 20260504
INTERLACED = []  # the picture written as an Adam7 PNG, to check PIL reads the file back as it


# --- media ---------------------------------------------------------------------------------
def synth_rgb(h, w, rng, noise=True):
    """Smooth gradients, a sinusoid, hard-edged shapes, 1-px lines and a small noise block: the
    edges and lines exercise the cubic's negative lobes and the uint8 clamping."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 100 * np.sin(2 * np.pi * xx / (w / 1.5 + 7)) * np.cos(2 * np.pi * yy / (h / 2 + 5))
    g = 255 * xx / max(w - 1, 1)
    b = 255 * yy / max(h - 1, 1)
    img = np.stack([r, g, b], -1)
    cy, cx, rad = h * 0.6, w * 0.3, max(2.0, min(h, w) * 0.25)
    img[(yy - cy) ** 2 + (xx - cx) ** 2 < rad**2] = (250, 20, 40)
    img[int(h * 0.1):int(h * 0.1) + max(1, h // 5), int(w * 0.6):int(w * 0.6) + max(1, w // 4)] = (5, 5, 5)
    img[:, int(w * 0.8)::max(2, w // 9)] = 255  # thin lines
    if noise:
        nh, nw = min(h, 24), min(w, 24)
        img[h - nh:, w - nw:] = rng.integers(0, 256, (nh, nw, 3))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def delta2d(a):
    """uint8 [n, rows, cols, ch] -> the 2-D difference inside each block, mod 256:
    d = x - x[col-1] - x[row-1] + x[row-1][col-1] (x = 0 outside the block). zlib shrinks the
    smooth parts of pictures to almost nothing this way. The reader undoes it with running sums
    along cols, then rows (mod 256)."""
    q = np.diff(np.diff(a.astype(np.int16), axis=2, prepend=0), axis=1, prepend=0)
    d = (q % 256).astype(np.uint8)
    assert np.array_equal((np.cumsum(np.cumsum(d.astype(np.int64), axis=2), axis=1) % 256).astype(np.uint8), a)
    return d


def checksum(u8):
    """Position-weighted sum of every uint8 pixel value of every real patch: covers the patches
    the fixture does not store (any single difference changes it)."""
    flat = u8.reshape(-1).astype(np.int64)
    return int(np.sum(flat * (np.arange(flat.size, dtype=np.int64) % 251 + 1)))


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_png_raw(path, w, h, color_type, depth, rows, plte=None, trns=None, interlace=0):
    """A PNG written by hand, for the sample formats PIL cannot save (16-bit RGB, 16-bit
    gray+alpha, 4-bit gray, Adam7 interlacing). rows: list of bytes (filter type 0 is
    prepended); for interlace=1, the concatenated rows of the 7 passes."""
    raw = b"".join(b"\x00" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, interlace))
    if plte is not None:
        out += png_chunk(b"PLTE", plte)
    if trns is not None:
        out += png_chunk(b"tRNS", trns)
    out += png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(out)


def make_images(media, rng):
    """(name, file, max_soft_tokens, patch_stride): every patch_stride-th patch's pixels are
    stored (plus the last); the colour-format variants store a subset to keep the fixture small,
    their decoding is checked in full through decode.npz. Sizes below are (height, width)."""
    cases = []

    def add(name, fname, mst, stride=1):
        cases.append((name, fname, mst, stride))

    Image.fromarray(synth_rgb(96, 96, rng)).save(f"{media}/square_rgb.png")
    add("square_rgb", "square_rgb.png", 70)
    alpha = (np.arange(300)[None, :, None] * 255 // 299 + np.zeros((80, 1, 1), int)).astype(np.uint8)
    alpha[::7] = 0  # fully transparent rows keep their colour: convert("RGB") drops alpha
    rgba = np.concatenate([synth_rgb(80, 300, rng), alpha], -1)
    Image.fromarray(rgba, "RGBA").save(f"{media}/wide_rgba.png")
    add("wide_rgba", "wide_rgba.png", 70)
    Image.fromarray(synth_rgb(170, 50, rng)[..., 1]).save(f"{media}/tall_gray.png")
    add("tall_gray", "tall_gray.png", 70, 5)
    pal = Image.fromarray(synth_rgb(90, 70, rng)).quantize(colors=37, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    pal.info["transparency"] = 3
    pal.save(f"{media}/palette_trns.png", transparency=3)
    add("palette_trns", "palette_trns.png", 70, 5)
    g16 = (synth_rgb(30, 40, rng)[..., 0].astype(np.uint16) * 257 // 300).astype(np.uint16)
    g16[::3] = rng.integers(0, 65536, g16[::3].shape)  # values above 255 (PIL clips them)
    Image.fromarray(g16).save(f"{media}/gray16.png")
    add("gray16", "gray16.png", 70, 5)
    # smooth high bytes, random low bytes: PIL keeps the high byte (truncates, never rounds)
    rgb16 = (synth_rgb(21, 33, rng, noise=False).astype(np.uint16) << 8 | rng.integers(0, 256, (21, 33, 3))).astype(">u2")
    write_png_raw(f"{media}/rgb16.png", 33, 21, 2, 16, [r.tobytes() for r in rgb16])
    add("rgb16", "rgb16.png", 70, 5)
    la16 = np.stack([synth_rgb(20, 20, rng, noise=False)[..., 1].astype(np.uint16) << 8 | rng.integers(0, 256, (20, 20)),
                     rng.integers(0, 65536, (20, 20))], -1).astype(">u2")
    write_png_raw(f"{media}/la16.png", 20, 20, 4, 16, [r.tobytes() for r in la16])
    add("la16", "la16.png", 70, 5)
    la8 = np.stack([synth_rgb(45, 45, rng)[..., 2], rng.integers(0, 256, (45, 45), dtype=np.uint8)], -1)
    Image.fromarray(la8, "LA").save(f"{media}/la8.png")
    add("la8", "la8.png", 70, 5)
    Image.fromarray(synth_rgb(29, 37, rng)[..., 0] > 128).save(f"{media}/bw1.png")
    add("bw1", "bw1.png", 70, 5)
    g4 = (synth_rgb(17, 23, rng, noise=False)[..., 0] >> 4).astype(np.uint8)
    packed = [bytes(((r[i] << 4) | (r[i + 1] if i + 1 < len(r) else 0)) for i in range(0, len(r), 2)) for r in g4]
    write_png_raw(f"{media}/gray4.png", 23, 17, 0, 4, packed)
    add("gray4", "gray4.png", 70, 5)
    il = synth_rgb(23, 37, rng)
    INTERLACED.append(il)
    passes = []  # Adam7: (x0, y0, dx, dy) of the 7 passes, each its own sub-image of rows
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)):
        sub = il[y0::dy, x0::dx]
        if sub.size:
            passes += [r.tobytes() for r in sub]
    write_png_raw(f"{media}/interlaced.png", 37, 23, 2, 8, passes, interlace=1)
    add("interlaced", "interlaced.png", 70, 5)
    Image.fromarray(synth_rgb(72, 96, rng)).save(f"{media}/photo.jpg", quality=90)  # 4:2:0
    add("photo_jpg", "photo.jpg", 70, 5)
    Image.fromarray(synth_rgb(48, 64, rng)[..., 0]).save(f"{media}/gray.jpg", quality=85)
    add("gray_jpg", "gray.jpg", 70, 5)
    Image.fromarray(synth_rgb(480, 640, rng, noise=False)).save(f"{media}/big_down.png", optimize=True)
    add("big_down", "big_down.png", 70)  # 307200 px > 70-token cap: a 0.72x downscale
    Image.fromarray(synth_rgb(384, 384, rng, noise=False)).save(f"{media}/exact384.png", optimize=True)
    add("exact384", "exact384.png", 70)  # already the target size: no resize
    xx = np.arange(20000)
    strip = np.stack([128 + 120 * np.sin(2 * np.pi * xx / 700.0), (xx // 1000 % 2) * 255, xx * 255 // 19999], -1)
    strip = np.repeat(strip[None], 10, 0)
    strip[:, :, 0] += np.arange(10)[:, None] * 12  # some vertical detail for the 10 -> 48 upscale
    strip[9, :, 2] = 0
    Image.fromarray(np.clip(strip, 0, 255).astype(np.uint8)).save(f"{media}/strip_20000x10.png", optimize=True)
    add("strip_20000x10", "strip_20000x10.png", 70)
    Image.fromarray(np.array([[[200, 30, 90]]], np.uint8)).save(f"{media}/tiny_1x1.png")
    add("tiny_1x1", "tiny_1x1.png", 70)
    t53 = np.stack(list(np.meshgrid(np.arange(5) * 60, np.arange(3) * 120)) + [np.full((3, 5), 30)], -1)
    t53[1, 2] = (255, 0, 255)  # one bright pixel: ringing of the upscaling cubic
    Image.fromarray(t53.astype(np.uint8)).save(f"{media}/tiny_5x3.png")
    add("tiny_5x3", "tiny_5x3.png", 280, 3)
    Image.fromarray(synth_rgb(16, 16, rng)).convert("CMYK").save(f"{media}/cmyk.jpg")  # rejected
    return cases


def write_wav(path, rate, data, fmt):
    """A plain WAV by hand: fmt 1 = PCM (uint8 data: 8-bit unsigned), 3 = IEEE float32. No PEAK
    chunk (libsndfile stamps the time into one), so reruns write identical bytes.
    data: [n, ch]."""
    n, ch = data.shape
    body = data.tobytes()
    bits = data.dtype.itemsize * 8
    hdr = b"RIFF" + struct.pack("<I", 36 + len(body)) + b"WAVE"
    hdr += b"fmt " + struct.pack("<IHHIIHH", 16, fmt, ch, rate, rate * ch * bits // 8, ch * bits // 8, bits)
    hdr += b"data" + struct.pack("<I", len(body))
    with open(path, "wb") as f:
        f.write(hdr + body)


def speech_like(n, rate, rng):
    """Noise through two formant resonators with a 120 Hz pulse train and a 4 Hz syllabic
    envelope: broadband and non-stationary like speech."""
    t = np.arange(n) / rate
    src = rng.standard_normal(n) * 0.3
    src[(np.arange(n) % int(rate / 120)) == 0] += 3.0
    y = src.copy()
    for f0, bw in ((700.0, 130.0), (1800.0, 200.0)):
        r = math.exp(-math.pi * bw / rate)
        a1, a2 = -2 * r * math.cos(2 * math.pi * f0 / rate), r * r
        out = np.zeros(n)
        for i in range(n):
            out[i] = y[i] - a1 * (out[i - 1] if i else 0) - a2 * (out[i - 2] if i > 1 else 0)
        y = out
    env = 0.5 * (1 + np.sin(2 * np.pi * 4 * t)) ** 2
    y = y * env
    return 0.4 * y / np.max(np.abs(y))


def make_audio(media, rng):
    """(name, file, preemphasis)."""
    cases = []
    sf.write(f"{media}/silence_1s.wav", np.zeros(16000, np.int16), 16000, subtype="PCM_16")
    cases.append(("silence_1s", "silence_1s.wav", 0.0))
    t = np.arange(16037) / 16000
    tone = (0.5 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 3000 * t)).astype(np.float32)
    write_wav(f"{media}/tone_1s_f32.wav", 16000, tone.astype("<f4")[:, None], 3)
    cases.append(("tone_1s_f32", "tone_1s_f32.wav", 0.0))
    cases.append(("tone_preemph", "tone_1s_f32.wav", 0.97))
    sp = speech_like(58400, 8000, rng)
    sf.write(f"{media}/speech_7.3s_8k.flac", np.round(sp * 32767).astype(np.int16), 8000, subtype="PCM_16")
    cases.append(("speech_7.3s_8k", "speech_7.3s_8k.flac", 0.0))
    n = 22050
    t = np.arange(n) / 44100
    left = 0.6 * np.sin(2 * np.pi * 1000 * t)
    right = 0.5 * np.sin(2 * np.pi * (200 + 3000 * t) * t)
    u8 = np.clip(np.round(np.stack([left, right], -1) * 127 + 128), 0, 255).astype(np.uint8)
    write_wav(f"{media}/stereo_44k_u8.wav", 44100, u8, 1)
    cases.append(("stereo_44k_u8", "stereo_44k_u8.wav", 0.0))
    n = 12000
    st = np.stack([speech_like(n, 48000, rng), 0.3 * np.sin(2 * np.pi * 5000 * np.arange(n) / 48000)], -1)
    sf.write(f"{media}/stereo_48k_16.wav", np.round(st * 32767).astype(np.int16), 48000, subtype="PCM_16")
    cases.append(("stereo_48k_16", "stereo_48k_16.wav", 0.0))
    n = 31 * 16000
    lng = np.zeros(n)
    t = np.arange(16000) / 16000
    for k, s in enumerate(range(0, 31, 3)):  # a 1 s burst every 3 s, the last one past 30 s
        f = 300 + 400 * k
        lng[s * 16000:(s + 1) * 16000] = 0.05 * np.sin(2 * np.pi * f * t) * np.hanning(16000)
    sf.write(f"{media}/long_31s.flac", np.round(lng * 32767).astype(np.int16), 16000, subtype="PCM_16")
    cases.append(("long_31s", "long_31s.flac", 0.0))
    sf.write(f"{media}/short_200.wav", np.round(speech_like(200, 16000, rng) * 32767).astype(np.int16), 16000,
             subtype="PCM_16")
    cases.append(("short_200", "short_200.wav", 0.0))
    return cases


# --- HF references ---------------------------------------------------------------------------
def librosa_like_load(path, sr):
    """librosa.load(path, sr=sr) for librosa >= 0.10 with its defaults: soundfile float32,
    to_mono (np.mean over channels), resample res_type="soxr_hq" then fix_length to
    ceil(n * sr / sr_native)."""
    y, sr_native = sf.read(path, dtype="float32", always_2d=False)
    y = y.T
    if y.ndim > 1:
        y = np.mean(y, axis=tuple(range(y.ndim - 1)))
    if sr_native != sr:
        ratio = float(sr) / sr_native
        n_samples = int(np.ceil(y.shape[-1] * ratio))
        y_hat = soxr.resample(y, sr_native, sr, quality="soxr_hq")
        if y_hat.shape[-1] > n_samples:
            y_hat = y_hat[:n_samples]
        elif y_hat.shape[-1] < n_samples:
            y_hat = np.pad(y_hat, (0, n_samples - y_hat.shape[-1]))
        y = np.asarray(y_hat, dtype=np.float32)
    return y.astype(np.float32)


def audio_tokens(mask):
    """Gemma4Processor.replace_audio_token's count, by calling it."""
    class P:
        boa_token, audio_token, eoa_token = "<A>", "@", "</A>"
    s = Gemma4Processor.replace_audio_token(P(), {"input_features_mask": [mask]}, 0)
    return s.count("@")


def select_frames(T, n_valid, k_max=40):
    """All frames of short clips; else the first 8, the last 8 valid, the first 2 invalid and
    an even spread."""
    if T <= k_max:
        return np.arange(T)
    idx = set(range(8)) | set(range(max(0, n_valid - 8), n_valid)) | set(range(n_valid, min(T, n_valid + 2)))
    idx |= set(np.linspace(0, T - 1, k_max - len(idx)).astype(int).tolist())
    return np.array(sorted(idx))


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", ".."))
    ap.add_argument("--package", default=os.path.join(root, "tests/fixtures/mobius-tiny-f16/package"))
    ap.add_argument("--out", default=os.path.join(root, "tests/fixtures/frontends"))
    args = ap.parse_args()
    media, ref = os.path.join(args.out, "media"), os.path.join(args.out, "ref")
    os.makedirs(media, exist_ok=True)
    os.makedirs(ref, exist_ok=True)
    rng = np.random.default_rng(SEED)
    torch.manual_seed(SEED)

    def op_attrs(path, key, typ):
        j = json.load(open(os.path.join(args.package, path)))
        for op in j[key]["transforms" if key == "processor" else "sequence"]:
            if op["operation"]["type"] == typ:
                return op["operation"]["attrs"]
        raise SystemExit(f"{path}: no {typ}")

    img_attrs = op_attrs("image_processor.json", "processor", "Gemma4ImageTransform")
    fe_attrs = op_attrs("audio_feature_extraction.json", "feature_extraction", "Gemma4LogMel")
    lines = [f"# made by tools/python/make_frontend_fixture.py (seed {SEED}); transformers "
             f"{transformers.__version__}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
             f"numpy {np.__version__}, pillow {Image.__version__}, soundfile {sf.__version__} "
             f"(libsndfile {sf.__libsndfile_version__}), soxr {soxr.__version__}"]

    # images
    lines.append("# image NAME FILE MAX_SOFT_TOKENS SRC_W SRC_H TGT_W TGT_H GRID_W GRID_H N_SOFT MAX_PATCHES "
                 "PATCH_STRIDE CHECKSUM")
    lines.append("#   images.npz NAME.pixd holds patches 0, S, 2S, ... and the last (S = PATCH_STRIDE);")
    lines.append("#   CHECKSUM = sum over all patches i, values j of u8[i][j] * ((i * 768 + j) % 251 + 1)")
    lines.append("# decode NAME FILE   (PIL convert(\"RGB\"), decode.npz NAME.rgbd, delta coded)")
    img_npz, dec_npz = {}, {}
    rescale = np.float32(1 / 255)
    for name, fname, mst, stride in make_images(media, rng):
        path = os.path.join(media, fname)
        proc = Gemma4ImageProcessor(patch_size=img_attrs["patch_size"], max_soft_tokens=mst,
                                    pooling_kernel_size=img_attrs["pooling_kernel_size"])
        assert proc.backend == "torchvision"
        src = Image.open(path)
        rgb = np.asarray(Image.open(path).convert("RGB"))
        if name == "interlaced":  # the hand-made Adam7 file decodes to the picture it encodes
            assert Image.open(path).info.get("interlace") == 1 and np.array_equal(rgb, INTERLACED[0])
        out = proc(images=[src], return_tensors="pt")
        pv = out["pixel_values"][0].numpy()
        pos = out["image_position_ids"][0].numpy()
        n_soft = int(out["num_soft_tokens_per_image"][0])
        k = img_attrs["pooling_kernel_size"]
        n = n_soft * k * k
        assert pv.dtype == np.float32 and pv.shape == (mst * k * k, 3 * img_attrs["patch_size"] ** 2)
        assert np.all(pv[n:] == 0) and np.all(pos[n:] == -1) and np.all(pos[:n] >= 0)
        u8 = np.rint(pv[:n] * 255).astype(np.uint8)
        assert np.array_equal(u8.astype(np.float32) * rescale, pv[:n]), name  # lossless as uint8
        p = img_attrs["patch_size"]
        grid_w, grid_h = int(pos[:n, 0].max()) + 1, int(pos[:n, 1].max()) + 1
        keep = np.unique(np.append(np.arange(0, n, stride), n - 1))
        assert len(keep) == (n - 1) // stride + 1 + ((n - 1) % stride != 0)
        img_npz[f"{name}.pixd"] = delta2d(u8[keep].reshape(len(keep), p, p, 3)).reshape(len(keep), -1)
        img_npz[f"{name}.pos"] = pos[:n].astype(np.int32)
        lines.append(f"image {name} media/{fname} {mst} {rgb.shape[1]} {rgb.shape[0]} {grid_w * p} "
                     f"{grid_h * p} {grid_w} {grid_h} {n_soft} {mst * k * k} {stride} {checksum(u8)}")
        if rgb.shape[0] * rgb.shape[1] <= 200 * 200:
            dec_npz[f"{name}.rgbd"] = delta2d(rgb[None])[0]
            lines.append(f"decode {name} media/{fname}")
    np.savez_compressed(os.path.join(ref, "images.npz"), **img_npz)
    np.savez_compressed(os.path.join(ref, "decode.npz"), **dec_npz)

    # the resize rule alone, over many sizes and every supported budget
    lines.append("# target H W MAX_SOFT_TOKENS TGT_H TGT_W (get_aspect_ratio_preserving_size)")
    sizes = [(896, 896), (480, 640), (1080, 1920), (224, 224), (10, 20000), (20000, 10), (1, 1), (1, 2),
             (3, 5), (47, 48), (48, 48), (49, 4000), (768, 768), (767, 769), (4000, 3000), (13000, 13000)]
    sizes += [tuple(int(v) for v in rng.integers(1, 5000, 2)) for _ in range(24)]
    for h, w in sizes:
        for mst in (70, 140, 280, 560, 1120):
            k = img_attrs["pooling_kernel_size"]
            th, tw = get_aspect_ratio_preserving_size(h, w, img_attrs["patch_size"], mst * k * k, k)
            lines.append(f"target {h} {w} {mst} {th} {tw}")

    # the resampler alone: random sizes from 1 pixel to 3x up / 8x down
    lines.append("# resize r<I> (resize.npz: r<I>.ind [h, w, 3] -> r<I>.outd [oh, ow, 3], delta coded)")
    rs_npz = {}
    # (h, w, out_h, out_w, content): n = uniform noise (every weight matters), s = the synthetic
    # picture; the last two shrink ~400x, where the weights are small enough that the int16
    # precision reaches its cap of 22 bits
    shapes = [(1, 1, 4, 7, "s"), (7, 5, 1, 1, "n"), (2, 3, 9, 2, "s"), (17, 33, 17, 11, "n"),
              (33, 17, 48, 96, "s"), (40, 40, 5, 5, "n"), (64, 48, 13, 150, "s"), (31, 1, 31, 7, "n"),
              (1, 29, 6, 29, "s"), (40, 52, 12, 15, "n"), (23, 19, 64, 45, "s"), (50, 120, 25, 300, "n"),
              (9, 700, 30, 11, "s"), (3, 2400, 2, 6, "s"), (2000, 2, 5, 3, "s")]
    for i, (h, w, oh, ow, kind) in enumerate(shapes):
        x = rng.integers(0, 256, (h, w, 3), dtype=np.uint8) if kind == "n" else synth_rgb(h, w, rng, noise=False)
        # channels-last strides, as pil_to_tensor gives HF (contiguous CHW trips a torch assert
        # for some tiny shapes in 2.11)
        y = tvF.resize(torch.from_numpy(x).permute(2, 0, 1), [oh, ow],
                       interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
        rs_npz[f"r{i}.ind"] = delta2d(x[None])[0]
        rs_npz[f"r{i}.outd"] = delta2d(y.permute(1, 2, 0).contiguous().numpy()[None])[0]
        lines.append(f"resize r{i}")
    np.savez_compressed(os.path.join(ref, "resize.npz"), **rs_npz)

    # audio
    lines.append("# audio NAME FILE PREEMPHASIS N_SAMPLES_16K T N_VALID N_TOKENS RESAMPLED")
    au_npz = {}
    fe0 = None
    for name, fname, pre in make_audio(media, rng):
        path = os.path.join(media, fname)
        params = dict(feature_size=fe_attrs["feature_size"], sampling_rate=fe_attrs["sampling_rate"],
                      frame_length_ms=fe_attrs["frame_length_ms"], hop_length_ms=fe_attrs["hop_length_ms"],
                      min_frequency=fe_attrs["min_frequency"], max_frequency=fe_attrs["max_frequency"],
                      preemphasis=pre, preemphasis_htk_flavor=bool(fe_attrs.get("preemphasis_htk_flavor", 1)),
                      fft_overdrive=bool(fe_attrs["fft_overdrive"]), mel_floor=fe_attrs["mel_floor"])
        fe = Gemma4AudioFeatureExtractor(**params)
        if fe0 is None:
            fe0 = fe
        info = sf.info(path)
        wave = librosa_like_load(path, fe.sampling_rate)
        out = fe([wave], return_tensors="np")  # batched, as Gemma4Processor calls it (a lone 1-D
        # array takes a path that fails in 5.17)
        feat, mask = out["input_features"][0], out["input_features_mask"][0]
        # the oracle: the same padding, then _extract_spectrogram on float64 samples
        bf = fe.pad(BatchFeature({"input_features": [np.asarray([wave]).T]}), padding="longest",
                    max_length=480000, truncation=True, pad_to_multiple_of=128, return_attention_mask=True)
        mel, m2 = fe._extract_spectrogram(bf["input_features"][0].T.astype(np.float64), bf["attention_mask"][0])
        oracle = mel.astype(np.float32) * m2[:, None]
        assert np.array_equal(m2, mask) and oracle.shape == feat.shape
        T, n_valid = feat.shape[0], int(mask.sum())
        idx = select_frames(T, n_valid)
        au_npz[f"{name}.frames"] = idx.astype(np.int32)
        au_npz[f"{name}.hf"] = feat[idx].astype(np.float32)
        au_npz[f"{name}.oracle"] = oracle[idx]
        au_npz[f"{name}.mask"] = mask.astype(np.uint8)
        if len(wave) <= 1024 * 3:
            at = np.arange(len(wave))
        else:
            mid = len(wave) // 2
            at = np.concatenate([np.arange(1024), np.arange(mid, mid + 1024), np.arange(len(wave) - 1024, len(wave))])
        au_npz[f"{name}.wave_at"] = at.astype(np.int32)
        au_npz[f"{name}.wave"] = wave[at]
        lines.append(f"audio {name} media/{fname} {pre} {len(wave)} {T} {n_valid} {audio_tokens(mask)} "
                     f"{int(info.samplerate != fe.sampling_rate)}")
        d = np.abs(feat.astype(np.float64) - oracle)
        print(f"{name}: T={T} valid={n_valid} tokens={audio_tokens(mask)} |hf - oracle| max {d.max():.3g}")
    np.savez_compressed(os.path.join(ref, "audio.npz"), **au_npz)
    np.savez_compressed(os.path.join(ref, "melbank.npz"), window=fe0.window.astype(np.float32),
                        mel_filters=np.asarray(fe0.mel_filters, np.float64))
    with open(os.path.join(args.out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    total = 0
    for d in (media, ref):
        for fn in sorted(os.listdir(d)):
            total += os.path.getsize(os.path.join(d, fn))
    print(f"fixture bytes: {total}")


if __name__ == "__main__":
    main()

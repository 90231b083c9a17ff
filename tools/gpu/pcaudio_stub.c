/* libpcaudio.so.0 without an audio device, for espeak-ng on the GPU machine (issue 35).
 *
 * libespeak-ng1 links libpcaudio0, which links PulseAudio and ALSA (and they X11, D-Bus,
 * systemd): libraries the GPU machine lacks. make_mm_data.py's `speech` step only writes WAV
 * files (espeak-ng -w), which never opens a device, so the eight entry points the library
 * imports are enough, each failing as "no device": create_audio_device_object gives none, and
 * every call on an object fails with ENODEV. Built there by tools/gpu/run.sh's mm_make:
 *   cc -shared -fPIC -o PREFIX/libpcaudio.so.0 tools/gpu/pcaudio_stub.c */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

struct audio_object;

struct audio_object *create_audio_device_object(const char *device, const char *app,
                                                const char *description) {
    (void)device, (void)app, (void)description;
    return NULL;
}

int audio_object_open(struct audio_object *o, int format, uint32_t rate, uint8_t channels) {
    (void)o, (void)format, (void)rate, (void)channels;
    return ENODEV;
}

void audio_object_close(struct audio_object *o) {
    (void)o;
}

void audio_object_destroy(struct audio_object *o) {
    (void)o;
}

int audio_object_write(struct audio_object *o, const void *data, size_t bytes) {
    (void)o, (void)data, (void)bytes;
    return ENODEV;
}

int audio_object_drain(struct audio_object *o) {
    (void)o;
    return ENODEV;
}

int audio_object_flush(struct audio_object *o) {
    (void)o;
    return ENODEV;
}

const char *audio_object_strerror(struct audio_object *o, int error) {
    (void)o, (void)error;
    return "no audio device (libpcaudio stub: espeak-ng -w only)";
}

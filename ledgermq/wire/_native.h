/* What the compiled wire functions share: big-endian reads and writes, the stored layout's
 * sizes. (The rules of _native.c hold in every file: lengths are checked before use, in int64.) */
#ifndef LEDGERMQ_NATIVE_H
#define LEDGERMQ_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define HEADER_SIZE 88  /* a stored message's fixed part before the body (IPv4 hosts) */

static inline int32_t rd32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                     ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline int16_t rd16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

static inline int64_t rd64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)rd32(p) << 32) | (uint32_t)rd32(p + 4));
}

static inline void wr32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

static inline void wr64(unsigned char *p, uint64_t v) {
    wr32(p, (uint32_t)(v >> 32)); wr32(p + 4, (uint32_t)v);
}

/* _native.c: message properties (pairs "key\x01value\x02") */
Py_ssize_t find_property(const unsigned char *r, Py_ssize_t n, const char *key, Py_ssize_t klen,
                         Py_ssize_t *vlen);
PyObject *decode_utf8(const unsigned char *p, Py_ssize_t n);
PyObject *index_keys(const unsigned char *r, Py_ssize_t n, PyObject *space);
/* Java's String.hashCode of a str (see message.java_string_hash) */
int java_hash_one(PyObject *s, int64_t *out, int utf8_first);

/* _native_send.c */
PyObject *read_send(PyObject *self, PyObject *ext);
extern const char read_send_doc[];

/* _native_frame.c */
int plain_int(PyObject *v, long long *out);  /* an int within long long, else 0 (the twin's) */
PyObject *binary_header_fields(PyObject *self, PyObject *arg);
extern const char binary_header_fields_doc[];
PyObject *binary_header_at(const unsigned char *b, int64_t n);  /* the same on bytes */
PyObject *frame_init(PyObject *self, PyObject *args);
extern const char frame_init_doc[];
PyObject *frames_in(PyObject *self, PyObject *args);
extern const char frames_in_doc[];
PyObject *encode_head(PyObject *self, PyObject *args);
extern const char encode_head_doc[];

/* _native_json.c */
PyObject *json_header_fields(PyObject *self, PyObject *arg);
extern const char json_header_fields_doc[];
PyObject *json_header_at(const unsigned char *b, Py_ssize_t n);  /* the same on bytes */

/* _native_store.c */
PyObject *put_single(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char put_single_doc[];

/* _native_walk.c */
PyObject *walk_positions(PyObject *self, PyObject *args);
extern const char walk_positions_doc[];
PyObject *scanned_columns(PyObject *self, PyObject *args);
extern const char scanned_columns_doc[];
PyObject *walk_entries(PyObject *self, PyObject *args);
extern const char walk_entries_doc[];
PyObject *run_views(PyObject *self, PyObject *args);
extern const char run_views_doc[];


/* _native_hpack.c */
PyObject *hpack_huffman(PyObject *self, PyObject *arg);
extern const char hpack_huffman_doc[];
PyObject *hpack_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char hpack_block_doc[];

#endif

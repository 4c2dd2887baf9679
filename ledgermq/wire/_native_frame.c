/* A remoting frame's binary (ROCKETMQ) header, read in one call (twin:
 * remoting/command.binary_header_fields).
 *
 *   code i16, language u8, version i16, opaque i32, flag i32,
 *   remark (i32 length + UTF-8), extFields (i32 total length, then per field
 *   i16 key length + key + i32 value length + value)
 *
 * A header it cannot read whole gets None: the pure twin then raises the FrameError that
 * says what is wrong, so the error texts live in one place.
 */
#include "_native.h"

const char binary_header_fields_doc[] =
    "binary_header_fields(raw) -> (code, language, version, opaque, flag, remark, ext) or None\n\n"
    "See remoting/command.binary_header_fields; None where the header is malformed.";

PyObject *binary_header_fields(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    const int64_t n = view.len;
    PyObject *remark = NULL, *ext = NULL, *key = NULL, *value = NULL, *out = NULL;
    int failed = 0;  /* a Python error (memory), not a malformed header */
    if (n < 17)
        goto done;
    int64_t p = 13, rlen = rd32(b + p);
    p += 4;
    if (rlen < 0 || p + rlen > n)
        goto done;
    if (rlen) {
        if (!(remark = decode_utf8(b + p, rlen))) {
            failed = 1;
            goto done;
        }
    } else {
        Py_INCREF(Py_None);
        remark = Py_None;
    }
    p += rlen;
    if (p + 4 > n)
        goto done;
    int64_t elen = rd32(b + p);
    p += 4;
    if (elen < 0 || p + elen > n)
        goto done;
    const int64_t end = p + elen;
    if (!(ext = PyDict_New())) {
        failed = 1;
        goto done;
    }
    while (p < end) {
        if (p + 2 > n)
            goto done;
        int64_t klen = rd16(b + p);
        p += 2;
        if (klen < 0 || p + klen > end)
            goto done;
        const unsigned char *k = b + p;
        p += klen;
        if (p + 4 > n)
            goto done;
        int64_t vlen = rd32(b + p);
        p += 4;
        if (vlen < 0 || p + vlen > end)
            goto done;
        key = decode_utf8(k, klen);
        value = key ? decode_utf8(b + p, vlen) : NULL;
        if (!value || PyDict_SetItem(ext, key, value) < 0) {
            failed = 1;
            goto done;
        }
        Py_CLEAR(key);
        Py_CLEAR(value);
        p += vlen;
    }
    out = Py_BuildValue("(iiiiiOO)", (int)rd16(b), (int)b[2], (int)rd16(b + 3), (int)rd32(b + 5),
                        (int)rd32(b + 9), remark, ext);
    if (!out)
        failed = 1;
done:
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    Py_XDECREF(key);
    Py_XDECREF(value);
    PyBuffer_Release(&view);
    if (failed)
        return NULL;
    if (!out)
        Py_RETURN_NONE;
    return out;
}

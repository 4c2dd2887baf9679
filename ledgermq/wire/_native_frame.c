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
    PyObject *out = binary_header_at(view.buf, view.len);
    PyBuffer_Release(&view);
    return out;
}

PyObject *binary_header_at(const unsigned char *b, const int64_t n) {
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
    if (failed)
        return NULL;
    if (!out)
        Py_RETURN_NONE;
    return out;
}

/* ---- writing: a frame's length prefix and header (twin: remoting/command.encode_head) ----
 *
 * JSON as orjson writes the header's document (keys in this order, no spaces, strings
 * with orjson's escapes); binary as the layout above. Anything outside the usual (a
 * value that is not a str, a number that does not fit, a lone surrogate) gets None and
 * the twin answers, raising where it raises. */

const char encode_head_doc[] =
    "encode_head(stype, code, language, version, opaque, flag, remark, ext, body_len)"
    " -> bytes or None\n\nSee remoting/command.encode_head.";

typedef struct {
    char *p;
    Py_ssize_t n, cap;
} Out;

static int out_room(Out *o, Py_ssize_t more) {
    if (o->n + more <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap * 2 > o->n + more ? o->cap * 2 : o->n + more + 256;
    char *p = PyMem_Realloc(o->p, (size_t)cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    o->p = p;
    o->cap = cap;
    return 0;
}

static int out_put(Out *o, const void *s, Py_ssize_t n) {
    if (out_room(o, n) < 0)
        return -1;
    memcpy(o->p + o->n, s, (size_t)n);
    o->n += n;
    return 0;
}

#define put_lit(o, s) out_put(o, s, (Py_ssize_t)sizeof(s) - 1)

static int out_be(Out *o, int64_t v, int width) {
    unsigned char b[4];
    for (int i = 0; i < width; i++)
        b[i] = (unsigned char)((uint64_t)v >> (8 * (width - 1 - i)));
    return out_put(o, b, width);
}

static int out_int(Out *o, long long v) {
    char s[24], *e = s + sizeof s, *p = e;  /* digits from the right (snprintf: 4x slower) */
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return out_put(o, p, e - p);
}

/* A str's UTF-8 (no surrogates), or NULL with no error set when it is not a str. */
static const char *utf8_of(PyObject *s, Py_ssize_t *n) {
    if (!PyUnicode_CheckExact(s))
        return NULL;
    const char *p = PyUnicode_AsUTF8AndSize(s, n);
    if (!p)
        PyErr_Clear();  /* a lone surrogate: the twin raises its error */
    return p;
}

/* A JSON string as orjson writes it: ", \ and control characters escaped, the rest raw
 * (copied in runs). */
static int out_json_str(Out *o, const char *s, Py_ssize_t n) {
    static const char hex[] = "0123456789abcdef";
    if (put_lit(o, "\"") < 0)
        return -1;
    Py_ssize_t run = 0;  /* start of the bytes not yet copied */
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        char esc[6] = {'\\', (char)c, '0', '0', hex[c >> 4], hex[c & 15]};
        int len = 2;
        switch (c) {
        case '"': case '\\': break;
        case '\b': esc[1] = 'b'; break;
        case '\t': esc[1] = 't'; break;
        case '\n': esc[1] = 'n'; break;
        case '\f': esc[1] = 'f'; break;
        case '\r': esc[1] = 'r'; break;
        default: esc[1] = 'u'; len = 6;
        }
        if (out_put(o, s + run, i - run) < 0 || out_put(o, esc, len) < 0)
            return -1;
        run = i + 1;
    }
    if (out_put(o, s + run, n - run) < 0)
        return -1;
    return put_lit(o, "\"");
}

/* 1: the header written; 0: leave it to the twin; -1: a Python error. */
static int json_head(Out *o, long long code, PyObject *language, long long version,
                     long long opaque, long long flag, PyObject *remark, PyObject *ext) {
    Py_ssize_t n;
    const char *lang = utf8_of(language, &n);
    if (!lang)
        return 0;
    if (put_lit(o, "{\"code\":") < 0 || out_int(o, code) < 0 ||
        put_lit(o, ",\"language\":") < 0 || out_json_str(o, lang, n) < 0 ||
        put_lit(o, ",\"version\":") < 0 || out_int(o, version) < 0 ||
        put_lit(o, ",\"opaque\":") < 0 || out_int(o, opaque) < 0 ||
        put_lit(o, ",\"flag\":") < 0 || out_int(o, flag) < 0 ||
        put_lit(o, ",\"serializeTypeCurrentRPC\":\"JSON\"") < 0)
        return -1;
    if (remark != Py_None) {
        const char *r = utf8_of(remark, &n);
        if (!r)
            return 0;
        if (put_lit(o, ",\"remark\":") < 0 || out_json_str(o, r, n) < 0)
            return -1;
    }
    if (PyDict_GET_SIZE(ext)) {
        if (put_lit(o, ",\"extFields\":{") < 0)
            return -1;
        Py_ssize_t pos = 0, kn, vn;
        PyObject *k, *v;
        int first = 1;
        while (PyDict_Next(ext, &pos, &k, &v)) {
            const char *ks = utf8_of(k, &kn), *vs = ks ? utf8_of(v, &vn) : NULL;
            if (!vs)
                return 0;
            if ((!first && put_lit(o, ",") < 0) || out_json_str(o, ks, kn) < 0 ||
                put_lit(o, ":") < 0 || out_json_str(o, vs, vn) < 0)
                return -1;
            first = 0;
        }
        if (put_lit(o, "}") < 0)
            return -1;
    }
    return put_lit(o, "}") < 0 ? -1 : 1;
}

static const char *const LANGUAGES[] = {"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG",
                                        "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST"};
enum { LANGUAGE_OTHER = 7 };

static int binary_head(Out *o, long long code, PyObject *language, long long version,
                       long long opaque, long long flag, PyObject *remark, PyObject *ext) {
    Py_ssize_t n, rn = 0;
    const char *lang = utf8_of(language, &n);
    if (!lang)
        return 0;
    int lc = LANGUAGE_OTHER;
    for (int i = 0; i < (int)(sizeof LANGUAGES / sizeof *LANGUAGES); i++) {
        if ((Py_ssize_t)strlen(LANGUAGES[i]) == n && !memcmp(LANGUAGES[i], lang, (size_t)n))
            lc = i;
    }
    if (code < -32768 || code > 32767 || version < -32768 || version > 32767 ||
        opaque < INT32_MIN || opaque > INT32_MAX || flag < INT32_MIN || flag > INT32_MAX)
        return 0;
    const char *r = "";
    if (remark != Py_None) {
        if (!(r = utf8_of(remark, &rn)))
            return 0;
    }
    unsigned char lb = (unsigned char)lc;
    if (out_be(o, code, 2) < 0 || out_put(o, &lb, 1) < 0 || out_be(o, version, 2) < 0 ||
        out_be(o, opaque, 4) < 0 || out_be(o, flag, 4) < 0 || out_be(o, rn, 4) < 0 ||
        out_put(o, r, rn) < 0)
        return -1;
    Py_ssize_t at = o->n, pos = 0, kn, vn;
    if (out_be(o, 0, 4) < 0)  /* extFields' length, set below */
        return -1;
    PyObject *k, *v;
    while (PyDict_Next(ext, &pos, &k, &v)) {
        if (v == Py_None)
            continue;
        const char *ks = utf8_of(k, &kn), *vs = ks ? utf8_of(v, &vn) : NULL;
        if (!vs || kn > 32767)
            return 0;
        if (out_be(o, kn, 2) < 0 || out_put(o, ks, kn) < 0 || out_be(o, vn, 4) < 0 ||
            out_put(o, vs, vn) < 0)
            return -1;
    }
    int64_t elen = o->n - at - 4;
    if (elen > INT32_MAX)
        return 0;
    for (int i = 0; i < 4; i++)
        o->p[at + i] = (char)((uint64_t)elen >> (8 * (3 - i)));
    return 1;
}

/* An int (not a bool) within long long, or 0 (leave it to the twin). */
int plain_int(PyObject *v, long long *out) {
    if (!PyLong_Check(v) || PyBool_Check(v))  /* (an IntEnum is written as its value) */
        return 0;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

PyObject *encode_head(PyObject *self, PyObject *args) {
    PyObject *stype_o, *code_o, *language, *version_o, *opaque_o, *flag_o, *remark, *ext,
        *body_len_o;
    if (!PyArg_UnpackTuple(args, "encode_head", 9, 9, &stype_o, &code_o, &language,
                           &version_o, &opaque_o, &flag_o, &remark, &ext, &body_len_o))
        return NULL;
    long long stype, code, version, opaque, flag, body_len;
    if (!PyDict_CheckExact(ext) || !plain_int(stype_o, &stype) || !plain_int(code_o, &code) ||
        !plain_int(version_o, &version) || !plain_int(opaque_o, &opaque) ||
        !plain_int(flag_o, &flag) || !plain_int(body_len_o, &body_len) || stype < 0 ||
        stype > 255 || body_len < 0)
        Py_RETURN_NONE;
    Out o = {PyMem_Malloc(512), 8, 512};
    if (!o.p)
        return PyErr_NoMemory();
    int done = stype == 1 ? binary_head(&o, code, language, version, opaque, flag, remark, ext)
                          : json_head(&o, code, language, version, opaque, flag, remark, ext);
    PyObject *result = NULL;
    int64_t hlen = o.n - 8, total = 4 + hlen + body_len;
    if (done == 1 && hlen < (1 << 24) && total <= INT32_MAX) {
        unsigned char *p = (unsigned char *)o.p;
        int64_t word = (stype << 24) | hlen;
        for (int i = 0; i < 4; i++) {
            p[i] = (unsigned char)((uint64_t)total >> (8 * (3 - i)));
            p[4 + i] = (unsigned char)((uint64_t)word >> (8 * (3 - i)));
        }
        result = PyBytes_FromStringAndSize(o.p, o.n);
    } else if (done >= 0) {
        Py_INCREF(Py_None);
        result = Py_None;
    }
    PyMem_Free(o.p);
    return result;
}

/* ---- a read's whole frames, decoded (twin: remoting/command.frames_in) ----
 *
 * Each frame: its 4-byte length, then the header's 4-byte word (serialization type in
 * the top byte, header length in the rest), the header, the body. Built into the
 * commands frame_init named, as decode_frame builds them. A length outside [4,
 * max_frame], a header longer than its frame, another serialization type or a header
 * its reader leaves to the twin: None, and the twin decodes the read (raising where it
 * raises). A frame not yet whole ends the list. */

static PyObject *command_type, *json_type, *rocketmq_type, *language_names, *other_name;

const char frame_init_doc[] =
    "frame_init(RemotingCommand, SerializeType.JSON, SerializeType.ROCKETMQ, language_names)"
    "\n\nWhat frames_in builds; until called it answers None (the twin decodes).";

PyObject *frame_init(PyObject *self, PyObject *args) {
    PyObject *cls, *json, *rocketmq, *names;
    if (!PyArg_ParseTuple(args, "OOOO!", &cls, &json, &rocketmq, &PyDict_Type, &names))
        return NULL;
    if (!other_name && !(other_name = PyUnicode_FromString("OTHER")))
        return NULL;
    Py_XSETREF(command_type, Py_NewRef(cls));
    Py_XSETREF(json_type, Py_NewRef(json));
    Py_XSETREF(rocketmq_type, Py_NewRef(rocketmq));
    Py_XSETREF(language_names, Py_NewRef(names));
    Py_RETURN_NONE;
}

const char frames_in_doc[] =
    "frames_in(buf, max_frame) -> ([RemotingCommand, ...], bytes used) or None\n\n"
    "See remoting/command.frames_in; None where the twin must judge.";

/* One frame's command (header at h, hlen bytes; body after it), or Py_None (unusual). */
static PyObject *command_at(const unsigned char *h, int64_t hlen, int stype,
                            const unsigned char *body, int64_t blen) {
    PyObject *fields = stype == 0 ? json_header_at(h, (Py_ssize_t)hlen)
                                  : binary_header_at(h, hlen);
    if (!fields || fields == Py_None)
        return fields;
    /* fields: (code, language, version, opaque, flag, remark, ext) */
    PyObject *language = PyTuple_GET_ITEM(fields, 1);
    if (stype == 1) {
        language = PyDict_GetItemWithError(language_names, language);
        if (!language && PyErr_Occurred()) {
            Py_DECREF(fields);
            return NULL;
        }
        if (!language)
            language = other_name;
    }
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)body, (Py_ssize_t)blen);
    PyObject *cmd = NULL;
    if (bytes) {
        PyObject *argv[9] = {
            PyTuple_GET_ITEM(fields, 0), PyTuple_GET_ITEM(fields, 3),
            PyTuple_GET_ITEM(fields, 4), PyTuple_GET_ITEM(fields, 5),
            PyTuple_GET_ITEM(fields, 6), bytes, language, PyTuple_GET_ITEM(fields, 2),
            stype == 0 ? json_type : rocketmq_type};
        cmd = PyObject_Vectorcall(command_type, argv, 9, NULL);
        Py_DECREF(bytes);
    }
    Py_DECREF(fields);
    return cmd;
}

PyObject *frames_in(PyObject *self, PyObject *args) {
    PyObject *buf;
    long long max_frame;
    if (!PyArg_ParseTuple(args, "OL", &buf, &max_frame))
        return NULL;
    if (!command_type)
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    const int64_t n = view.len;
    int64_t pos = 0;
    PyObject *list = PyList_New(0), *out = NULL;
    if (!list)
        goto done;
    while (n - pos >= 4) {
        const int64_t length = rd32(b + pos);  /* signed, as the twin's ">i" */
        if (length < 4 || length > max_frame)
            goto unusual;
        if (n - pos - 4 < length)
            break;
        const unsigned char *f = b + pos + 4;
        const uint32_t word = (uint32_t)rd32(f);
        const int stype = (int)(word >> 24);
        const int64_t hlen = word & 0xFFFFFF;
        if (hlen > length - 4 || (stype != 0 && stype != 1))
            goto unusual;
        PyObject *cmd = command_at(f + 4, hlen, stype, f + 4 + hlen, length - 4 - hlen);
        if (!cmd)
            goto done;
        if (cmd == Py_None) {
            Py_DECREF(cmd);
            goto unusual;
        }
        int rc = PyList_Append(list, cmd);
        Py_DECREF(cmd);
        if (rc < 0)
            goto done;
        pos += 4 + length;
    }
    out = Py_BuildValue("(OL)", list, (long long)pos);
    goto done;
unusual:
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(list);
    PyBuffer_Release(&view);
    return out;
}

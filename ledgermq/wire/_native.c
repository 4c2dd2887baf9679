/* The per-message byte work of the wire formats, compiled.
 *
 * Each function here has a pure-Python twin of the same signature (registered in
 * ledgermq/wire/native.py); the twin is the readable specification and the property
 * tests assert both give byte-for-byte the same results and the same errors.  Nothing
 * here does I/O or decides anything: it walks, checks and lays out bytes.
 *
 * Every length read from the input is checked against the buffer before it is used;
 * arithmetic on lengths is done in int64 so a hostile 32-bit length cannot wrap.
 */
#include "_native.h"

static PyObject *FormatError;  /* ledgermq.wire.message.MessageFormatError, set by init */

static PyObject *format_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (msg) {
        PyErr_SetObject(FormatError ? FormatError : PyExc_ValueError, msg);
        Py_DECREF(msg);
    }
    return NULL;
}

/* Where property `key` has its value in r[0:n] (pairs "key\x01value\x02"): the first pair
 * that starts with the key counts, as message.property_value reads it.  Returns the
 * value's start, or -1 when absent; *vlen gets its length. */
Py_ssize_t find_property(const unsigned char *r, Py_ssize_t n, const char *key,
                                Py_ssize_t klen, Py_ssize_t *vlen) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (n - i > klen && memcmp(r + i, key, klen) == 0 && r[i + klen] == 1) {
            Py_ssize_t s = i + klen + 1;
            const unsigned char *e = memchr(r + s, 2, n - s);
            *vlen = e ? (Py_ssize_t)(e - (r + s)) : n - s;
            return s;
        }
        const unsigned char *sep = memchr(r + i, 2, n - i);
        if (!sep)
            break;
        i = (Py_ssize_t)(sep - r) + 1;
    }
    return -1;
}

PyObject *decode_utf8(const unsigned char *p, Py_ssize_t n) {
    return PyUnicode_DecodeUTF8((const char *)p, n, "replace");
}

/* The keys the index files a message under: KEYS split on spaces, then UNIQ_KEY. */
PyObject *index_keys(const unsigned char *r, Py_ssize_t n, PyObject *space) {
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    Py_ssize_t vlen, at = find_property(r, n, "KEYS", 4, &vlen);
    if (at >= 0 && vlen > 0) {
        PyObject *text = decode_utf8(r + at, vlen);
        PyObject *parts = text ? PyUnicode_Split(text, space, -1) : NULL;
        Py_XDECREF(text);
        if (!parts)
            goto fail;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts); i++) {
            PyObject *k = PyList_GET_ITEM(parts, i);
            if (PyUnicode_GET_LENGTH(k) && PyList_Append(out, k) < 0) {
                Py_DECREF(parts);
                goto fail;
            }
        }
        Py_DECREF(parts);
    }
    at = find_property(r, n, "UNIQ_KEY", 8, &vlen);
    if (at >= 0 && vlen > 0) {
        PyObject *u = decode_utf8(r + at, vlen);
        if (!u)
            goto fail;
        int rc = PyList_Append(out, u);
        Py_DECREF(u);
        if (rc < 0)
            goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static int append_new(PyObject *list, PyObject *item) {
    if (!item)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

PyDoc_STRVAR(tags_and_keys_doc,
"tags_and_keys(raw, starts, ends) -> (tags, index_keys)\n\n"
"Per property region raw[starts[i]:ends[i]] (int64 arrays): its TAGS (None without one)\n"
"and its index keys (see scan_batch.tags_and_keys).");

static PyObject *tags_and_keys(PyObject *self, PyObject *args) {
    Py_buffer raw, st, en;
    if (!PyArg_ParseTuple(args, "y*y*y*", &raw, &st, &en))
        return NULL;
    PyObject *tags = NULL, *keys = NULL, *space = NULL, *result = NULL;
    Py_ssize_t n = st.len / 8;
    if (st.itemsize != 8 || en.itemsize != 8 || en.len != st.len) {
        PyErr_SetString(PyExc_ValueError, "starts and ends must be int64 arrays of one length");
        goto done;
    }
    if (!(tags = PyList_New(n)) || !(keys = PyList_New(n)) || !(space = PyUnicode_FromString(" ")))
        goto done;
    const unsigned char *b = raw.buf;
    const int64_t *a = st.buf, *z = en.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t lo = a[i] < 0 ? 0 : a[i], hi = z[i] > raw.len ? raw.len : z[i];
        Py_ssize_t len = hi > lo ? (Py_ssize_t)(hi - lo) : 0, vlen;
        Py_ssize_t at = find_property(b + lo, len, "TAGS", 4, &vlen);
        PyObject *tag = at >= 0 ? decode_utf8(b + lo + at, vlen) : (Py_INCREF(Py_None), Py_None);
        PyObject *k = tag ? index_keys(b + lo, len, space) : NULL;
        if (!k) {
            Py_XDECREF(tag);
            goto done;
        }
        PyList_SET_ITEM(tags, i, tag);
        PyList_SET_ITEM(keys, i, k);
    }
    result = PyTuple_Pack(2, tags, keys);
done:
    Py_XDECREF(tags); Py_XDECREF(keys); Py_XDECREF(space);
    PyBuffer_Release(&raw); PyBuffer_Release(&st); PyBuffer_Release(&en);
    return result;
}

PyDoc_STRVAR(split_batch_doc,
"split_batch(body) -> (bodies, props, flags, tags, index_keys)\n\n"
"The messages of a SEND_BATCH_MESSAGE body (see batch_body.split_batch).");

static PyObject *split_batch(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *mv = NULL, *space = NULL, *result = NULL;
    PyObject *bodies = PyList_New(0), *props = PyList_New(0), *flags = PyList_New(0);
    PyObject *tags = PyList_New(0), *keys = PyList_New(0);
    if (!bodies || !props || !flags || !tags || !keys)
        goto done;
    if (!(mv = PyMemoryView_FromObject(arg)) || !(space = PyUnicode_FromString(" ")))
        goto done;
    const unsigned char *b = view.buf;
    const int64_t size = view.len;
    int64_t pos = 0;
    while (pos < size) {
        if (pos + 20 > size) {
            format_error("batch body truncated at byte %lld", (long long)pos);
            goto done;
        }
        int64_t total = rd32(b + pos), blen = rd32(b + pos + 16);
        int32_t flag = rd32(b + pos + 12);
        int64_t end = pos + total, p = pos + 20 + blen;
        if (total < 22 || end > size || blen < 0 || p + 2 > end || rd16(b + p) != end - p - 2) {
            format_error("batch message at byte %lld has inconsistent sizes", (long long)pos);
            goto done;
        }
        const unsigned char *r = b + p + 2;
        Py_ssize_t rn = (Py_ssize_t)(end - p - 2), vlen, at;
        if (append_new(bodies, PySequence_GetSlice(mv, pos + 20, p)) < 0 ||
            append_new(props, PySequence_GetSlice(mv, p + 2, end)) < 0 ||
            append_new(flags, PyLong_FromLong(flag)) < 0)
            goto done;
        at = find_property(r, rn, "TAGS", 4, &vlen);
        if (at >= 0) {
            if (append_new(tags, decode_utf8(r + at, vlen)) < 0)
                goto done;
        } else if (PyList_Append(tags, Py_None) < 0) {
            goto done;
        }
        if (append_new(keys, index_keys(r, rn, space)) < 0)
            goto done;
        pos = end;
    }
    if (PyList_GET_SIZE(bodies) == 0) {
        format_error("empty batch");
        goto done;
    }
    result = PyTuple_Pack(5, bodies, props, flags, tags, keys);
done:
    Py_XDECREF(bodies); Py_XDECREF(props); Py_XDECREF(flags);
    Py_XDECREF(tags); Py_XDECREF(keys); Py_XDECREF(space);
    if (mv) {
        /* the slices keep the buffer alive through their own exports */
        Py_DECREF(mv);
    }
    PyBuffer_Release(&view);
    return result;
}

/* One int64 per message from an int (the same for all) or a sequence of ints. */
typedef struct { PyObject *seq; long long scalar; int is_seq; } Column;

static int column_init(Column *c, PyObject *obj, Py_ssize_t n, const char *what) {
    c->seq = NULL;
    if (PyLong_Check(obj)) {
        c->is_seq = 0;
        c->scalar = PyLong_AsLongLong(obj);
        return (c->scalar == -1 && PyErr_Occurred()) ? -1 : 0;
    }
    c->is_seq = 1;
    c->seq = PySequence_Fast(obj, what);
    if (!c->seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(c->seq) != n) {
        PyErr_Format(PyExc_ValueError, "%s: one per message is required", what);
        Py_CLEAR(c->seq);
        return -1;
    }
    return 0;
}

static int column_get(Column *c, Py_ssize_t i, long long lo, long long hi, long long *out) {
    if (!c->is_seq) {
        *out = c->scalar;
        return 0;
    }
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(c->seq, i));
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_OverflowError, "value %lld out of range", v);
        return -1;
    }
    *out = v;
    return 0;
}

/* The buffer of each body and, unless `props` is NULL (one entry shared by all), of its
   properties, into a new array *views (body, props, body, props, ...). *nviews counts the
   buffers taken, so that the caller releases exactly those and frees *views, even after
   an error. -1 with an exception set. */
static int take_views(PyObject *bodies, PyObject *props, Py_ssize_t n, Py_buffer **views,
                      Py_ssize_t *nviews) {
    if (!(*views = PyMem_Calloc(2 * (size_t)n + 1, sizeof(Py_buffer)))) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(bodies, i), &(*views)[*nviews],
                               PyBUF_SIMPLE) < 0)
            return -1;
        (*nviews)++;
        if (props) {
            if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(props, i), &(*views)[*nviews],
                                   PyBUF_SIMPLE) < 0)
                return -1;
            (*nviews)++;
        }
    }
    return 0;
}

/* A body's BODYCRC: its CRC-32, the sign bit cleared. */
static uint32_t body_crc(const unsigned char *p, Py_ssize_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {  /* zlib takes uInt lengths */
        uInt chunk = n > (1 << 30) ? (1 << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)(crc & 0x7FFFFFFF);
}

PyDoc_STRVAR(encode_stored_doc,
"encode_stored(template, topic_block, bodies, props, flags, born_timestamps,\n"
"              max_message_size) -> (buf, starts, sizes)\n\n"
"Messages of one queue in the stored layout (see batch.encode_stored); starts and\n"
"sizes are native-endian int64 arrays in bytearrays.");


static PyObject *encode_stored(PyObject *self, PyObject *args) {
    Py_buffer tmpl, topic;
    PyObject *bodies_obj, *props_obj, *flags_obj, *born_obj;
    long long max_size;
    if (!PyArg_ParseTuple(args, "y*y*OOOOL", &tmpl, &topic, &bodies_obj, &props_obj,
                          &flags_obj, &born_obj, &max_size))
        return NULL;
    PyObject *bodies = NULL, *props = NULL, *buf = NULL, *starts = NULL, *sizes = NULL;
    PyObject *result = NULL;
    Py_buffer *views = NULL;
    Py_ssize_t nviews = 0, n = 0;
    Column flags = {0}, borns = {0};
    int shared = PyBytes_Check(props_obj) || PyByteArray_Check(props_obj);
    Py_buffer shared_props = {0};
    if (tmpl.len != HEADER_SIZE) {
        PyErr_SetString(PyExc_ValueError, "template must be 88 bytes");
        goto done;
    }
    if (!(bodies = PySequence_Fast(bodies_obj, "bodies must be a sequence")))
        goto done;
    n = PySequence_Fast_GET_SIZE(bodies);
    if (shared) {
        if (PyObject_GetBuffer(props_obj, &shared_props, PyBUF_SIMPLE) < 0) {
            shared = 0;
            goto done;
        }
    } else {
        if (!(props = PySequence_Fast(props_obj, "props must be bytes or a sequence")))
            goto done;
        if (PySequence_Fast_GET_SIZE(props) != n) {
            format_error("one properties entry per message is required");
            goto done;
        }
    }
    if (column_init(&flags, flags_obj, n, "flags") < 0 ||
        column_init(&borns, born_obj, n, "born_timestamps") < 0)
        goto done;
    /* pass 1: every body and properties buffer, every size checked before any write */
    if (take_views(bodies, shared ? NULL : props, n, &views, &nviews) < 0)
        goto done;
    int64_t total = 0;
    const Py_ssize_t per = shared ? 1 : 2;  /* views a message */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t plen = shared ? shared_props.len : views[per * i + 1].len;
        int64_t size = HEADER_SIZE + (int64_t)views[per * i].len + topic.len + 2 + plen;
        if (size > max_size) {
            format_error("message %zd is %lld bytes, above maxMessageSize %lld", i,
                         (long long)size, max_size);
            goto done;
        }
        total += size;
    }
    if (!(buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total)) ||
        !(starts = PyByteArray_FromStringAndSize(NULL, n * 8)) ||
        !(sizes = PyByteArray_FromStringAndSize(NULL, n * 8)))
        goto done;
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(buf);
    int64_t *st = (int64_t *)PyByteArray_AS_STRING(starts);
    int64_t *sz = (int64_t *)PyByteArray_AS_STRING(sizes);
    int64_t at = 0;
    Py_ssize_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer *body = &views[v++];
        const unsigned char *pp = shared_props.buf;
        Py_ssize_t plen = shared_props.len;
        if (!shared) {
            pp = views[v].buf;
            plen = views[v++].len;
        }
        long long flag, born;
        if (column_get(&flags, i, INT32_MIN, INT32_MAX, &flag) < 0 ||
            column_get(&borns, i, INT64_MIN, INT64_MAX, &born) < 0)
            goto done;
        int64_t size = HEADER_SIZE + body->len + topic.len + 2 + plen;
        unsigned char *m = out + at;
        memcpy(m, tmpl.buf, HEADER_SIZE);
        wr32(m, (uint32_t)size);
        wr32(m + 8, body_crc(body->buf, body->len));
        if (flags.is_seq)
            wr32(m + 16, (uint32_t)flag);
        if (borns.is_seq)
            wr64(m + 40, (uint64_t)born);
        wr32(m + 84, (uint32_t)body->len);
        unsigned char *p = m + HEADER_SIZE;
        memcpy(p, body->buf, body->len);
        p += body->len;
        memcpy(p, topic.buf, topic.len);
        p += topic.len;
        p[0] = (unsigned char)(plen >> 8); p[1] = (unsigned char)plen;
        memcpy(p + 2, pp, plen);
        st[i] = at;
        sz[i] = size;
        at += size;
    }
    result = PyTuple_Pack(3, buf, starts, sizes);
done:
    for (Py_ssize_t i = 0; i < nviews; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    if (shared)
        PyBuffer_Release(&shared_props);
    Py_XDECREF(flags.seq); Py_XDECREF(borns.seq);
    Py_XDECREF(bodies); Py_XDECREF(props);
    Py_XDECREF(buf); Py_XDECREF(starts); Py_XDECREF(sizes);
    PyBuffer_Release(&tmpl);
    PyBuffer_Release(&topic);
    return result;
}

PyDoc_STRVAR(stored_message_doc,
"stored_message(topic_block, body, props, queue_id, flag, sys_flag, born_timestamp,\n"
"               born_host, store_host, reconsume_times, max_message_size)\n"
"    -> bytearray or None\n\n"
"One message in the stored layout (see batch.stored_message). None where the twin\n"
"answers: a number that is not an int or is past its field's width, a host that is not\n"
"8 bytes, properties past 32767 bytes, a message above max_message_size.");

static PyObject *stored_message(PyObject *self, PyObject *args) {
    Py_buffer block, body, props;
    PyObject *qid_o, *flag_o, *sys_o, *born_o, *bhost, *shost, *re_o, *most_o;
    if (!PyArg_ParseTuple(args, "y*y*y*OOOOOOOO", &block, &body, &props, &qid_o, &flag_o,
                          &sys_o, &born_o, &bhost, &shost, &re_o, &most_o))
        return NULL;
    PyObject *out = NULL;
    long long qid, flag, sys_flag, born, re, most;
    if (!plain_int(qid_o, &qid) || !plain_int(flag_o, &flag) || !plain_int(sys_o, &sys_flag) ||
        !plain_int(born_o, &born) || !plain_int(re_o, &re) || !plain_int(most_o, &most) ||
        qid < INT32_MIN || qid > INT32_MAX || flag < INT32_MIN || flag > INT32_MAX ||
        sys_flag < INT32_MIN || sys_flag > INT32_MAX || re < INT32_MIN || re > INT32_MAX ||
        !PyBytes_Check(bhost) || PyBytes_GET_SIZE(bhost) != 8 ||
        !PyBytes_Check(shost) || PyBytes_GET_SIZE(shost) != 8 || props.len > 0x7FFF)
        goto twin;
    int64_t size = (int64_t)HEADER_SIZE + body.len + block.len + 2 + props.len;
    if (size > most || size > INT32_MAX)
        goto twin;
    if (!(out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)size)))
        goto done;
    unsigned char *m = (unsigned char *)PyByteArray_AS_STRING(out);
    memset(m, 0, HEADER_SIZE);  /* the queue and physical offsets, the store time, the
                                   prepared offset: 0 until the append fills them */
    wr32(m, (uint32_t)size);
    wr32(m + 4, 0xDAA320A7u);  /* MAGIC_CODE, V1 */
    wr32(m + 8, body_crc(body.buf, body.len));
    wr32(m + 12, (uint32_t)qid);
    wr32(m + 16, (uint32_t)flag);
    wr32(m + 36, (uint32_t)sys_flag);
    wr64(m + 40, (uint64_t)born);
    memcpy(m + 48, PyBytes_AS_STRING(bhost), 8);
    memcpy(m + 64, PyBytes_AS_STRING(shost), 8);
    wr32(m + 72, (uint32_t)re);
    wr32(m + 84, (uint32_t)body.len);
    unsigned char *p = m + HEADER_SIZE;
    memcpy(p, body.buf, body.len);
    p += body.len;
    memcpy(p, block.buf, block.len);
    p += block.len;
    p[0] = (unsigned char)(props.len >> 8);
    p[1] = (unsigned char)props.len;
    memcpy(p + 2, props.buf, props.len);
    goto done;
twin:
    out = Py_None;
    Py_INCREF(out);
done:
    PyBuffer_Release(&block);
    PyBuffer_Release(&body);
    PyBuffer_Release(&props);
    return out;
}

PyDoc_STRVAR(encode_batch_body_doc,
"encode_batch_body(bodies, props, flags) -> bytes\n\n"
"A SEND_BATCH_MESSAGE body (see batch_body.encode_batch_body).");

static PyObject *encode_batch_body(PyObject *self, PyObject *args) {
    PyObject *bodies_obj, *props_obj, *flags_obj;
    if (!PyArg_ParseTuple(args, "OOO", &bodies_obj, &props_obj, &flags_obj))
        return NULL;
    PyObject *bodies = NULL, *props = NULL, *out = NULL, *result = NULL;
    Py_buffer *views = NULL;
    Py_ssize_t nviews = 0, n;
    Column flags = {0};
    if (!(bodies = PySequence_Fast(bodies_obj, "bodies must be a sequence")) ||
        !(props = PySequence_Fast(props_obj, "props must be a sequence")))
        goto done;
    n = PySequence_Fast_GET_SIZE(bodies);
    if (PySequence_Fast_GET_SIZE(props) != n) {
        PyErr_SetString(PyExc_ValueError, "one properties entry per body is required");
        goto done;
    }
    if (column_init(&flags, flags_obj, n, "flags") < 0)
        goto done;
    if (take_views(bodies, props, n, &views, &nviews) < 0)
        goto done;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        total += 22 + (int64_t)views[2 * i].len + views[2 * i + 1].len;
    if (!(out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total)))
        goto done;
    unsigned char *m = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer *body = &views[2 * i], *prop = &views[2 * i + 1];
        long long flag;
        if (column_get(&flags, i, INT32_MIN, INT32_MAX, &flag) < 0)
            goto done;
        memset(m, 0, 20);  /* MAGICCODE and BODYCRC stay 0, as RocketMQ's clients send */
        wr32(m, (uint32_t)(22 + body->len + prop->len));
        wr32(m + 12, (uint32_t)flag);
        wr32(m + 16, (uint32_t)body->len);
        memcpy(m + 20, body->buf, body->len);
        m += 20 + body->len;
        m[0] = (unsigned char)(prop->len >> 8); m[1] = (unsigned char)prop->len;
        memcpy(m + 2, prop->buf, prop->len);
        m += 2 + prop->len;
    }
    result = out;
    out = NULL;
done:
    for (Py_ssize_t i = 0; i < nviews; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_XDECREF(flags.seq);
    Py_XDECREF(bodies); Py_XDECREF(props); Py_XDECREF(out);
    return result;
}

PyDoc_STRVAR(split_pulled_doc,
"split_pulled(body) -> (views, heads)\n\n"
"The stored messages of a pull response body (see scan.split_pulled).");

#define FIXED_SIZE 48  /* TOTALSIZE through BORNTIMESTAMP */

static PyObject *fixed_head(const unsigned char *m) {
    static const int at[9] = {0, 4, 8, 12, 16, 20, 28, 36, 40};
    PyObject *t = PyTuple_New(9);
    if (!t)
        return NULL;
    for (int i = 0; i < 9; i++) {
        int wide = i == 5 || i == 6 || i == 8;  /* QUEUEOFFSET, PHYSICALOFFSET, BORNTIMESTAMP */
        PyObject *v = wide ? PyLong_FromLongLong(rd64(m + at[i])) : PyLong_FromLong(rd32(m + at[i]));
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *split_pulled(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *mv = NULL, *views = PyList_New(0), *heads = PyList_New(0), *result = NULL;
    if (!views || !heads || !(mv = PyMemoryView_FromObject(arg)))
        goto done;
    const unsigned char *b = view.buf;
    int64_t pos = 0, len = view.len;
    while (pos + 4 <= len) {
        int64_t size = rd32(b + pos);
        if (size <= 0 || pos + size > len)
            break;
        if (size < FIXED_SIZE) {
            format_error("stored message at byte %lld is %lld bytes, shorter than its header",
                         (long long)pos, (long long)size);
            goto done;
        }
        if (append_new(views, PySequence_GetSlice(mv, pos, pos + size)) < 0 ||
            append_new(heads, fixed_head(b + pos)) < 0)
            goto done;
        pos += size;
    }
    result = PyTuple_Pack(2, views, heads);
done:
    Py_XDECREF(views); Py_XDECREF(heads); Py_XDECREF(mv);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(java_string_hashes_doc,
"java_string_hashes(strings) -> bytearray\n\n"
"Java's String.hashCode of each string, as native-endian int64s (see\n"
"hashes.java_string_hashes).");

static uint32_t hash_units16(uint32_t h, const unsigned char *be, Py_ssize_t nbytes) {
    for (Py_ssize_t i = 0; i + 1 < nbytes; i += 2)
        h = 31 * h + (((uint32_t)be[i] << 8) | be[i + 1]);
    return h;
}

/* Java's hash of a string continued over `s` from *h (the hash of what came before it).
 * `utf8_first`: a lone surrogate raises the UTF-8 encoder's error, as the many-strings
 * twin (which encodes to UTF-8 first) does; else the UTF-16 encoder's, as the one-string
 * twin does. */
static int java_hash_feed(PyObject *s, uint32_t *h, int utf8_first) {
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "expected str, got %.100s", Py_TYPE(s)->tp_name);
        return -1;
    }
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    uint32_t v = *h;
    if (kind == PyUnicode_1BYTE_KIND) {  /* Latin-1: one UTF-16 unit per character */
        const Py_UCS1 *c = data;
        for (Py_ssize_t i = 0; i < n; i++)
            v = 31 * v + c[i];
        *h = v;
        return 0;
    }
    if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *c = data;
        Py_ssize_t i = 0;
        for (; i < n && (c[i] < 0xD800 || c[i] > 0xDFFF); i++)
            v = 31 * v + c[i];
        if (i == n) {
            *h = v;
            return 0;
        }
    }
    /* astral characters (surrogate pairs) or a lone surrogate: an error, the one the
     * twin's UTF-8 encode raises */
    if (utf8_first && !PyUnicode_AsUTF8AndSize(s, NULL))
        return -1;
    PyObject *be = PyUnicode_AsEncodedString(s, "utf-16-be", "strict");
    if (!be)
        return -1;
    *h = hash_units16(*h, (const unsigned char *)PyBytes_AS_STRING(be), PyBytes_GET_SIZE(be));
    Py_DECREF(be);
    return 0;
}

int java_hash_one(PyObject *s, int64_t *out, int utf8_first) {
    uint32_t h = 0;
    if (java_hash_feed(s, &h, utf8_first) < 0)
        return -1;
    *out = (int32_t)h;
    return 0;
}

PyDoc_STRVAR(java_string_hash_doc,
"java_string_hash(s) -> int\n\n"
"Java's String.hashCode of one string, as a signed 32-bit int (see message.java_string_hash).");

static PyObject *java_string_hash(PyObject *self, PyObject *arg) {
    int64_t h;
    if (java_hash_one(arg, &h, 0) < 0)
        return NULL;
    return PyLong_FromLongLong(h);
}

static PyObject *java_string_hashes(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "strings must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * 8);
    if (out) {
        int64_t *h = (int64_t *)PyByteArray_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (java_hash_one(PySequence_Fast_GET_ITEM(seq, i), &h[i], 1) < 0) {
                Py_CLEAR(out);
                break;
            }
        }
    }
    Py_DECREF(seq);
    return out;
}

PyDoc_STRVAR(unique_ids_doc,
"unique_ids(prefix, elapsed, first, n) -> list[str]\n\n"
"n message ids of one prefix (see ids.unique_ids).");

static PyObject *unique_ids(PyObject *self, PyObject *args) {
    PyObject *prefix;
    long long elapsed, first;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "ULLn", &prefix, &elapsed, &first, &n))
        return NULL;
    if (!PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_ValueError, "the id prefix must be ASCII hex");
        return NULL;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "negative count");
        return NULL;
    }
    static const char hex[] = "0123456789ABCDEF";
    Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix);
    const char *p = (const char *)PyUnicode_1BYTE_DATA(prefix);
    char tail[12];
    uint32_t e = (uint32_t)(elapsed & 0x7FFFFFFF);
    for (int i = 0; i < 8; i++)
        tail[i] = hex[(e >> (28 - 4 * i)) & 0xF];
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        uint32_t c = (uint32_t)((first + k) & 0x7FFF);
        for (int i = 0; i < 4; i++)
            tail[8 + i] = hex[(c >> (12 - 4 * i)) & 0xF];
        PyObject *id = PyUnicode_New(plen + 12, 127);
        if (!id) {
            Py_DECREF(out);
            return NULL;
        }
        memcpy(PyUnicode_1BYTE_DATA(id), p, plen);
        memcpy(PyUnicode_1BYTE_DATA(id) + plen, tail, 12);
        PyList_SET_ITEM(out, k, id);
    }
    return out;
}

/* A contiguous int64 array (numpy's, or any buffer of 8-byte integers). */
static int int64_view(PyObject *obj, Py_buffer *v, const char *what) {
    if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    const char *f = v->format ? v->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (v->itemsize != 8 || (strcmp(f, "l") != 0 && strcmp(f, "q") != 0)) {
        PyErr_Format(PyExc_TypeError, "%s must be an array of int64", what);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(index_put_doc,
"index_put(mm, heads_at, slots, entries_at, first_num, hashes, phys, diffs)\n\n"
"Index entries chained into their hash slots, in place (see store.index.index_put).");

static PyObject *index_put(PyObject *self, PyObject *args) {
    PyObject *mm_obj, *h_obj, *p_obj, *d_obj;
    Py_ssize_t heads_at, slots, entries_at, first;
    if (!PyArg_ParseTuple(args, "OnnnnOOO", &mm_obj, &heads_at, &slots, &entries_at, &first,
                          &h_obj, &p_obj, &d_obj))
        return NULL;
    Py_buffer mm, h = {0}, p = {0}, d = {0};
    if (PyObject_GetBuffer(mm_obj, &mm, PyBUF_WRITABLE) < 0)
        return NULL;
    PyObject *result = NULL;
    if (int64_view(h_obj, &h, "hashes") < 0)
        goto done;
    if (int64_view(p_obj, &p, "phys") < 0)
        goto done;
    if (int64_view(d_obj, &d, "diffs") < 0)
        goto done;
    Py_ssize_t n = h.len / 8;
    if (p.len / 8 != n || d.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "hashes, phys and diffs differ in length");
        goto done;
    }
    if (slots <= 0 || heads_at < 0 || entries_at < 0 || first < 0 ||
        heads_at + slots * 4 > mm.len || entries_at + (first + n) * 20 > mm.len) {
        PyErr_SetString(PyExc_ValueError, "index entries do not fit the buffer");
        goto done;
    }
    unsigned char *b = mm.buf, *heads = b + heads_at;
    const int64_t *hv = h.buf, *pv = p.buf, *dv = d.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = hv[i] % slots;
        if (s < 0)
            s += slots;  /* Python's modulo: never negative */
        unsigned char *e = b + entries_at + (first + i) * 20;
        wr32(e, (uint32_t)hv[i]);
        wr64(e + 4, (uint64_t)pv[i]);
        wr32(e + 12, (uint32_t)dv[i]);
        memcpy(e + 16, heads + s * 4, 4);  /* prev: the slot's newest entry so far */
        wr32(heads + s * 4, (uint32_t)(first + i));
    }
    result = Py_None;
    Py_INCREF(result);
done:
    if (h.obj) PyBuffer_Release(&h);
    if (p.obj) PyBuffer_Release(&p);
    if (d.obj) PyBuffer_Release(&d);
    PyBuffer_Release(&mm);
    return result;
}

PyDoc_STRVAR(index_put_key_doc,
"index_put_key(mm, heads_at, slots, entries_at, num, topic, key, phys, diff)\n\n"
"Index entry `num` for `key` of `topic`, hashed and chained into its slot, in place (see\n"
"store.index.index_put_key).");

static PyObject *index_put_key(PyObject *self, PyObject *args) {
    PyObject *mm_obj, *topic, *key;
    Py_ssize_t heads_at, slots, entries_at, num;
    long long phys, diff;
    if (!PyArg_ParseTuple(args, "OnnnnUULL", &mm_obj, &heads_at, &slots, &entries_at, &num,
                          &topic, &key, &phys, &diff))
        return NULL;
    Py_buffer mm;
    if (PyObject_GetBuffer(mm_obj, &mm, PyBUF_WRITABLE) < 0)
        return NULL;
    if (slots <= 0 || heads_at < 0 || entries_at < 0 || num < 0 || heads_at > mm.len ||
        slots > (mm.len - heads_at) / 4 || entries_at > mm.len ||
        num >= (mm.len - entries_at) / 20) {
        PyBuffer_Release(&mm);
        PyErr_SetString(PyExc_ValueError, "the index entry does not fit the buffer");
        return NULL;
    }
    uint32_t h = 0;  /* the hash of "topic#key", without building that string */
    int bad = java_hash_feed(topic, &h, 0) < 0;
    if (!bad) {
        h = 31 * h + '#';
        bad = java_hash_feed(key, &h, 0) < 0;
    }
    if (bad) {
        PyBuffer_Release(&mm);
        return NULL;
    }
    int64_t hv = (int32_t)h;
    hv = hv == INT32_MIN ? 0 : hv < 0 ? -hv : hv;  /* RocketMQ's abs, MIN_VALUE as 0 */
    unsigned char *b = mm.buf, *head = b + heads_at + (hv % slots) * 4;
    unsigned char *e = b + entries_at + num * 20;
    wr32(e, (uint32_t)hv);
    wr64(e + 4, (uint64_t)phys);
    wr32(e + 12, (uint32_t)diff);
    memcpy(e + 16, head, 4);  /* prev: the slot's newest entry so far */
    wr32(head, (uint32_t)num);
    PyBuffer_Release(&mm);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(fill_positions_doc,
"fill_positions(buf, starts, lo, hi, first_phys, first_queue_offset, store_timestamp)\n\n"
"QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of messages lo..hi-1, in place (see\n"
"batch.fill_positions; `starts` an int64 array or a sequence of ints).");

static PyObject *fill_positions(PyObject *self, PyObject *args) {
    PyObject *buf_obj, *starts_obj;
    Py_ssize_t lo, hi;
    long long phys0, qoff0, ts;
    if (!PyArg_ParseTuple(args, "OOnnLLL", &buf_obj, &starts_obj, &lo, &hi, &phys0, &qoff0,
                          &ts))
        return NULL;
    Py_buffer buf, sv = {0};
    if (PyObject_GetBuffer(buf_obj, &buf, PyBUF_WRITABLE) < 0)
        return NULL;
    PyObject *seq = NULL, *result = NULL;
    const int64_t *arr = NULL;
    Py_ssize_t n;
    if (PyObject_CheckBuffer(starts_obj)) {
        if (int64_view(starts_obj, &sv, "starts") < 0)
            goto done;
        arr = sv.buf;
        n = sv.len / 8;
    } else {
        if (!(seq = PySequence_Fast(starts_obj, "starts must be a sequence")))
            goto done;
        n = PySequence_Fast_GET_SIZE(seq);
    }
    if (lo < 0 || hi < lo || hi > n) {
        PyErr_SetString(PyExc_IndexError, "messages lo..hi-1 are not in the batch");
        goto done;
    }
    int64_t base = 0;
    for (Py_ssize_t i = lo; i < hi; i++) {
        int64_t at;
        if (arr) {
            at = arr[i];
        } else {
            at = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
            if (at == -1 && PyErr_Occurred())
                goto done;
        }
        if (at < 0 || at + 64 > buf.len) {
            PyErr_SetString(PyExc_IndexError, "a message start is outside the buffer");
            goto done;
        }
        if (i == lo)
            base = at;
        unsigned char *m = (unsigned char *)buf.buf + at;
        wr64(m + 20, (uint64_t)(qoff0 + (i - lo)));
        wr64(m + 28, (uint64_t)(at - base + phys0));
        wr64(m + 56, (uint64_t)ts);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    if (sv.obj)
        PyBuffer_Release(&sv);
    Py_XDECREF(seq);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(offset_msg_ids_doc,
"offset_msg_ids(store_host, phys_offsets) -> list[str]\n\n"
"Offset message ids: store host then each commit-log offset, upper-case hex (see\n"
"ids.offset_msg_ids).");

static PyObject *offset_msg_ids(PyObject *self, PyObject *args) {
    Py_buffer host, ov = {0};
    PyObject *offsets;
    if (!PyArg_ParseTuple(args, "y*O", &host, &offsets))
        return NULL;
    PyObject *out = NULL;
    static const char hex[] = "0123456789ABCDEF";
    if (int64_view(offsets, &ov, "phys_offsets") < 0)
        goto done;
    Py_ssize_t n = ov.len / 8, w = 2 * (host.len + 8);
    const int64_t *phys = ov.buf;
    const unsigned char *h = host.buf;
    if (!(out = PyList_New(n)))
        goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *id = PyUnicode_New(w, 127);
        if (!id) {
            Py_CLEAR(out);
            goto done;
        }
        char *t = (char *)PyUnicode_1BYTE_DATA(id);
        for (Py_ssize_t i = 0; i < host.len; i++) {
            *t++ = hex[h[i] >> 4];
            *t++ = hex[h[i] & 0xF];
        }
        uint64_t v = (uint64_t)phys[k];
        for (int i = 15; i >= 0; i--)
            *t++ = hex[(v >> (4 * i)) & 0xF];
        PyList_SET_ITEM(out, k, id);
    }
done:
    if (ov.obj)
        PyBuffer_Release(&ov);
    PyBuffer_Release(&host);
    return out;
}

/* ---- first_of: a compiled function with its pure twin behind it ----------------------
 * What native.twin_or_fallback gives: a call runs the compiled function and, where that
 * returned None (an input it leaves to the twin), the pure twin with the same arguments.
 * A C callable, so a hot call pays for no Python frame around the compiled one. */
typedef struct {
    PyObject_HEAD
    PyObject *compiled, *pure;
    vectorcallfunc vectorcall;
} FirstOf;

static PyObject *first_of_call(PyObject *self, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
    FirstOf *f = (FirstOf *)self;
    PyObject *r = PyObject_Vectorcall(f->compiled, args, nargsf, kwnames);
    if (r != Py_None)
        return r;  /* its answer, or its error */
    Py_DECREF(r);
    return PyObject_Vectorcall(f->pure, args, nargsf, kwnames);
}

static int first_of_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(((FirstOf *)self)->compiled);
    Py_VISIT(((FirstOf *)self)->pure);
    return 0;
}

static int first_of_clear(PyObject *self) {
    Py_CLEAR(((FirstOf *)self)->compiled);
    Py_CLEAR(((FirstOf *)self)->pure);
    return 0;
}

static void first_of_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    first_of_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *first_of_repr(PyObject *self) {
    return PyUnicode_FromFormat("<%R, else its twin %R>", ((FirstOf *)self)->compiled,
                                ((FirstOf *)self)->pure);
}

static PyTypeObject FirstOfType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ledgermq.wire._native.FirstOf",
    .tp_basicsize = sizeof(FirstOf),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(FirstOf, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = first_of_traverse,
    .tp_clear = first_of_clear,
    .tp_dealloc = first_of_dealloc,
    .tp_repr = first_of_repr,
    .tp_doc = "A compiled function, and its pure twin where it answers None.",
};

PyDoc_STRVAR(first_of_doc,
"first_of(compiled, pure) -> callable\n\n"
"Calls compiled(*args, **kw); where that returns None, pure(*args, **kw).");

static PyObject *first_of(PyObject *self, PyObject *args) {
    PyObject *compiled, *pure;
    if (!PyArg_ParseTuple(args, "OO", &compiled, &pure))
        return NULL;
    if (!PyCallable_Check(compiled) || !PyCallable_Check(pure)) {
        PyErr_SetString(PyExc_TypeError, "first_of takes two callables");
        return NULL;
    }
    FirstOf *f = PyObject_GC_New(FirstOf, &FirstOfType);
    if (!f)
        return NULL;
    Py_INCREF(compiled);
    Py_INCREF(pure);
    f->compiled = compiled;
    f->pure = pure;
    f->vectorcall = first_of_call;
    PyObject_GC_Track(f);
    return (PyObject *)f;
}

static PyObject *init(PyObject *self, PyObject *error_class) {
    Py_XDECREF(FormatError);
    Py_INCREF(error_class);
    FormatError = error_class;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init", init, METH_O, "init(MessageFormatError): the error raised on bad bytes"},
    {"first_of", first_of, METH_VARARGS, first_of_doc},
    {"split_batch", split_batch, METH_O, split_batch_doc},
    {"encode_stored", encode_stored, METH_VARARGS, encode_stored_doc},
    {"stored_message", stored_message, METH_VARARGS, stored_message_doc},
    {"encode_batch_body", encode_batch_body, METH_VARARGS, encode_batch_body_doc},
    {"split_pulled", split_pulled, METH_O, split_pulled_doc},
    {"java_string_hashes", java_string_hashes, METH_O, java_string_hashes_doc},
    {"java_string_hash", java_string_hash, METH_O, java_string_hash_doc},
    {"unique_ids", unique_ids, METH_VARARGS, unique_ids_doc},
    {"index_put", index_put, METH_VARARGS, index_put_doc},
    {"index_put_key", index_put_key, METH_VARARGS, index_put_key_doc},
    {"fill_positions", fill_positions, METH_VARARGS, fill_positions_doc},
    {"offset_msg_ids", offset_msg_ids, METH_VARARGS, offset_msg_ids_doc},
    {"walk_positions", walk_positions, METH_VARARGS, walk_positions_doc},
    {"scanned_columns", scanned_columns, METH_VARARGS, scanned_columns_doc},
    {"walk_entries", walk_entries, METH_VARARGS, walk_entries_doc},
    {"run_views", run_views, METH_VARARGS, run_views_doc},
    {"tags_and_keys", tags_and_keys, METH_VARARGS, tags_and_keys_doc},
    {"read_send", read_send, METH_O, read_send_doc},
    {"binary_header_fields", binary_header_fields, METH_O, binary_header_fields_doc},
    {"json_header_fields", json_header_fields, METH_O, json_header_fields_doc},
    {"frame_init", frame_init, METH_VARARGS, frame_init_doc},
    {"frames_in", frames_in, METH_VARARGS, frames_in_doc},
    {"encode_head", encode_head, METH_VARARGS, encode_head_doc},
    {"put_single", (PyCFunction)(void (*)(void))put_single, METH_FASTCALL, put_single_doc},
    {"hpack_huffman", hpack_huffman, METH_O, hpack_huffman_doc},
    {"hpack_block", (PyCFunction)(void (*)(void))hpack_block, METH_FASTCALL, hpack_block_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ledgermq.wire._native",
    "Compiled twins of the wire formats' per-message byte work.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&FirstOfType) < 0)
        return NULL;
    return PyModule_Create(&module);
}

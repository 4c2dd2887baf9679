/* A send request's header, read in one call (twin: broker/send_parsing.read_send).
 *
 * It reads the header a client usually sends: every value a str, numbers in plain decimal
 * (an optional minus and up to 18 digits), within the widths the stored message gives
 * them.  For anything else (a missing topic, "+5", " 5", "1_000", non-ASCII digits or
 * flags, a lone surrogate) it returns None and the pure twin answers, with Python's rules
 * and its errors: this file never has to reimplement them.
 */
#include "_native.h"

const char read_send_doc[] =
    "read_send(ext) -> tuple or None\n\n"
    "See broker/send_parsing.read_send; None where the pure twin must answer.";

enum { TOPIC, DEFAULT_TOPIC, QNUMS, QUEUE_ID, SYS_FLAG, BORN_TS, FLAG, RECONSUME, MAX_RE,
       BATCH, PROPERTIES, NFIELDS };

/* The header's field names: V1 (SendMessageRequestHeader) and V2's one letter each. */
static const char *const V1_NAMES[NFIELDS] = {
    "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
    "flag", "reconsumeTimes", "maxReconsumeTimes", "batch", "properties"};
static const char *const V2_NAMES[NFIELDS] = {"b", "c", "d", "e", "f", "g", "h", "j", "l",
                                              "m", "i"};
static PyObject *v1_keys[NFIELDS], *v2_keys[NFIELDS], *space, *tbw102;

static int init_keys(void) {
    if (space)
        return 0;
    for (int i = 0; i < NFIELDS; i++) {
        if (!(v1_keys[i] = PyUnicode_InternFromString(V1_NAMES[i])) ||
            !(v2_keys[i] = PyUnicode_InternFromString(V2_NAMES[i])))
            return -1;
    }
    if (!(tbw102 = PyUnicode_InternFromString("TBW102")))
        return -1;
    space = PyUnicode_InternFromString(" ");
    return space ? 0 : -1;
}

/* 1 and *out set: an optional '-' and 1-18 ASCII digits; 0: any other form. */
static int plain_decimal(const char *p, Py_ssize_t n, int64_t *out) {
    int neg = n > 0 && p[0] == '-';
    if (neg) {
        p++;
        n--;
    }
    if (n < 1 || n > 18)
        return 0;
    int64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

/* A header number: 1 with *out (the default when absent or empty); 0: leave it to Python. */
static int header_int(PyObject *ext, PyObject *key, int64_t dflt, int bits, int64_t *out) {
    PyObject *v = PyDict_GetItemWithError(ext, key);
    if (!v) {
        if (PyErr_Occurred())
            PyErr_Clear();
        *out = dflt;
        return 1;
    }
    if (!PyUnicode_CheckExact(v) || !PyUnicode_IS_ASCII(v))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    if (n == 0) {
        *out = dflt;
        return 1;
    }
    if (!plain_decimal((const char *)PyUnicode_DATA(v), n, out))
        return 0;
    return bits == 64 || (*out >= -((int64_t)1 << (bits - 1)) && *out < (int64_t)1 << (bits - 1));
}

/* Whether needle occurs in r[0:n]. */
static int contains(const unsigned char *r, Py_ssize_t n, const char *needle) {
    Py_ssize_t k = (Py_ssize_t)strlen(needle);
    for (const unsigned char *p = r; n - (p - r) >= k;) {
        p = memchr(p, needle[0], n - (p - r) - k + 1);
        if (!p)
            return 0;
        if (memcmp(p, needle, k) == 0)
            return 1;
        p++;
    }
    return 0;
}

#define MARK_BROKER_ONLY 1
#define MARK_DEDUP 2
#define MARK_TIMER 4
#define MARK_ZERO_END 8

/* scan_send_properties: (tags, keys, marks, delay) appended at out[at..]; 0, or -1 with
 * an exception, or 1 when Python must answer (a DELAY that is not plain decimal). */
static int scan_properties(const unsigned char *r, Py_ssize_t n, PyObject *out, int at) {
    Py_ssize_t vlen, v;
    int64_t delay = 0;
    v = find_property(r, n, "DELAY", 5, &vlen);
    if (v >= 0 && vlen > 0 && !plain_decimal((const char *)r + v, vlen, &delay))
        return 1;
    long marks = 0;
    if (contains(r, n, "REAL_") || contains(r, n, "TIMER_OUT_MS") ||
        contains(r, n, "TRANSACTION_CHECK_TIMES"))
        marks |= MARK_BROKER_ONLY;
    v = find_property(r, n, "LMQ_DEDUP", 9, &vlen);
    if (v >= 0 && vlen == 1 && r[v] == '1')
        marks |= MARK_DEDUP;
    if (contains(r, n, "TIMER_"))
        marks |= MARK_TIMER;
    if (n > 0 && r[n - 1] == 0)
        marks |= MARK_ZERO_END;
    v = find_property(r, n, "TAGS", 4, &vlen);
    PyObject *tags = v >= 0 ? decode_utf8(r + v, vlen) : (Py_INCREF(Py_None), Py_None);
    if (!tags)
        return -1;
    PyTuple_SET_ITEM(out, at, tags);
    PyObject *keys = index_keys(r, n, space);
    if (!keys)
        return -1;
    PyTuple_SET_ITEM(out, at + 1, keys);
    PyObject *m = PyLong_FromLong(marks), *d = m ? PyLong_FromLongLong(delay) : NULL;
    if (!m || !d) {
        Py_XDECREF(m);
        return -1;
    }
    PyTuple_SET_ITEM(out, at + 2, m);
    PyTuple_SET_ITEM(out, at + 3, d);
    return 0;
}

/* A flag such as batch: 1 true, 0 false, -1 leave it to Python (not ASCII text). */
static int header_true(PyObject *v) {
    if (!v)
        return 0;
    if (!PyUnicode_CheckExact(v) || !PyUnicode_IS_ASCII(v))
        return -1;
    const char *p = (const char *)PyUnicode_DATA(v);
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    if (n == 1)
        return p[0] == '1';
    return n == 4 && (p[0] | 32) == 't' && (p[1] | 32) == 'r' && (p[2] | 32) == 'u' &&
           (p[3] | 32) == 'e';
}

PyObject *read_send(PyObject *self, PyObject *ext) {
    if (init_keys() < 0)
        return NULL;
    if (!PyDict_CheckExact(ext))
        Py_RETURN_NONE;
    int v2 = PyDict_GetItemWithError(ext, v2_keys[TOPIC]) != NULL &&
             PyDict_GetItemWithError(ext, v1_keys[TOPIC]) == NULL;
    if (PyErr_Occurred())
        return NULL;
    PyObject **keys = v2 ? v2_keys : v1_keys;
    PyObject *topic = PyDict_GetItemWithError(ext, keys[TOPIC]);
    PyObject *dtopic = PyDict_GetItemWithError(ext, keys[DEFAULT_TOPIC]);
    PyObject *text = PyDict_GetItemWithError(ext, keys[PROPERTIES]);
    PyObject *max_re = PyDict_GetItemWithError(ext, keys[MAX_RE]);
    if (PyErr_Occurred())
        return NULL;
    if (!topic || !PyUnicode_CheckExact(topic) || PyUnicode_GET_LENGTH(topic) == 0 ||
        (dtopic && !PyUnicode_CheckExact(dtopic)) || (text && !PyUnicode_CheckExact(text)) ||
        (max_re && !PyUnicode_CheckExact(max_re)))
        Py_RETURN_NONE;
    int64_t nums[NFIELDS];
    static const struct { int field; int64_t dflt; int bits; } INTS[] = {
        {QNUMS, 4, 32}, {QUEUE_ID, -1, 32}, {SYS_FLAG, 0, 32}, {BORN_TS, 0, 64},
        {FLAG, 0, 32}, {RECONSUME, 0, 32}};
    for (size_t i = 0; i < sizeof INTS / sizeof INTS[0]; i++) {
        if (!header_int(ext, keys[INTS[i].field], INTS[i].dflt, INTS[i].bits,
                        &nums[INTS[i].field]))
            Py_RETURN_NONE;
    }
    int has_max = max_re && PyUnicode_GET_LENGTH(max_re) > 0;
    if (has_max && !header_int(ext, keys[MAX_RE], 0, 32, &nums[MAX_RE]))
        Py_RETURN_NONE;
    PyObject *bflag = PyDict_GetItemWithError(ext, keys[BATCH]);
    if (PyErr_Occurred())
        return NULL;
    int batch = header_true(bflag);
    if (batch < 0)
        Py_RETURN_NONE;
    Py_ssize_t n = 0;
    const char *raw = "";
    if (text) {
        raw = PyUnicode_AsUTF8AndSize(text, &n);
        if (!raw) {  /* (a lone surrogate: the pure twin raises) */
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    /* props_from_header: each pair ends with the separator */
    int close = n > 0 && raw[n - 1] != 2 && memchr(raw, 1, n) != NULL;
    PyObject *props = PyBytes_FromStringAndSize(NULL, n + close);
    if (!props)
        return NULL;
    unsigned char *pb = (unsigned char *)PyBytes_AS_STRING(props);
    memcpy(pb, raw, n);
    if (close)
        pb[n] = 2;
    PyObject *out = PyTuple_New(NFIELDS + 4);
    if (!out) {
        Py_DECREF(props);
        return NULL;
    }
    int rc = scan_properties(pb, n + close, out, NFIELDS);
    if (rc != 0) {
        Py_DECREF(out);
        Py_DECREF(props);
        if (rc < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(topic);
    PyTuple_SET_ITEM(out, TOPIC, topic);
    PyObject *dt = dtopic ? dtopic : tbw102;
    Py_INCREF(dt);
    PyTuple_SET_ITEM(out, DEFAULT_TOPIC, dt);
    static const int NUMS[] = {QNUMS, QUEUE_ID, SYS_FLAG, BORN_TS, FLAG, RECONSUME};
    for (size_t i = 0; i < sizeof NUMS / sizeof NUMS[0]; i++) {
        PyObject *x = PyLong_FromLongLong(nums[NUMS[i]]);
        if (!x) {
            Py_DECREF(out);
            Py_DECREF(props);
            return NULL;
        }
        PyTuple_SET_ITEM(out, NUMS[i], x);
    }
    PyObject *m = has_max ? PyLong_FromLongLong(nums[MAX_RE]) : (Py_INCREF(Py_None), Py_None);
    if (!m) {
        Py_DECREF(out);
        Py_DECREF(props);
        return NULL;
    }
    PyTuple_SET_ITEM(out, MAX_RE, m);
    PyObject *b = batch ? Py_True : Py_False;
    Py_INCREF(b);
    PyTuple_SET_ITEM(out, BATCH, b);
    PyTuple_SET_ITEM(out, PROPERTIES, props);
    return out;
}

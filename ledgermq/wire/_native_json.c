/* A remoting frame's JSON header, read in one call (twin:
 * remoting/command.json_header_fields).
 *
 *   {"code":10,"language":"CPP","version":399,"opaque":7,"flag":0,"remark":null,
 *    "extFields":{"a":"group","i":"UNIQ_KEY\u0001...\u0002",...},...}
 *
 * What RocketMQ's clients send: an object whose numbers are integers and whose other
 * values are strings or null (extFields' values strings, or integers from the C++ client).
 * Anything else (a float, a nested value outside extFields, a key given twice, a number
 * past 32 bits, a lone surrogate, bytes that are not JSON) gets None: the pure twin,
 * which reads every JSON document through orjson, then answers or raises the FrameError
 * that says what is wrong.
 */
#include "_native.h"

const char json_header_fields_doc[] =
    "json_header_fields(raw) -> (code, language, version, opaque, flag, remark, ext) or None\n\n"
    "See remoting/command.json_header_fields; None where the twin must judge.";

enum { OK = 0, UNUSUAL = 1, FAILED = -1 };  /* FAILED: a Python error is set */

typedef struct {
    const unsigned char *b;
    Py_ssize_t n, p;
    char *tmp;  /* a string's UTF-8 after its escapes (never longer than the input) */
} Reader;

static void skip_ws(Reader *r) {
    while (r->p < r->n && (r->b[r->p] == ' ' || r->b[r->p] == '\t' || r->b[r->p] == '\n' ||
                           r->b[r->p] == '\r'))
        r->p++;
}

static int hex4(Reader *r, uint32_t *out) {
    if (r->n - r->p < 4)
        return UNUSUAL;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = r->b[r->p++];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return UNUSUAL;
    }
    *out = v;
    return OK;
}

static Py_ssize_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The string at r->p (its opening quote) as UTF-8 in (*s)[0:*len]: read in place when it
 * has no escape (the usual string), else decoded into r->tmp. */
static int read_raw_string(Reader *r, const char **s, Py_ssize_t *len) {
    if (r->p >= r->n || r->b[r->p] != '"')
        return UNUSUAL;
    Py_ssize_t start = ++r->p;
    while (r->p < r->n) {
        unsigned char c = r->b[r->p];
        if (c == '"') {
            *s = (const char *)r->b + start;
            *len = r->p++ - start;
            return OK;
        }
        if (c < 0x20)
            return UNUSUAL;  /* a raw control character: not JSON */
        if (c == '\\')
            break;
        r->p++;
    }
    Py_ssize_t o = r->p - start;  /* an escape: what came before it, then the rest decoded */
    memcpy(r->tmp, r->b + start, (size_t)o);
    *s = r->tmp;
    while (r->p < r->n) {
        unsigned char c = r->b[r->p++];
        if (c == '"') {
            *len = o;
            return OK;
        }
        if (c < 0x20)
            return UNUSUAL;  /* a raw control character: not JSON */
        if (c != '\\') {
            r->tmp[o++] = (char)c;
            continue;
        }
        if (r->p >= r->n)
            return UNUSUAL;
        c = r->b[r->p++];
        const char *plain = strchr("\"\\/bfnrt", c);
        if (c && plain) {
            r->tmp[o++] = "\"\\/\b\f\n\r\t"[plain - "\"\\/bfnrt"];
            continue;
        }
        uint32_t cp, low;
        if (c != 'u' || hex4(r, &cp) != OK)
            return UNUSUAL;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return UNUSUAL;  /* a lone low surrogate */
        if (cp >= 0xD800 && cp <= 0xDBFF) {  /* a pair, or the twin judges */
            if (r->n - r->p < 6 || r->b[r->p] != '\\' || r->b[r->p + 1] != 'u')
                return UNUSUAL;
            r->p += 2;
            if (hex4(r, &low) != OK || low < 0xDC00 || low > 0xDFFF)
                return UNUSUAL;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        o += put_utf8(r->tmp + o, cp);
    }
    return UNUSUAL;  /* no closing quote */
}

/* p[0:len] as a str, strict UTF-8 as orjson reads it (invalid bytes: UNUSUAL). */
static int decode_strict(const char *p, Py_ssize_t len, PyObject **out) {
    *out = PyUnicode_DecodeUTF8(p, len, "strict");
    if (*out)
        return OK;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        return FAILED;
    PyErr_Clear();
    return UNUSUAL;
}

static int valid_utf8(const char *p, Py_ssize_t len) {
    PyObject *s;
    int rc = decode_strict(p, len, &s);
    if (rc == OK)
        Py_DECREF(s);
    return rc;
}

/* The string at r->p as a str. */
static int read_string(Reader *r, PyObject **out) {
    const char *s;
    Py_ssize_t len;
    int rc = read_raw_string(r, &s, &len);
    return rc == OK ? decode_strict(s, len, out) : rc;
}

/* Names seen before, kept as their str: a header's keys (and its language, and the C++
 * client's integer values) are the same few texts every request, so they are neither built
 * nor hashed again (a str caches its hash). A slot holds the last ASCII text of up to
 * NAME_BYTES bytes that hashed to it. */
#define NAME_SLOTS 256
#define NAME_BYTES 32
static PyObject *names[NAME_SLOTS];

static int cached_str(const char *s, Py_ssize_t len, PyObject **out) {
    if (len > NAME_BYTES)
        return decode_strict(s, len, out);
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (Py_ssize_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    PyObject **slot = &names[h % NAME_SLOTS], *known = *slot;
    if (known && PyUnicode_GET_LENGTH(known) == len &&
            memcmp(PyUnicode_DATA(known), s, (size_t)len) == 0) {
        *out = Py_NewRef(known);
        return OK;
    }
    int rc = decode_strict(s, len, out);
    if (rc == OK && PyUnicode_IS_COMPACT_ASCII(*out) && PyObject_Hash(*out) != -1)
        Py_XSETREF(*slot, Py_NewRef(*out));
    return rc;
}

static int read_name(Reader *r, PyObject **out) {
    const char *s;
    Py_ssize_t len;
    int rc = read_raw_string(r, &s, &len);
    return rc == OK ? cached_str(s, len, out) : rc;
}

/* A JSON integer (no fraction, no exponent, no leading zero) within 32 bits. */
static int read_int32(Reader *r, long long *out) {
    int neg = r->p < r->n && r->b[r->p] == '-';
    r->p += neg;
    Py_ssize_t start = r->p;
    long long v = 0;
    while (r->p < r->n && r->b[r->p] >= '0' && r->b[r->p] <= '9') {
        if (r->p - start >= 11)
            return UNUSUAL;
        v = v * 10 + (r->b[r->p++] - '0');
    }
    Py_ssize_t digits = r->p - start;
    if (digits == 0 || (digits > 1 && r->b[start] == '0'))
        return UNUSUAL;
    if (r->p < r->n && (r->b[r->p] == '.' || r->b[r->p] == 'e' || r->b[r->p] == 'E'))
        return UNUSUAL;
    v = neg ? -v : v;
    if (v < INT32_MIN || v > INT32_MAX)
        return UNUSUAL;
    *out = v;
    return OK;
}

static int literal(Reader *r, const char *word) {
    size_t k = strlen(word);
    if ((size_t)(r->n - r->p) < k || memcmp(r->b + r->p, word, k) != 0)
        return 0;
    r->p += (Py_ssize_t)k;
    return 1;
}

/* A value of a key the header does not use: a string, an integer, true, false or null. */
static int skip_value(Reader *r) {
    if (r->p < r->n && r->b[r->p] == '"') {
        PyObject *s;
        int rc = read_string(r, &s);
        if (rc == OK)
            Py_DECREF(s);
        return rc;
    }
    long long ignored;
    if (r->p < r->n && (r->b[r->p] == '-' || (r->b[r->p] >= '0' && r->b[r->p] <= '9')))
        return read_int32(r, &ignored);
    return literal(r, "true") || literal(r, "false") || literal(r, "null") ? OK : UNUSUAL;
}

enum { MORE = 2, END = 3 };

/* After an object's member: MORE (a comma, taken), END (its closing brace, taken), or
 * UNUSUAL. */
static int after_member(Reader *r) {
    skip_ws(r);
    if (r->p < r->n && (r->b[r->p] == ',' || r->b[r->p] == '}'))
        return r->b[r->p++] == ',' ? MORE : END;
    return UNUSUAL;
}

/* An integer among extFields (RocketMQ's C++ client sends queueId, sysFlag, flag and
 * defaultTopicQueueNums as numbers), as the text the twin's str() makes of it: the digits
 * as written. Up to 18 digits and not -0 (whose str is "0"); the rest goes to the twin. */
static int read_int_text(Reader *r, PyObject **out) {
    Py_ssize_t start = r->p;
    r->p += r->b[r->p] == '-';
    Py_ssize_t first = r->p;
    while (r->p < r->n && r->b[r->p] >= '0' && r->b[r->p] <= '9')
        r->p++;
    Py_ssize_t digits = r->p - first;
    if (digits == 0 || digits > 18 || (digits > 1 && r->b[first] == '0') ||
            (first > start && r->b[first] == '0'))
        return UNUSUAL;
    if (r->p < r->n && (r->b[r->p] == '.' || r->b[r->p] == 'e' || r->b[r->p] == 'E'))
        return UNUSUAL;
    return cached_str((const char *)r->b + start, r->p - start, out);
}

/* extFields: null, or an object of string or integer values (a key given twice: the twin
 * judges). */
static int read_ext(Reader *r, PyObject *ext) {
    if (literal(r, "null"))
        return OK;
    if (r->p >= r->n || r->b[r->p] != '{')
        return UNUSUAL;
    r->p++;
    skip_ws(r);
    if (r->p < r->n && r->b[r->p] == '}') {
        r->p++;
        return OK;
    }
    for (;;) {
        PyObject *key = NULL, *value = NULL;
        skip_ws(r);
        int rc = read_name(r, &key);
        if (rc != OK)
            return rc;
        skip_ws(r);
        if (r->p >= r->n || r->b[r->p] != ':') {
            Py_DECREF(key);
            return UNUSUAL;
        }
        r->p++;
        skip_ws(r);
        rc = r->p < r->n && (r->b[r->p] == '-' || (r->b[r->p] >= '0' && r->b[r->p] <= '9'))
            ? read_int_text(r, &value) : read_string(r, &value);
        if (rc == OK) {  /* (one lookup; a key given twice: the twin keeps the last) */
            PyObject *kept = PyDict_SetDefault(ext, key, value);
            rc = !kept ? FAILED : kept != value ? UNUSUAL : OK;
        }
        Py_DECREF(key);
        Py_XDECREF(value);
        if (rc != OK)
            return rc;
        int next = after_member(r);
        if (next != MORE)
            return next == END ? OK : UNUSUAL;
    }
}

enum { F_CODE, F_LANGUAGE, F_VERSION, F_OPAQUE, F_FLAG, F_REMARK, F_EXT, NFIELDS };
static const char *const NAMES[NFIELDS] = {"code", "language", "version", "opaque", "flag",
                                           "remark", "extFields"};

static int field_of(const char *key, Py_ssize_t len) {
    for (int f = 0; f < NFIELDS; f++)
        if ((size_t)len == strlen(NAMES[f]) && memcmp(key, NAMES[f], (size_t)len) == 0)
            return f;
    return -1;
}

static int read_header(Reader *r, long long *nums, PyObject **language, PyObject **remark,
                       PyObject *ext) {
    int seen[NFIELDS] = {0};
    skip_ws(r);
    if (r->p >= r->n || r->b[r->p] != '{')
        return UNUSUAL;
    r->p++;
    skip_ws(r);
    int empty = r->p < r->n && r->b[r->p] == '}';
    while (!empty) {
        const char *key;
        Py_ssize_t len;
        skip_ws(r);
        int rc = read_raw_string(r, &key, &len);
        if (rc != OK)
            return rc;
        int f = field_of(key, len);
        if (f < 0 && (rc = valid_utf8(key, len)) != OK)
            return rc;  /* (orjson refuses any key that is not UTF-8) */
        if (f >= 0 && seen[f]++)
            return UNUSUAL;  /* a key given twice: the twin keeps the last, as orjson */
        skip_ws(r);
        if (r->p >= r->n || r->b[r->p] != ':')
            return UNUSUAL;
        r->p++;
        skip_ws(r);
        if (f == F_CODE || f == F_VERSION || f == F_OPAQUE || f == F_FLAG)
            rc = read_int32(r, &nums[f]);
        else if (f == F_LANGUAGE)
            rc = read_name(r, language);
        else if (f == F_REMARK)
            rc = literal(r, "null") ? OK : read_string(r, remark);
        else if (f == F_EXT)
            rc = read_ext(r, ext);
        else
            rc = skip_value(r);
        if (rc != OK)
            return rc;
        int next = after_member(r);
        if (next == END)
            break;
        if (next != MORE)
            return UNUSUAL;
    }
    r->p += empty;  /* (an empty object's closing brace) */
    skip_ws(r);
    if (r->p != r->n || !seen[F_CODE])
        return UNUSUAL;  /* bytes after the object; no code (the twin says so) */
    return OK;
}

PyObject *json_header_fields(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = json_header_at(view.buf, view.len);
    PyBuffer_Release(&view);
    return out;
}

PyObject *json_header_at(const unsigned char *b, Py_ssize_t n) {
    Reader r = {b, n, 0, PyMem_Malloc(n ? (size_t)n : 1)};
    long long nums[NFIELDS] = {0};
    PyObject *language = NULL, *remark = NULL, *ext = PyDict_New(), *out = NULL;
    int rc = r.tmp && ext ? read_header(&r, nums, &language, &remark, ext) : FAILED;
    if (!r.tmp)
        PyErr_NoMemory();
    if (rc == OK && !language && !(language = PyUnicode_FromString("OTHER")))
        rc = FAILED;
    if (rc == OK)
        out = Py_BuildValue("(LOLLLOO)", nums[F_CODE], language, nums[F_VERSION],
                            nums[F_OPAQUE], nums[F_FLAG], remark ? remark : Py_None, ext);
    else if (rc == UNUSUAL)
        out = Py_NewRef(Py_None);
    Py_XDECREF(language);
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    PyMem_Free(r.tmp);
    return out;
}

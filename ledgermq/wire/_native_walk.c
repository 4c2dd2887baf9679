/* The replica's walk over stored messages, compiled: the twin of
 * scan_batch.walk_positions (the readable specification). */
#include "_native.h"

#define MAGIC_CODE ((int32_t)0xDAA320A7)
#define BLANK_MAGIC_CODE ((int32_t)0xCBD43194)
#define SYSFLAG_V6_HOSTS 0x30  /* born host or store host is IPv6 */

/* the reasons, as scan_batch._REASONS indexes them */
enum { LIMIT, END, BLANK, CORRUPT, UNUSUAL };

const char walk_positions_doc[] =
    "walk_positions(view, pos, limit, base, seg_end) -> (stop, reason, positions)\n\n"
    "See scan_batch.walk_positions; reason is an index into its _REASONS and positions\n"
    "the native-endian int64 start of each message.";

/* Whether the message of `total` bytes at m (commit-log offset `at`) is one the fast walk
 * takes: IPv4 hosts, its own offset, sizes that add up, its body's CRC. */
static int plain(const unsigned char *m, int64_t total, int64_t at) {
    if (rd32(m + 36) & SYSFLAG_V6_HOSTS || rd64(m + 28) != at)
        return 0;
    int64_t blen = rd32(m + 84);
    if (blen < 0 || HEADER_SIZE + blen + 3 > total)
        return 0;
    int64_t props_at = HEADER_SIZE + blen + 1 + m[HEADER_SIZE + blen] + 2;
    if (props_at > total || rd16(m + props_at - 2) != total - props_at)
        return 0;
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int64_t done = 0; done < blen;) {  /* crc32 takes a uInt length */
        uInt step = blen - done > 0x40000000 ? 0x40000000 : (uInt)(blen - done);
        crc = crc32(crc, m + HEADER_SIZE + done, step);
        done += step;
    }
    return (int64_t)(crc & 0x7FFFFFFF) == rd32(m + 8);
}

PyObject *walk_positions(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long pos, limit, base, seg_end;
    if (!PyArg_ParseTuple(args, "y*LLLL", &view, &pos, &limit, &base, &seg_end))
        return NULL;
    PyObject *result = NULL;
    const unsigned char *b = view.buf;
    /* the bytes looked at stay inside the buffer whatever the caller's bounds say */
    int64_t len = view.len, end = limit < len ? limit : len;
    int64_t seg = seg_end < len ? seg_end : len;
    int64_t cap = 64, n = 0, p = pos, reason = LIMIT;
    int64_t *at = PyMem_Malloc(cap * sizeof(int64_t));
    if (!at) {
        PyErr_NoMemory();
        goto done;
    }
    if (p < 0)
        goto unusual;
    while (p < limit) {
        if (p + 8 > seg_end) {
            reason = CORRUPT;
            break;
        }
        if (p + 8 > limit)
            break;
        if (p + 8 > len)
            goto unusual;
        int64_t total = rd32(b + p);
        int32_t magic = rd32(b + p + 4);
        if (total == 0 && magic == 0) {
            reason = END;
            break;
        }
        if (magic != MAGIC_CODE || total < HEADER_SIZE + 4 || p + total > seg_end) {
            if (magic == BLANK_MAGIC_CODE && total == seg_end - p) {
                reason = BLANK;
                break;
            }
            goto unusual;
        }
        if (p + total > limit)
            break;
        if (p + total > end || p + total > seg || !plain(b + p, total, base + p))
            goto unusual;
        if (n == cap) {
            int64_t *more = PyMem_Realloc(at, 2 * cap * sizeof(int64_t));
            if (!more) {
                PyErr_NoMemory();
                goto done;
            }
            at = more;
            cap *= 2;
        }
        at[n++] = p;
        p += total;
    }
    result = Py_BuildValue("(LLy#)", (long long)p, (long long)reason, (const char *)at,
                           (Py_ssize_t)(n * sizeof(int64_t)));
    goto done;
unusual:
    result = Py_BuildValue("(LLy#)", pos, (long long)UNUSUAL, "", (Py_ssize_t)0);
done:
    PyMem_Free(at);
    PyBuffer_Release(&view);
    return result;
}

const char scanned_columns_doc[] =
    "scanned_columns(view, positions, base) -> columns, or None\n\n"
    "See scan_batch.scanned_columns; positions are native-endian int64s.";

/* One message's facts into column i; 0 when it is not a plain stored message (None). */
static int scan_one(const unsigned char *b, int64_t len, int64_t p, PyObject *base,
                    PyObject **cols, Py_ssize_t i, PyObject *space, int *plain_msg) {
    *plain_msg = 0;
    if (p < 0 || p > len - (HEADER_SIZE + 4))
        return 0;
    const unsigned char *m = b + p;
    int64_t total = rd32(m);
    if (rd32(m + 4) != MAGIC_CODE || total < HEADER_SIZE + 4 || total > len - p ||
            rd32(m + 36) & SYSFLAG_V6_HOSTS)
        return 0;
    int64_t blen = rd32(m + 84);
    if (blen < 0 || HEADER_SIZE + blen + 3 > total)
        return 0;
    int64_t topic_at = HEADER_SIZE + blen + 1, topic_end = topic_at + m[topic_at - 1];
    if (topic_end + 2 > total || rd16(m + topic_end) != total - topic_end - 2)
        return 0;
    int64_t props_at = topic_end + 2, plen = total - props_at;
    if (m[plen ? total - 1 : topic_end - 1] == 0)
        return 0;
    *plain_msg = 1;
    PyObject *at = PyLong_FromLongLong(p), *tag = NULL, *keys = NULL;
    PyObject *phys = at ? PyNumber_Add(base, at) : NULL;  /* (no int64 overflow) */
    Py_XDECREF(at);
    if (!phys)
        return -1;
    PyTuple_SET_ITEM(cols[0], i, phys);
    int64_t tag_code = 0;
    if (plen) {
        Py_ssize_t vlen, v = find_property(m + props_at, plen, "TAGS", 4, &vlen);
        if (v >= 0 && vlen > 0) {  /* (an empty tag hashes to 0, as no tag) */
            if (!(tag = decode_utf8(m + props_at + v, vlen)))
                return -1;
            int rc = java_hash_one(tag, &tag_code, 0);
            Py_DECREF(tag);
            if (rc < 0)
                return -1;
        }
        keys = index_keys(m + props_at, plen, space);
    } else {
        keys = PyList_New(0);
    }
    if (!keys)
        return -1;
    PyList_SET_ITEM(cols[7], i, keys);
    int64_t nums[5] = {total, rd32(m + 12), rd64(m + 20), rd64(m + 56), tag_code};
    for (int c = 0; c < 5; c++) {
        PyObject *v = PyLong_FromLongLong(nums[c]);
        if (!v)
            return -1;
        PyTuple_SET_ITEM(cols[c + 1], i, v);
    }
    PyObject *topic = decode_utf8(m + topic_at, topic_end - topic_at);
    if (!topic)
        return -1;
    PyList_SET_ITEM(cols[6], i, topic);
    return 0;
}

PyObject *scanned_columns(PyObject *self, PyObject *args) {
    Py_buffer view, pos;
    PyObject *base;
    if (!PyArg_ParseTuple(args, "y*y*O!", &view, &pos, &PyLong_Type, &base))
        return NULL;
    PyObject *cols[8] = {0}, *space = NULL, *result = NULL;
    Py_ssize_t n = pos.len / 8;
    if (pos.len % 8) {
        PyErr_SetString(PyExc_ValueError, "positions must be int64s");
        goto done;
    }
    for (int c = 0; c < 6; c++)
        if (!(cols[c] = PyTuple_New(n)))
            goto done;
    if (!(cols[6] = PyList_New(n)) || !(cols[7] = PyList_New(n)) ||
            !(space = PyUnicode_FromString(" ")))
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p;
        int plain_msg;
        memcpy(&p, (const char *)pos.buf + 8 * i, 8);  /* (any alignment) */
        if (scan_one(view.buf, view.len, p, base, cols, i, space, &plain_msg) < 0)
            goto done;
        if (!plain_msg) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    result = PyTuple_New(8);
    if (result)
        for (int c = 0; c < 8; c++) {
            PyTuple_SET_ITEM(result, c, cols[c]);
            cols[c] = NULL;
        }
done:
    for (int c = 0; c < 8; c++)
        Py_XDECREF(cols[c]);
    Py_XDECREF(space);
    PyBuffer_Release(&view);
    PyBuffer_Release(&pos);
    return result;
}

const char walk_entries_doc[] =
    "walk_entries(ents, first, log_min, seg_size, count, total, max_bytes)\n"
    "    -> (runs, kept, n, count, total), or None for its twin\n\n"
    "See consume_queue.walk_entries; None where a number is past 64 bits.";

static int64_t floor_div(__int128 a, int64_t b) {  /* Python's //, for b > 0 */
    __int128 q = a / b;
    return (int64_t)(a % b != 0 && a < 0 ? q - 1 : q);
}

/* a list of the first n of xs; NULL with an exception set */
static PyObject *int64_list(const int64_t *xs, int64_t n) {
    PyObject *out = PyList_New(n);
    for (int64_t i = 0; out && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(xs[i]);
        if (!x) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, x);
    }
    return out;
}

#define FITS(x) ((x) >= INT64_MIN && (x) <= INT64_MAX)

PyObject *walk_entries(PyObject *self, PyObject *args) {
    Py_buffer ents;
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "y*OOOOOO", &ents, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    long long first, log_min, seg_size, count0, total0, max_bytes;
    PyObject *result = NULL;
    int64_t *runs = NULL, *kept = NULL;
    if (!plain_int(o[0], &first) || !plain_int(o[1], &log_min) ||
        !plain_int(o[2], &seg_size) || !plain_int(o[3], &count0) ||
        !plain_int(o[4], &total0) || !plain_int(o[5], &max_bytes)) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    if (seg_size <= 0) {
        PyErr_Format(PyExc_ValueError, "segment size %lld is not positive",
                     (long long)seg_size);
        goto done;
    }
    int64_t entries = ents.len / 20, n = 0, nruns = 0, nkept = 0;
    runs = PyMem_Malloc((2 * entries + 1) * sizeof(int64_t));
    kept = PyMem_Malloc((entries + 1) * sizeof(int64_t));
    if (!runs || !kept) {
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *e = ents.buf;
    __int128 count = count0, total = total0;  /* sums a hostile queue file cannot overflow */
    for (; n < entries; n++, e += 20) {
        int64_t phys = rd64(e), size = rd32(e + 8);
        if (phys >= log_min) {
            if (total + size > max_bytes && count)
                break;
            __int128 end = (__int128)phys + size, f = (__int128)first + n;
            if (!FITS(end) || !FITS(f) || !FITS(count + 1) || !FITS(total + size))
                goto twin;
            if (nruns && runs[nruns - 1] == phys &&
                floor_div((__int128)phys - 1, seg_size) == floor_div(phys, seg_size))
                runs[nruns - 1] = (int64_t)end;
            else {
                runs[nruns++] = phys;
                runs[nruns++] = (int64_t)end;
            }
            kept[nkept++] = (int64_t)f;
            count += 1;
            total += size;
        }
        if (total > max_bytes) {
            n++;
            break;
        }
    }
    PyObject *r = int64_list(runs, nruns), *k = r ? int64_list(kept, nkept) : NULL;
    if (r && k)
        result = Py_BuildValue("(NNLLL)", r, k, (long long)n, (long long)count,
                               (long long)total);
    else
        Py_XDECREF(r);
    goto done;
twin:
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(runs);
    PyMem_Free(kept);
    PyBuffer_Release(&ents);
    return result;
}

const char run_views_doc[] =
    "run_views(view, base, runs) -> list of view slices, or None for its twin\n\n"
    "See reads.run_views; None where an offset is past 64 bits.";

PyObject *run_views(PyObject *self, PyObject *args) {
    PyObject *view, *runs, *base_obj;
    if (!PyArg_ParseTuple(args, "OOO!", &view, &base_obj, &PyList_Type, &runs))
        return NULL;
    long long base;
    Py_ssize_t n = PyList_GET_SIZE(runs);
    if (!plain_int(base_obj, &base) || n % 2)
        Py_RETURN_NONE;
    PyObject *out = PyList_New(n / 2);
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i += 2) {
        long long lo, hi;
        if (!plain_int(PyList_GET_ITEM(runs, i), &lo) ||
            !plain_int(PyList_GET_ITEM(runs, i + 1), &hi)) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        __int128 a = (__int128)lo - base, b = (__int128)hi - base;
        if (a < PY_SSIZE_T_MIN || a > PY_SSIZE_T_MAX || b < PY_SSIZE_T_MIN ||
            b > PY_SSIZE_T_MAX) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyObject *s = PySequence_GetSlice(view, (Py_ssize_t)a, (Py_ssize_t)b);
        if (!s) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i / 2, s);
    }
    return out;
}

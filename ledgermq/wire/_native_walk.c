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

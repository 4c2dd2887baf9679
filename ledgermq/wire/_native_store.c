/* The store's per-message write (#32): one message copied to the commit log's mapped
 * segment with its positions and store time, and its consume-queue entry, in one call.
 * The store decides where (which segments, which offsets); this only writes there. */
#include "_native.h"

#define OFF_QUEUEOFFSET 20
#define OFF_PHYSICALOFFSET 28
#define OFF_STORETIMESTAMP 56
#define CQ_ENTRY_SIZE 20

const char put_single_doc[] =
    "put_single(log, log_pos, msg, queue_offset, phys, store_ts, cq, cq_pos, tag)\n\n"
    "The stored message `msg` written at log[log_pos:] with its queue offset, physical\n"
    "offset and store time, and its consume-queue entry (phys, size, tag) at cq[cq_pos:]\n"
    "(see store.single.put_single).";

PyObject *put_single(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "put_single takes 9 arguments");
        return NULL;
    }
    long long v[6];  /* log_pos, queue_offset, phys, store_ts, cq_pos, tag */
    static const int at[6] = {1, 3, 4, 5, 7, 8};
    for (int i = 0; i < 6; i++) {
        if (!PyLong_Check(args[at[i]])) {
            PyErr_Format(PyExc_TypeError, "put_single: argument %d is not an int", at[i]);
            return NULL;
        }
        v[i] = PyLong_AsLongLong(args[at[i]]);
        if (v[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    Py_buffer log, msg, cq;
    if (PyObject_GetBuffer(args[0], &log, PyBUF_WRITABLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &msg, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&log);
        return NULL;
    }
    if (PyObject_GetBuffer(args[6], &cq, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&msg);
        PyBuffer_Release(&log);
        return NULL;
    }
    PyObject *result = NULL;
    long long log_pos = v[0], cq_pos = v[4];
    if (msg.len < HEADER_SIZE || msg.len > INT32_MAX || log_pos < 0 ||
        log_pos > (long long)(log.len - msg.len) || cq_pos < 0 ||
        cq_pos > (long long)cq.len - CQ_ENTRY_SIZE) {
        PyErr_SetString(PyExc_ValueError, "the message or its queue entry does not fit");
        goto done;
    }
    unsigned char *d = (unsigned char *)log.buf + log_pos;
    memmove(d, msg.buf, (size_t)msg.len);
    wr64(d + OFF_QUEUEOFFSET, (uint64_t)v[1]);
    wr64(d + OFF_PHYSICALOFFSET, (uint64_t)v[2]);
    wr64(d + OFF_STORETIMESTAMP, (uint64_t)v[3]);
    unsigned char *e = (unsigned char *)cq.buf + cq_pos;
    wr64(e, (uint64_t)v[2]);
    wr32(e + 8, (uint32_t)msg.len);
    wr64(e + 12, (uint64_t)v[5]);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&cq);
    PyBuffer_Release(&msg);
    PyBuffer_Release(&log);
    return result;
}

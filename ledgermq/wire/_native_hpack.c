/* HPACK (RFC 7541): the Huffman code (§5.2, Appendix B) and a header block's walk (§6).
   The pure twins are ledgermq/wire/huffman.py and wire/hpack_block.py; where these return
   None (a string or block that does not decode) the twin answers, with its error. */
#include "_native.h"

#include <stdint.h>

static const struct { uint32_t code; uint8_t bits; } CODES[257] = {
    {0x1ff8, 13}, {0x7fffd8, 23}, {0xfffffe2, 28}, {0xfffffe3, 28}, {0xfffffe4, 28}, {0xfffffe5, 28},
    {0xfffffe6, 28}, {0xfffffe7, 28}, {0xfffffe8, 28}, {0xffffea, 24}, {0x3ffffffc, 30}, {0xfffffe9, 28},
    {0xfffffea, 28}, {0x3ffffffd, 30}, {0xfffffeb, 28}, {0xfffffec, 28}, {0xfffffed, 28}, {0xfffffee, 28},
    {0xfffffef, 28}, {0xffffff0, 28}, {0xffffff1, 28}, {0xffffff2, 28}, {0x3ffffffe, 30}, {0xffffff3, 28},
    {0xffffff4, 28}, {0xffffff5, 28}, {0xffffff6, 28}, {0xffffff7, 28}, {0xffffff8, 28}, {0xffffff9, 28},
    {0xffffffa, 28}, {0xffffffb, 28}, {0x14, 6}, {0x3f8, 10}, {0x3f9, 10}, {0xffa, 12},
    {0x1ff9, 13}, {0x15, 6}, {0xf8, 8}, {0x7fa, 11}, {0x3fa, 10}, {0x3fb, 10},
    {0xf9, 8}, {0x7fb, 11}, {0xfa, 8}, {0x16, 6}, {0x17, 6}, {0x18, 6},
    {0x0, 5}, {0x1, 5}, {0x2, 5}, {0x19, 6}, {0x1a, 6}, {0x1b, 6},
    {0x1c, 6}, {0x1d, 6}, {0x1e, 6}, {0x1f, 6}, {0x5c, 7}, {0xfb, 8},
    {0x7ffc, 15}, {0x20, 6}, {0xffb, 12}, {0x3fc, 10}, {0x1ffa, 13}, {0x21, 6},
    {0x5d, 7}, {0x5e, 7}, {0x5f, 7}, {0x60, 7}, {0x61, 7}, {0x62, 7},
    {0x63, 7}, {0x64, 7}, {0x65, 7}, {0x66, 7}, {0x67, 7}, {0x68, 7},
    {0x69, 7}, {0x6a, 7}, {0x6b, 7}, {0x6c, 7}, {0x6d, 7}, {0x6e, 7},
    {0x6f, 7}, {0x70, 7}, {0x71, 7}, {0x72, 7}, {0xfc, 8}, {0x73, 7},
    {0xfd, 8}, {0x1ffb, 13}, {0x7fff0, 19}, {0x1ffc, 13}, {0x3ffc, 14}, {0x22, 6},
    {0x7ffd, 15}, {0x3, 5}, {0x23, 6}, {0x4, 5}, {0x24, 6}, {0x5, 5},
    {0x25, 6}, {0x26, 6}, {0x27, 6}, {0x6, 5}, {0x74, 7}, {0x75, 7},
    {0x28, 6}, {0x29, 6}, {0x2a, 6}, {0x7, 5}, {0x2b, 6}, {0x76, 7},
    {0x2c, 6}, {0x8, 5}, {0x9, 5}, {0x2d, 6}, {0x77, 7}, {0x78, 7},
    {0x79, 7}, {0x7a, 7}, {0x7b, 7}, {0x7ffe, 15}, {0x7fc, 11}, {0x3ffd, 14},
    {0x1ffd, 13}, {0xffffffc, 28}, {0xfffe6, 20}, {0x3fffd2, 22}, {0xfffe7, 20}, {0xfffe8, 20},
    {0x3fffd3, 22}, {0x3fffd4, 22}, {0x3fffd5, 22}, {0x7fffd9, 23}, {0x3fffd6, 22}, {0x7fffda, 23},
    {0x7fffdb, 23}, {0x7fffdc, 23}, {0x7fffdd, 23}, {0x7fffde, 23}, {0xffffeb, 24}, {0x7fffdf, 23},
    {0xffffec, 24}, {0xffffed, 24}, {0x3fffd7, 22}, {0x7fffe0, 23}, {0xffffee, 24}, {0x7fffe1, 23},
    {0x7fffe2, 23}, {0x7fffe3, 23}, {0x7fffe4, 23}, {0x1fffdc, 21}, {0x3fffd8, 22}, {0x7fffe5, 23},
    {0x3fffd9, 22}, {0x7fffe6, 23}, {0x7fffe7, 23}, {0xffffef, 24}, {0x3fffda, 22}, {0x1fffdd, 21},
    {0xfffe9, 20}, {0x3fffdb, 22}, {0x3fffdc, 22}, {0x7fffe8, 23}, {0x7fffe9, 23}, {0x1fffde, 21},
    {0x7fffea, 23}, {0x3fffdd, 22}, {0x3fffde, 22}, {0xfffff0, 24}, {0x1fffdf, 21}, {0x3fffdf, 22},
    {0x7fffeb, 23}, {0x7fffec, 23}, {0x1fffe0, 21}, {0x1fffe1, 21}, {0x3fffe0, 22}, {0x1fffe2, 21},
    {0x7fffed, 23}, {0x3fffe1, 22}, {0x7fffee, 23}, {0x7fffef, 23}, {0xfffea, 20}, {0x3fffe2, 22},
    {0x3fffe3, 22}, {0x3fffe4, 22}, {0x7ffff0, 23}, {0x3fffe5, 22}, {0x3fffe6, 22}, {0x7ffff1, 23},
    {0x3ffffe0, 26}, {0x3ffffe1, 26}, {0xfffeb, 20}, {0x7fff1, 19}, {0x3fffe7, 22}, {0x7ffff2, 23},
    {0x3fffe8, 22}, {0x1ffffec, 25}, {0x3ffffe2, 26}, {0x3ffffe3, 26}, {0x3ffffe4, 26}, {0x7ffffde, 27},
    {0x7ffffdf, 27}, {0x3ffffe5, 26}, {0xfffff1, 24}, {0x1ffffed, 25}, {0x7fff2, 19}, {0x1fffe3, 21},
    {0x3ffffe6, 26}, {0x7ffffe0, 27}, {0x7ffffe1, 27}, {0x3ffffe7, 26}, {0x7ffffe2, 27}, {0xfffff2, 24},
    {0x1fffe4, 21}, {0x1fffe5, 21}, {0x3ffffe8, 26}, {0x3ffffe9, 26}, {0xffffffd, 28}, {0x7ffffe3, 27},
    {0x7ffffe4, 27}, {0x7ffffe5, 27}, {0xfffec, 20}, {0xfffff3, 24}, {0xfffed, 20}, {0x1fffe6, 21},
    {0x3fffe9, 22}, {0x1fffe7, 21}, {0x1fffe8, 21}, {0x7ffff3, 23}, {0x3fffea, 22}, {0x3fffeb, 22},
    {0x1ffffee, 25}, {0x1ffffef, 25}, {0xfffff4, 24}, {0xfffff5, 24}, {0x3ffffea, 26}, {0x7ffff4, 23},
    {0x3ffffeb, 26}, {0x7ffffe6, 27}, {0x3ffffec, 26}, {0x3ffffed, 26}, {0x7ffffe7, 27}, {0x7ffffe8, 27},
    {0x7ffffe9, 27}, {0x7ffffea, 27}, {0x7ffffeb, 27}, {0xffffffe, 28}, {0x7ffffec, 27}, {0x7ffffed, 27},
    {0x7ffffee, 27}, {0x7ffffef, 27}, {0x7fffff0, 27}, {0x3ffffee, 26}, {0x3fffffff, 30},
};

/* The code as a binary tree: node 0 the root; an entry >0 is the next node, <0 a leaf
   (-(symbol + 1)), 0 no code (none: the code is complete). */
static int16_t tree[512][2];
static int tree_built = 0;

static void build_tree(void) {
    int nodes = 1;
    for (int sym = 0; sym < 257; sym++) {
        int node = 0;
        for (int i = CODES[sym].bits - 1; i >= 0; i--) {
            int bit = (CODES[sym].code >> i) & 1;
            if (i == 0) {
                tree[node][bit] = (int16_t)-(sym + 1);
            } else {
                if (tree[node][bit] == 0)
                    tree[node][bit] = (int16_t)nodes++;
                node = tree[node][bit];
            }
        }
    }
    tree_built = 1;
}

/* Decodes in[0:n] into a new bytes object at *out. 0: done; 1: the string does not decode
   (nothing at *out); -1: a Python error. */
static int huffman_decode(const unsigned char *p, Py_ssize_t n, PyObject **out) {
    if (!tree_built)
        build_tree();
    /* every symbol takes 5 bits or more */
    PyObject *s = PyBytes_FromStringAndSize(NULL, n * 8 / 5 + 1);
    if (s == NULL)
        return -1;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(s);
    Py_ssize_t written = 0;
    int node = 0, pending = 0, ones = 1;  /* bits since the last symbol; all of them 1 */
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int k = 7; k >= 0; k--) {
            int bit = (p[i] >> k) & 1;
            int next = tree[node][bit];
            pending++;
            ones &= bit;
            if (next < 0) {
                int sym = -next - 1;
                if (sym == 256)
                    goto invalid;  /* EOS inside a string */
                o[written++] = (unsigned char)sym;
                node = 0;
                pending = 0;
                ones = 1;
            } else {
                node = next;
            }
        }
    }
    if (pending > 7 || !ones)
        goto invalid;  /* padding: at most 7 bits, the start of EOS (all ones) */
    if (_PyBytes_Resize(&s, written) < 0)
        return -1;
    *out = s;
    return 0;
invalid:
    Py_DECREF(s);
    return 1;
}

const char hpack_huffman_doc[] =
    "hpack_huffman(data) -> bytes, or None for a string that does not decode";

PyObject *hpack_huffman(PyObject *self, PyObject *arg) {
    Py_buffer in;
    if (PyObject_GetBuffer(arg, &in, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = NULL;
    int r = huffman_decode(in.buf, in.len, &out);
    PyBuffer_Release(&in);
    if (r < 0)
        return NULL;
    if (r > 0)
        Py_RETURN_NONE;
    return out;
}

/* ---- a header block (pure twin: wire/hpack_block.py decode_block) ---------------------
   Every step returns 0 when done, 1 for a block that does not decode (the twin then
   answers, with its error), -1 for a Python error. */
#define ENTRY_OVERHEAD 32
#define MAX_INTEGER_BYTES 5

typedef struct {
    const unsigned char *p;
    Py_ssize_t n, pos;
    PyObject *statics, *table;  /* a tuple of (name, value); the table's list, newest first */
    int64_t size, max_size;
} Walk;

static int64_t entry_size(PyObject *field) {
    return (int64_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(field, 0)) +
           PyBytes_GET_SIZE(PyTuple_GET_ITEM(field, 1)) + ENTRY_OVERHEAD;
}

static int walk_integer(Walk *w, int prefix, int64_t *value) {
    int64_t mask = (1 << prefix) - 1;
    int64_t v = w->p[w->pos++] & mask;
    if (v < mask) {
        *value = v;
        return 0;
    }
    int shift = 0;
    for (int i = 0; i < MAX_INTEGER_BYTES; i++) {
        if (w->pos >= w->n)
            return 1;
        unsigned char b = w->p[w->pos++];
        v += (int64_t)(b & 0x7F) << shift;
        shift += 7;
        if (!(b & 0x80)) {
            *value = v;
            return 0;
        }
    }
    return 1;
}

/* A table entry (a borrowed reference) for `index`, or NULL when there is none. */
static PyObject *walk_field(Walk *w, int64_t index) {
    Py_ssize_t nstatic = PyTuple_GET_SIZE(w->statics);
    if (index > 0 && index <= nstatic)
        return PyTuple_GET_ITEM(w->statics, index - 1);
    int64_t d = index - nstatic - 1;
    if (index == 0 || d >= PyList_GET_SIZE(w->table))
        return NULL;
    return PyList_GET_ITEM(w->table, d);
}

static int walk_string(Walk *w, PyObject **out) {
    if (w->pos >= w->n)
        return 1;
    int huffman = w->p[w->pos] & 0x80;
    int64_t length;
    int r = walk_integer(w, 7, &length);
    if (r)
        return r;
    if (length > w->n - w->pos)
        return 1;
    const unsigned char *s = w->p + w->pos;
    w->pos += length;
    if (huffman)
        return huffman_decode(s, length, out);
    *out = PyBytes_FromStringAndSize((const char *)s, length);
    return *out ? 0 : -1;
}

/* A literal field as a new (name, value) tuple at *out. */
static int walk_literal(Walk *w, int prefix, PyObject **out) {
    int64_t index;
    int r = walk_integer(w, prefix, &index);
    if (r)
        return r;
    PyObject *name = NULL, *value = NULL;
    if (index) {
        PyObject *named = walk_field(w, index);
        if (named == NULL)
            return 1;
        name = PyTuple_GET_ITEM(named, 0);
        Py_INCREF(name);
    } else if ((r = walk_string(w, &name)) != 0) {
        return r;
    }
    if ((r = walk_string(w, &value)) != 0) {
        Py_DECREF(name);
        return r;
    }
    *out = PyTuple_Pack(2, name, value);
    Py_DECREF(name);
    Py_DECREF(value);
    return *out ? 0 : -1;
}

static int walk_evict(Walk *w) {
    while (w->size > w->max_size) {
        Py_ssize_t last = PyList_GET_SIZE(w->table) - 1;
        if (last < 0)
            return 1;  /* (a size no entries account for: not a table this walk kept) */
        w->size -= entry_size(PyList_GET_ITEM(w->table, last));
        if (PyList_SetSlice(w->table, last, last + 1, NULL) < 0)
            return -1;
    }
    return 0;
}

static int walk_add(Walk *w, PyObject *field) {
    int64_t entry = entry_size(field);
    if (entry > w->max_size) {  /* larger than the table: it empties it (§4.4) */
        w->size = 0;
        return PyList_SetSlice(w->table, 0, PyList_GET_SIZE(w->table), NULL) < 0 ? -1 : 0;
    }
    if (PyList_Insert(w->table, 0, field) < 0)
        return -1;
    w->size += entry;
    return walk_evict(w);
}

static int is_pair_of_bytes(PyObject *o) {
    return PyTuple_CheckExact(o) && PyTuple_GET_SIZE(o) == 2 &&
           PyBytes_CheckExact(PyTuple_GET_ITEM(o, 0)) && PyBytes_CheckExact(PyTuple_GET_ITEM(o, 1));
}

const char hpack_block_doc[] =
    "hpack_block(block, static, table, size, max_size, max_allowed, max_list) -> "
    "(fields, table after, size, max_size), or None where the pure twin answers";

PyObject *hpack_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyBytes_CheckExact(args[0]) || !PyTuple_CheckExact(args[1]) ||
            !PyList_CheckExact(args[2]))
        Py_RETURN_NONE;
    int64_t num[4];  /* size, max_size, max_allowed, max_list */
    for (int i = 0; i < 4; i++) {
        if (!PyLong_CheckExact(args[3 + i]))
            Py_RETURN_NONE;
        int overflow;
        num[i] = PyLong_AsLongLongAndOverflow(args[3 + i], &overflow);
        if (overflow || num[i] < 0)
            Py_RETURN_NONE;
    }
    Py_ssize_t nstatic = PyTuple_GET_SIZE(args[1]);
    for (Py_ssize_t i = 0; i < nstatic; i++)
        if (!is_pair_of_bytes(PyTuple_GET_ITEM(args[1], i)))
            Py_RETURN_NONE;
    Py_ssize_t ntable = PyList_GET_SIZE(args[2]);
    for (Py_ssize_t i = 0; i < ntable; i++)
        if (!is_pair_of_bytes(PyList_GET_ITEM(args[2], i)))
            Py_RETURN_NONE;
    Walk w = {(const unsigned char *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), 0,
              args[1], NULL, num[0], num[1]};
    int64_t max_allowed = num[2], max_list = num[3], listed = 0;
    PyObject *out = PyList_New(0);
    w.table = PyList_GetSlice(args[2], 0, ntable);
    if (out == NULL || w.table == NULL)
        goto error;
    int r = 0;
    while (w.pos < w.n) {
        unsigned char b = w.p[w.pos];
        PyObject *field = NULL;  /* a new reference */
        if (b & 0x80) {  /* indexed */
            int64_t index;
            if ((r = walk_integer(&w, 7, &index)) != 0)
                goto stop;
            field = walk_field(&w, index);
            if (field == NULL) {
                r = 1;
                goto stop;
            }
            Py_INCREF(field);
        } else if (b & 0x40) {  /* literal, added to the table */
            if ((r = walk_literal(&w, 6, &field)) != 0)
                goto stop;
            if ((r = walk_add(&w, field)) != 0) {
                Py_DECREF(field);
                goto stop;
            }
        } else if (b & 0x20) {  /* table size update, only before the first field */
            int64_t new_size;
            if (PyList_GET_SIZE(out) > 0 || (r = walk_integer(&w, 5, &new_size)) != 0 ||
                    new_size > max_allowed) {
                r = r ? r : 1;
                goto stop;
            }
            w.max_size = new_size;
            if ((r = walk_evict(&w)) != 0)
                goto stop;
            continue;
        } else if ((r = walk_literal(&w, 4, &field)) != 0) {  /* literal, not added */
            goto stop;
        }
        listed += entry_size(field);
        if (listed > max_list) {
            Py_DECREF(field);
            r = 1;
            goto stop;
        }
        r = PyList_Append(out, field);
        Py_DECREF(field);
        if (r < 0)
            goto stop;
    }
    PyObject *answer = Py_BuildValue("(NNLL)", out, w.table, (long long)w.size,
                                     (long long)w.max_size);
    return answer;  /* (N: the references are the tuple's, or gone if it failed) */
stop:
    if (r > 0) {
        Py_DECREF(out);
        Py_DECREF(w.table);
        Py_RETURN_NONE;
    }
error:
    Py_XDECREF(out);
    Py_XDECREF(w.table);
    return NULL;
}

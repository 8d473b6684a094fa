/*
 * Rows of a decoded table, written by a C kernel straight into the table's
 * layout (decoders/tables.py SCHEMAS: a NumPy structured dtype, packed, little
 * endian): one row per record, no Python object per record or cell.
 *
 * The Python side gives the layout once (tables.layout(): each column's name,
 * byte offset and NumPy type string, and one row holding every column's
 * default); the kernel names the columns it writes with the types it writes
 * them as, and a column missing from the layout or of another type is a
 * ValueError then, never a wrong byte later. A row starts as the default row,
 * so what a record does not say keeps the value the reference conversion
 * (tables.records_to_columns) gives a missing key. Values are stored as NumPy's
 * unsafe cast stores them (integers wrap to the column's width, text is cut to
 * the column's size), as that conversion does.
 *
 * Growth uses PyMem_Raw*: rows are added while the kernel runs without the GIL.
 */

#ifndef NICRIG_TABLE_ROWS_H
#define NICRIG_TABLE_ROWS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "decoded tables are little endian: this file writes them with the host's byte order"
#endif

/* A column a kernel writes: its name in the schema and the NumPy type string it writes it as ("<i8",
 * "|b1", "<f8"; "|S" for text of any size). */
typedef struct {
    const char *name;
    const char *type;
} ColumnSpec;

typedef struct {
    Py_ssize_t itemsize;
    char *defaults;            /* one row of defaults */
    char *buf;
    Py_ssize_t n, cap;         /* rows held, rows allocated */
} Rows;

/* Where each of a kernel's columns lies in a row, and (text) how many bytes it holds. */
typedef struct {
    Py_ssize_t offset, size;
} Column;

/* Set up `rows` and `cols` (one per spec) from the layout tables.layout() gives: a sequence of
 * (name, offset, type) and the default row (bytes). 0, or -1 with a Python exception. */
static int rows_init(Rows *rows, Column *cols, const ColumnSpec *specs, int nspecs, PyObject *layout,
                     PyObject *defaults)
{
    char *d;
    Py_ssize_t itemsize;
    if (PyBytes_AsStringAndSize(defaults, &d, &itemsize) < 0)
        return -1;
    if (itemsize < 1) {
        PyErr_SetString(PyExc_ValueError, "a table row of no bytes");
        return -1;
    }
    PyObject *fast = PySequence_Fast(layout, "the table layout: a sequence of (name, offset, type)");
    if (!fast)
        return -1;
    Py_ssize_t nfields = PySequence_Fast_GET_SIZE(fast);
    for (int i = 0; i < nspecs; i++) {
        int found = 0;
        for (Py_ssize_t j = 0; j < nfields && !found; j++) {
            const char *name, *type;
            Py_ssize_t offset;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, j), "sns", &name, &offset, &type)) {
                Py_DECREF(fast);
                return -1;
            }
            if (strcmp(name, specs[i].name) != 0)
                continue;
            found = 1;
            size_t want = strlen(specs[i].type);
            int text = strcmp(specs[i].type, "|S") == 0;
            long size = text ? atol(type + 2) : 0;
            if ((text ? strncmp(type, "|S", 2) != 0 || size < 1 : strcmp(type, specs[i].type) != 0)) {
                PyErr_Format(PyExc_ValueError, "table column %s is %s, the kernel writes %.*s%s", name, type,
                             (int)want, specs[i].type, text ? "<n>" : "");
                Py_DECREF(fast);
                return -1;
            }
            if (!text)
                size = type[2] ? atol(type + 2) : 0;
            if (offset < 0 || size < 1 || offset + size > itemsize) {
                PyErr_Format(PyExc_ValueError, "table column %s lies outside its %zd-byte row", name, itemsize);
                Py_DECREF(fast);
                return -1;
            }
            cols[i] = (Column){offset, size};
        }
        if (!found) {
            PyErr_Format(PyExc_ValueError, "the table has no column %s", specs[i].name);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    rows->defaults = PyMem_RawMalloc((size_t)itemsize);
    if (!rows->defaults) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(rows->defaults, d, (size_t)itemsize);
    rows->itemsize = itemsize;
    rows->buf = NULL;
    rows->n = rows->cap = 0;
    return 0;
}

static void rows_free(Rows *rows)
{
    PyMem_RawFree(rows->buf);
    PyMem_RawFree(rows->defaults);
    rows->buf = rows->defaults = NULL;
    rows->n = rows->cap = 0;
}

/* A new row holding the defaults, or NULL when memory runs out (no Python call: no GIL needed). */
static inline char *rows_add(Rows *rows)
{
    if (rows->n == rows->cap) {
        Py_ssize_t cap = rows->cap ? 2 * rows->cap : 1024;
        char *b = PyMem_RawRealloc(rows->buf, (size_t)cap * (size_t)rows->itemsize);
        if (!b)
            return NULL;
        rows->buf = b;
        rows->cap = cap;
    }
    char *row = rows->buf + rows->n++ * rows->itemsize;
    memcpy(row, rows->defaults, (size_t)rows->itemsize);
    return row;
}

/* Forget the row rows_add() gave last (a record the decoder drops after all). */
static inline void rows_drop_last(Rows *rows) { rows->n--; }

/* The rows so far as a bytearray (the caller views it as the table's dtype), and none kept. */
static PyObject *rows_take(Rows *rows)
{
    PyObject *out = PyByteArray_FromStringAndSize(rows->buf, rows->n * rows->itemsize);
    if (!out)
        return NULL;
    rows->n = 0;
    if (rows->cap > 4096) {    /* a long block's rows: give the memory back rather than keep the peak */
        PyMem_RawFree(rows->buf);
        rows->buf = NULL;
        rows->cap = 0;
    }
    return out;
}

/* Integers as NumPy's unsafe cast stores them in a column of `c.size` bytes: the low bytes. */
static inline void put_int(char *row, Column c, long long v) { memcpy(row + c.offset, &v, (size_t)c.size); }

static inline void put_u64(char *row, Column c, uint64_t v) { memcpy(row + c.offset, &v, 8); }

static inline void put_bool(char *row, Column c, int v) { row[c.offset] = v ? 1 : 0; }

static inline void put_f64(char *row, Column c, double v) { memcpy(row + c.offset, &v, 8); }

/* Text, cut to the column's size; the rest of the column stays as the default row has it (NULs). */
static inline void put_text(char *row, Column c, const char *s, Py_ssize_t len)
{
    memcpy(row + c.offset, s, (size_t)(len < c.size ? len : c.size));
}

#endif

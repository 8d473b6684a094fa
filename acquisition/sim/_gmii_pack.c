/* The GMII probe's lines packed into samples, three bytes a clock (acquisition/sim/gmii.py,
 * GmiiRenderer.render): channel k is bit k % 8 of byte k // 8 (capture.pack_bits), so
 *   byte 0 = TX_EN, TX_ER, TXD[0..5]
 *   byte 1 = TXD[6..7], RX_DV, RX_ER, RXD[0..3]
 *   byte 2 = RXD[4..7]
 * NumPy drew these in about eight passes over a block's ~1 Mi clocks (shifts and ORs into
 * temporaries, then three strided column writes), which took more time than drawing the
 * lines themselves; this is one pass. TX_ER and RX_ER, high on a few clocks at most, are
 * left to the caller. Byte 2's upper half is free: the rig's probe puts a copy of TX_EN there
 * (its frame-presence wire, LINK_ACT), which cost another three passes in NumPy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* An idle lane reads this byte on every clock (a step of 0): data 0, enable 0. */
static const unsigned char idle_line = 0;

/* A lane's line: n uint8 (any object with a one-dimensional C-contiguous byte buffer of n
 * items), or None for an idle lane. 0 with *line set up (release it with line_release), or -1. */
typedef struct {
    Py_buffer view;
    int held;
    const unsigned char *bytes;
    Py_ssize_t step;
} Line;

/* A buffer of bytes: format "B" (or absent, which says "B"), with or without a byte-order prefix. */
static int
is_uint8(const Py_buffer *view)
{
    const char *f = view->format != NULL ? view->format : "B";
    return view->itemsize == 1
           && (strcmp(f, "B") == 0 || strcmp(f, "=B") == 0 || strcmp(f, "<B") == 0 || strcmp(f, "@B") == 0);
}

static int
line_get(PyObject *obj, Py_ssize_t n, const char *what, Line *line)
{
    line->held = 0;
    if (obj == Py_None) {
        line->bytes = &idle_line;
        line->step = 0;
        return 0;
    }
    if (PyObject_GetBuffer(obj, &line->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    line->held = 1;
    if (!is_uint8(&line->view)) {
        PyErr_Format(PyExc_TypeError, "pack: %s must be uint8, not format '%s'", what,
                     line->view.format != NULL ? line->view.format : "B");
        return -1;
    }
    if (line->view.len != n) {
        PyErr_Format(PyExc_ValueError, "pack: %s has %zd clocks, out %zd", what, line->view.len, n);
        return -1;
    }
    line->bytes = line->view.buf;
    line->step = 1;
    return 0;
}

static void
line_release(Line *line)
{
    if (line->held)
        PyBuffer_Release(&line->view);
    line->held = 0;
}

PyDoc_STRVAR(pack_doc,
"pack(out, txd, tx_en, rxd, rx_dv, tx_en_copy=-1) -> out\n\n"
"Write the GMII samples of n clocks into out (a writable C-contiguous uint8 buffer of n * 3\n"
"bytes, e.g. an (n, 3) array): TX_EN, TXD, RX_DV and RXD from the four lines (uint8 arrays of\n"
"n clocks: octets, and enables of 0 or 1; None for both lines of an idle lane), TX_ER and\n"
"RX_ER low; TX_EN also on channel tx_en_copy (20 to 23, in byte 2's free half), unless -1.");

static PyObject *
pack(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *out_obj, *objs[4];
    static const char *const names[4] = {"txd", "tx_en", "rxd", "rx_dv"};
    int copy = -1;
    if (!PyArg_ParseTuple(args, "OOOOO|i:pack", &out_obj, &objs[0], &objs[1], &objs[2], &objs[3], &copy))
        return NULL;
    if (copy != -1 && (copy < 20 || copy > 23)) {
        PyErr_Format(PyExc_ValueError, "pack: TX_EN's copy goes on channel 20 to 23 (byte 2's free bits), not %d",
                     copy);
        return NULL;
    }
    /* The copy's bit in byte 2; shifting TX_EN (0 or 1) by 8 leaves nothing in a byte: no copy. */
    unsigned copy_shift = copy == -1 ? 8 : (unsigned)(copy - 16);
    if ((objs[0] == Py_None) != (objs[1] == Py_None) || (objs[2] == Py_None) != (objs[3] == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "pack: a lane's data and enable are both lines or both None");
        return NULL;
    }
    Py_buffer out;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return NULL;
    /* uint8 as documented: samples written as bytes into wider items (a float64 (n, 3) array took 8 n samples'
     * bytes) were accepted without a word */
    if (!is_uint8(&out)) {
        PyErr_Format(PyExc_TypeError, "pack: out must be uint8, not format '%s'", out.format != NULL ? out.format : "B");
        PyBuffer_Release(&out);
        return NULL;
    }
    if (out.len % 3 != 0) {
        PyErr_Format(PyExc_ValueError, "pack: out holds %zd bytes, not a whole number of 3-byte samples", out.len);
        PyBuffer_Release(&out);
        return NULL;
    }
    Py_ssize_t n = out.len / 3;
    Line lines[4];
    int k, rc = 0;
    for (k = 0; k < 4 && rc == 0; k++)
        rc = line_get(objs[k], n, names[k], &lines[k]);
    if (rc == 0) {
        const unsigned char *txd = lines[0].bytes, *tx_en = lines[1].bytes;
        const unsigned char *rxd = lines[2].bytes, *rx_dv = lines[3].bytes;
        Py_ssize_t ts = lines[0].step, rs = lines[2].step;
        unsigned char *o = out.buf;
        /* Only plain bytes are touched: other threads may run meanwhile. */
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned t = txd[i * ts], en = tx_en[i * ts] & 1, r = rxd[i * rs];
            o[3 * i] = (unsigned char)((t << 2) | en);
            o[3 * i + 1] = (unsigned char)((t >> 6) | ((rx_dv[i * rs] & 1) << 2) | (r << 4));
            o[3 * i + 2] = (unsigned char)((r >> 4) | (en << copy_shift));
        }
        Py_END_ALLOW_THREADS
    }
    for (int j = 0; j < k; j++)
        line_release(&lines[j]);
    PyBuffer_Release(&out);
    if (rc < 0)
        return NULL;
    Py_INCREF(out_obj);
    return out_obj;
}

static PyMethodDef gmii_pack_methods[] = {
    {"pack", pack, METH_VARARGS, pack_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef gmii_pack_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.acquisition.sim._gmii_pack",
    .m_doc = "The GMII probe's lines packed into 3-byte samples in one pass (acquisition/sim/gmii.py).",
    .m_size = -1,
    .m_methods = gmii_pack_methods,
};

PyMODINIT_FUNC
PyInit__gmii_pack(void)
{
    return PyModule_Create(&gmii_pack_module);
}

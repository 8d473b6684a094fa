/* HDF5's shuffle filter, forward direction (the layout of H5Zshuffle.c): byte j of every
 * size-byte element together, plane after plane; bytes after the last whole element stay at
 * the end. nicrig.h5file.encode_chunk runs it on every chunk it stores, 8-byte timestamps
 * above all (one per sample in state mode: ~470 MB for a 59 M-sample simulation). NumPy's
 * transposed copy of the (n, size) byte matrix did this at about half the speed of the plain
 * loop below, which reads each plane's bytes at a stride and writes the plane in order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>

/* Elements [0, n16) of 8-byte elements (n16 a multiple of 16), 16 at a time: the 128 bytes of 16 elements
 * are a 16 x 8 byte matrix in eight registers, two elements a register (byte index e * 8 + b, 7 bits:
 * e3 e2 e1 e0 b2 b1 b0); plane b wants them at b * 16 + e. One round of unpacking registers k and k + 4
 * (k < 4) into 2k and 2k + 1 moves the byte at index i to index i rotated left by one bit; four rounds
 * rotate by four, which is that transpose (the test compares it with NumPy's transposed copy). */
static void
shuffle8_sse2(const unsigned char *src, unsigned char *dst, Py_ssize_t n, Py_ssize_t n16)
{
    for (Py_ssize_t i = 0; i < n16; i += 16) {
        __m128i a[8], b[8];
        for (int k = 0; k < 8; k++)
            a[k] = _mm_loadu_si128((const __m128i *)(src + i * 8 + 16 * k));
        for (int round = 0; round < 4; round++) {
            for (int k = 0; k < 4; k++) {
                b[2 * k] = _mm_unpacklo_epi8(a[k], a[k + 4]);
                b[2 * k + 1] = _mm_unpackhi_epi8(a[k], a[k + 4]);
            }
            memcpy(a, b, sizeof a);
        }
        for (int j = 0; j < 8; j++)
            _mm_storeu_si128((__m128i *)(dst + j * n + i), a[j]);
    }
}
#endif

/* dst = the planes of n whole size-byte elements of src, then src's rest (len - n * size bytes). */
static void
shuffle_planes(const unsigned char *src, unsigned char *dst, Py_ssize_t len, Py_ssize_t size)
{
    Py_ssize_t n = len / size, done = 0;
#ifdef __SSE2__
    /* 8-byte elements (timestamps, most of what is shuffled): ~2.5x the plain loop's speed. */
    if (size == 8) {
        done = n - n % 16;
        shuffle8_sse2(src, dst, n, done);
    }
#endif
    /* n > 0: with no whole element (size may be anything up to 2**63 - 1 from Python) there is no plane, and
     * counting size empty planes took as long as the size said, without the GIL. */
    for (Py_ssize_t j = 0; n > 0 && j < size; j++) {
        const unsigned char *from = src + j;
        unsigned char *plane = dst + j * n;
        for (Py_ssize_t i = done; i < n; i++)
            plane[i] = from[i * size];
    }
    memcpy(dst + n * size, src + n * size, (size_t)(len - n * size));
}

PyDoc_STRVAR(shuffle_doc,
"shuffle(data, size) -> bytes\n\n"
"HDF5's shuffle filter of data (any C-contiguous bytes-like object) with size-byte elements:\n"
"byte j of every whole element together, plane after plane, the bytes after the last whole\n"
"element unchanged at the end. One element, or size 1: the bytes unchanged.");

static PyObject *
shuffle(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*n:shuffle", &view, &size))
        return NULL;
    if (size < 1) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "shuffle: element size %zd, not at least 1 byte", size);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, view.len);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* Neither buffer is a Python object's to change meanwhile: the view holds data's export, and
     * out is not yet anyone else's. The encoder threads (h5file.ENCODER_THREADS) shuffle in parallel. */
    Py_BEGIN_ALLOW_THREADS
    shuffle_planes(view.buf, (unsigned char *)PyBytes_AS_STRING(out), view.len, size);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef h5shuffle_methods[] = {
    {"shuffle", shuffle, METH_VARARGS, shuffle_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef h5shuffle_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig._h5shuffle",
    .m_doc = "HDF5's shuffle filter (H5Zshuffle.c's layout) for chunks nicrig encodes itself.",
    .m_size = -1,
    .m_methods = h5shuffle_methods,
};

PyMODINIT_FUNC
PyInit__h5shuffle(void)
{
    return PyModule_Create(&h5shuffle_module);
}

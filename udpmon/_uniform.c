/* Uniform random bytes from a NumPy bit generator, as Generator.integers(0, 256, size=n, dtype=np.uint8) draws
 * them (udpmon/payload.py, UniformBytes): the simulated rig draws a payload's fill per message.
 *
 * NumPy's bounded uint8 draw over the whole range takes the generator's 32-bit outputs, ceil(n / 4) of them, and
 * uses each one's bytes least significant first (numpy/random/src/distributions, buffered_bounded_uint8). Here
 * the same outputs come from the same function of the generator (bitgen_t's next_uint32, through the capsule
 * every NumPy bit generator exposes), so the bytes and the generator's state after them are integers' own; what
 * is left out is the Python and NumPy overhead of a call (~2 us a 1400-byte payload).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* NumPy's bitgen_t (numpy/random/bitgen.h; "must match the declaration in numpy/random/<any>.pxd", a public C
 * interface since NumPy 1.17), declared here so that building needs no NumPy headers. */
typedef struct {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} bitgen_t;

PyDoc_STRVAR(uniform_bytes_doc,
"uniform_bytes(capsule, n) -> bytes\n\n"
"n uniform random bytes from the bit generator whose capsule (BitGenerator.capsule) is given: those\n"
"Generator.integers(0, 256, size=n, dtype=numpy.uint8) draws, the generator left where it leaves it.\n"
"The caller holds the bit generator's lock if other threads use it.");

static PyObject *
uniform_bytes(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "uniform_bytes(capsule, n) takes 2 arguments");
        return NULL;
    }
    bitgen_t *bitgen = PyCapsule_GetPointer(args[0], "BitGenerator");
    if (bitgen == NULL)
        return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "uniform_bytes: %zd bytes, not a count", n);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32_t w = bitgen->next_uint32(bitgen->state);
        p[i] = (unsigned char)w;
        p[i + 1] = (unsigned char)(w >> 8);
        p[i + 2] = (unsigned char)(w >> 16);
        p[i + 3] = (unsigned char)(w >> 24);
    }
    if (i < n) {
        /* the last output's low bytes; its others are drawn and left unused, as integers leaves them */
        uint32_t w = bitgen->next_uint32(bitgen->state);
        for (; i < n; i++, w >>= 8)
            p[i] = (unsigned char)w;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"uniform_bytes", (PyCFunction)(void (*)(void))uniform_bytes, METH_FASTCALL, uniform_bytes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef uniform_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.udpmon._uniform",
    .m_doc = "Uniform random bytes from a NumPy bit generator, as its Generator's integers draws them, in C.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__uniform(void)
{
    return PyModule_Create(&uniform_module);
}

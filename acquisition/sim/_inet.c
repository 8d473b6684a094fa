/* The Internet checksum's sum (RFC 1071) for the simulated rig's frames (acquisition/sim/ethernet.py,
 * internet_checksum): the UDP checksum over each message's datagram (~1400 bytes) and the IPv4 header
 * checksum of each frame. NumPy's sum of the big-endian words cost ~25,000 instructions a datagram (its
 * casts and the reduction's set-up), Python's integers more; this loop ~1,500.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

PyDoc_STRVAR(ones_complement_sum_doc,
"ones_complement_sum(data) -> int\n\n"
"The ones' complement sum (RFC 1071) of data's big-endian 16-bit words, an odd last byte padded with a\n"
"zero byte: the end-around carries folded in, 0 only when every word is 0, else 1 to 0xFFFF.");

static PyObject *
ones_complement_sum(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t n = view.len;
    /* a 64-bit accumulator of 16-bit words cannot overflow below 2**48 bytes: the carries are folded after */
    uint64_t sum = 0;
    Py_ssize_t i = 0;
    for (; i + 1 < n; i += 2)
        sum += (uint64_t)p[i] << 8 | p[i + 1];
    if (i < n)
        sum += (uint64_t)p[i] << 8;
    PyBuffer_Release(&view);
    /* RFC 1071 2(C): add the carries back in until none is left */
    while (sum >> 16)
        sum = (sum & 0xFFFF) + (sum >> 16);
    return PyLong_FromUnsignedLongLong(sum);
}

static PyMethodDef methods[] = {
    {"ones_complement_sum", ones_complement_sum, METH_O, ones_complement_sum_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef inet_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.acquisition.sim._inet",
    .m_doc = "The Internet checksum's sum (RFC 1071) of the simulated rig's frames, in C.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__inet(void)
{
    return PyModule_Create(&inet_module);
}

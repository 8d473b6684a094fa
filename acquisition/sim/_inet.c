/* The simulated rig's frames (acquisition/sim/ethernet.py) in C: the Internet checksum's sum (RFC 1071), for the UDP
 * checksum over each message's datagram (~1400 bytes), and each IPv4 frame put together from its template.
 * NumPy's sum of the big-endian words cost ~25,000 instructions a datagram (its casts and the reduction's set-up),
 * Python's integers more; this loop ~1,500. A frame made of bytearray and bytes operations took five copies
 * of it and a dozen Python calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

PyDoc_STRVAR(ones_complement_sum_doc,
"ones_complement_sum(data) -> int\n\n"
"The ones' complement sum (RFC 1071) of data's big-endian 16-bit words, an odd last byte padded with a\n"
"zero byte: the end-around carries folded in, 0 only when every word is 0, else 1 to 0xFFFF.");

/* The ones' complement sum of n bytes' big-endian 16-bit words (an odd last byte padded with a zero byte), the
 * end-around carries folded in. */
static uint32_t
sum16(const unsigned char *p, Py_ssize_t n)
{
    /* a 64-bit accumulator of 16-bit words cannot overflow below 2**48 bytes: the carries are folded after */
    uint64_t sum = 0;
    Py_ssize_t i = 0;
    for (; i + 1 < n; i += 2)
        sum += (uint64_t)p[i] << 8 | p[i + 1];
    if (i < n)
        sum += (uint64_t)p[i] << 8;
    /* RFC 1071 2(C): add the carries back in until none is left */
    while (sum >> 16)
        sum = (sum & 0xFFFF) + (sum >> 16);
    return (uint32_t)sum;
}

static PyObject *
ones_complement_sum(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t sum = sum16(view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(sum);
}

/* An Ethernet frame's shortest length without its FCS, and the FCS's (IEEE 802.3 clause 3.2.8, 3.2.9). */
#define MIN_BODY_BYTES 60
#define FCS_BYTES 4
#define IPV4_HEADER_BYTES 20

PyDoc_STRVAR(ipv4_frame_doc,
"ipv4_frame(head, ip_at, ip_id, datagram, start, end) -> bytes\n\n"
"A frame of an IPv4 packet: head (the link header, then the IPv4 header from ip_at, its checksum field zero)\n"
"with Identification ip_id and the header checksum (RFC 791) filled in, then datagram[start:end], zero bytes\n"
"up to 60 and the FCS (802.3 clause 3.2.9: zlib's CRC-32, little-endian).");

static PyObject *
ipv4_frame(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "ipv4_frame(head, ip_at, ip_id, datagram, start, end) takes 6 arguments");
        return NULL;
    }
    if (!PyBytes_Check(args[0]) || !PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "ipv4_frame: head and datagram are bytes");
        return NULL;
    }
    Py_ssize_t ip_at = PyLong_AsSsize_t(args[1]), start = PyLong_AsSsize_t(args[4]), end = PyLong_AsSsize_t(args[5]);
    long ip_id = PyLong_AsLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[0]), datagram_len = PyBytes_GET_SIZE(args[3]);
    if (ip_at < 0 || ip_at + IPV4_HEADER_BYTES > head_len || ip_id < 0 || ip_id > 0xFFFF || start < 0
        || end < start || end > datagram_len) {
        PyErr_Format(PyExc_ValueError, "ipv4_frame: IPv4 header at %zd of a %zd-byte head, id %ld, bytes %zd:%zd of a "
                     "%zd-byte datagram", ip_at, head_len, ip_id, start, end, datagram_len);
        return NULL;
    }
    Py_ssize_t body = head_len + (end - start);
    if (body < MIN_BODY_BYTES)
        body = MIN_BODY_BYTES;
    PyObject *out = PyBytes_FromStringAndSize(NULL, body + FCS_BYTES);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    memcpy(p, PyBytes_AS_STRING(args[0]), head_len);
    memcpy(p + head_len, PyBytes_AS_STRING(args[3]) + start, end - start);
    memset(p + head_len + (end - start), 0, body - head_len - (end - start));
    unsigned char *ip = p + ip_at;
    ip[4] = (unsigned char)(ip_id >> 8);
    ip[5] = (unsigned char)ip_id;
    uint32_t checksum = ~sum16(ip, head_len - ip_at) & 0xFFFF;
    ip[10] = (unsigned char)(checksum >> 8);
    ip[11] = (unsigned char)checksum;
    uLong crc = crc32(0L, p, (uInt)body);
    for (int k = 0; k < FCS_BYTES; k++)
        p[body + k] = (unsigned char)(crc >> (8 * k));
    return out;
}

static PyMethodDef methods[] = {
    {"ones_complement_sum", ones_complement_sum, METH_O, ones_complement_sum_doc},
    {"ipv4_frame", (PyCFunction)(void (*)(void))ipv4_frame, METH_FASTCALL, ipv4_frame_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef inet_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.acquisition.sim._inet",
    .m_doc = "The simulated rig's frames in C: the Internet checksum's sum (RFC 1071), an IPv4 packet's frame.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__inet(void)
{
    return PyModule_Create(&inet_module);
}

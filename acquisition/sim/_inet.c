/* The simulated rig's frames (acquisition/sim/ethernet.py) in C: each message's UDP datagram (~1400 bytes) with its
 * checksum, and each IPv4 frame put together from its template, both checksums the Internet checksum (RFC 1071).
 * NumPy's sum of the big-endian words cost ~25,000 instructions a datagram (its casts and the reduction's set-up),
 * Python's integers more; this loop ~1,500. A frame made of bytearray and bytes operations took five copies
 * of it and a dozen Python calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

/* A sum of 16-bit words with its end-around carries added back in until none is left (RFC 1071 2(C)). */
static inline uint32_t
fold_carries(uint64_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xFFFF) + (sum >> 16);
    return (uint32_t)sum;
}

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
    return fold_carries(sum);
}

/* An Ethernet frame's shortest length without its FCS, and the FCS's (IEEE 802.3 clause 3.2.8, 3.2.9). */
#define MIN_BODY_BYTES 60
#define FCS_BYTES 4
#define IPV4_HEADER_BYTES 20
/* A UDP header without its checksum: source port, destination port, length (RFC 768). */
#define UDP_HEAD_BYTES 6

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

PyDoc_STRVAR(udp_datagram_doc,
"udp_datagram(sum_prefix, udp_head, payload) -> bytes\n\n"
"A UDP datagram (RFC 768): udp_head (source port, destination port, length: 6 bytes), the checksum, payload.\n"
"The checksum is the Internet checksum of sum_prefix (the pseudo-header, then the UDP header with a zero\n"
"checksum; an even number of bytes) followed by payload, a computed 0 sent as 0xFFFF.");

/* The datagram in one allocation and one pass over the payload: summed where it lies, not first copied after
 * the prefix. The prefix's even length keeps the payload's words aligned as in the concatenation. */
static PyObject *
udp_datagram(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "udp_datagram(sum_prefix, udp_head, payload) takes 3 arguments");
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        if (!PyBytes_Check(args[i])) {
            PyErr_Format(PyExc_TypeError, "udp_datagram: sum_prefix, udp_head and payload are bytes, not %.100s",
                         Py_TYPE(args[i])->tp_name);
            return NULL;
        }
    }
    Py_ssize_t prefix_len = PyBytes_GET_SIZE(args[0]), head_len = PyBytes_GET_SIZE(args[1]),
               payload_len = PyBytes_GET_SIZE(args[2]);
    if (prefix_len % 2 || head_len != UDP_HEAD_BYTES) {
        PyErr_Format(PyExc_ValueError, "udp_datagram: a %zd-byte sum_prefix (an even number of bytes) and a %zd-byte "
                     "udp_head (%d bytes)", prefix_len, head_len, UDP_HEAD_BYTES);
        return NULL;
    }
    uint32_t checksum = ~fold_carries((uint64_t)sum16((const unsigned char *)PyBytes_AS_STRING(args[0]), prefix_len)
                                      + sum16((const unsigned char *)PyBytes_AS_STRING(args[2]), payload_len)) & 0xFFFF;
    if (checksum == 0)
        checksum = 0xFFFF;
    PyObject *out = PyBytes_FromStringAndSize(NULL, head_len + 2 + payload_len);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    memcpy(p, PyBytes_AS_STRING(args[1]), head_len);
    p[head_len] = (unsigned char)(checksum >> 8);
    p[head_len + 1] = (unsigned char)checksum;
    memcpy(p + head_len + 2, PyBytes_AS_STRING(args[2]), payload_len);
    return out;
}

static PyMethodDef methods[] = {
    {"ipv4_frame", (PyCFunction)(void (*)(void))ipv4_frame, METH_FASTCALL, ipv4_frame_doc},
    {"udp_datagram", (PyCFunction)(void (*)(void))udp_datagram, METH_FASTCALL, udp_datagram_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef inet_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nicrig.acquisition.sim._inet",
    .m_doc = "The simulated rig's frames in C: a UDP datagram and an IPv4 packet's frame, their checksums (RFC 1071).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__inet(void)
{
    return PyModule_Create(&inet_module);
}

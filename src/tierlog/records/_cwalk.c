/* The produce path's per-batch work in C: check_batch (every check of one whole uncompressed batch,
 * below), header_copy, and the record walk of validate_batch: the same checks, the same result, as the numba walk
 * (tierlog/records/_fastwalk.py) and the Python reference (reader.walk_records_python), which
 * tests/unit/records/test_fastwalk.py holds equal on random valid and damaged records.
 *
 * Why C as well as numba: the numba loop costs ~13 ns per record and its call ~0.9 us (the
 * numpy view of the buffer and the dispatcher); this one ~7 ns and ~0.2 us. For a 1 MiB batch of
 * 100-byte records (8,700 records) that is ~110 -> ~60 us of the append, for a 16 KiB batch
 * ~0.7 us of the per-append overhead (bench/append.py). Per record it does what Kafka's
 * DefaultRecord.readFrom does for every record of an uncompressed batch on the produce path.
 *
 * Built by the install step (setup.py, an optional extension): without a compiler the broker
 * uses the numba walk, with the same results.
 *
 * walk_records(buffer, pos, end, count, base_timestamp, from_client)
 *   -> (ok, found, end position, min ts, max ts, offsetDelta of max ts, has null key, last offsetDelta)
 * Records are read from buffer[pos:end]; any object with the buffer protocol (bytes, bytearray,
 * memoryview, mmap). On ok=False the other fields say how far the walk got (the caller re-runs the
 * Python walk for the message).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#define NO_TIMESTAMP (-1)

/* Zig-zag decoding of a varint's low 32 bits, as Java's ByteUtils.readVarint keeps them. */
static inline int64_t zigzag32(uint32_t raw) {
    return (int64_t)(int32_t)((raw >> 1) ^ (0u - (raw & 1u)));
}

/* A varint of at most 5 bytes ending before `end`: 1 and the position after it, or 0. */
static int varint32_slow(const uint8_t *b, int64_t *pos, int64_t end, int64_t *out) {
    int64_t p = *pos;
    uint32_t raw = 0;
    for (int i = 0; i < 5; i++) {
        if (p + i >= end)
            return 0;
        uint32_t x = b[p + i];
        raw |= (x & 0x7Fu) << (7 * i); /* the fifth byte's bits above 32 drop out, as in Java */
        if (x < 0x80u) {
            *out = zigzag32(raw);
            *pos = p + i + 1;
            return 1;
        }
    }
    return 0;
}

/* Nearly every field of a record is one or two bytes (record lengths of 64-8191 bytes take two):
 * those inline, the rest out of line. */
static inline int varint32(const uint8_t *b, int64_t *pos, int64_t end, int64_t *out) {
    int64_t p = *pos;
    if (p + 1 < end) {
        uint32_t b0 = b[p];
        if (b0 < 0x80u) {
            *out = zigzag32(b0);
            *pos = p + 1;
            return 1;
        }
        uint32_t b1 = b[p + 1];
        if (b1 < 0x80u) {
            *out = zigzag32((b0 & 0x7Fu) | (b1 << 7));
            *pos = p + 2;
            return 1;
        }
    }
    return varint32_slow(b, pos, end, out);
}

/* A varlong of at most 10 bytes, in unsigned arithmetic so all 64 bits survive. */
static int varint64_slow(const uint8_t *b, int64_t *pos, int64_t end, int64_t *out) {
    int64_t p = *pos;
    uint64_t raw = 0;
    for (int i = 0; i < 10; i++) {
        if (p + i >= end)
            return 0;
        uint64_t x = b[p + i];
        raw |= (x & 0x7Fu) << (7 * i);
        if (x < 0x80u) {
            *out = (int64_t)((raw >> 1) ^ (0u - (raw & 1u)));
            *pos = p + i + 1;
            return 1;
        }
    }
    return 0;
}

static inline int varint64(const uint8_t *b, int64_t *pos, int64_t end, int64_t *out) {
    int64_t p = *pos;
    if (p < end && b[p] < 0x80u) {
        *out = zigzag32(b[p]);
        *pos = p + 1;
        return 1;
    }
    return varint64_slow(b, pos, end, out);
}

/* The headers of one record, from `*pos` (its count already read). */
static int skip_headers(const uint8_t *b, int64_t *pos, int64_t record_end, int64_t count) {
    int64_t p = *pos, hk, hv;
    for (int64_t i = 0; i < count; i++) {
        if (!varint32(b, &p, record_end, &hk) || hk < 0 || hk > record_end - p)
            goto fail;
        p += hk;
        if (!varint32(b, &p, record_end, &hv))
            goto fail;
        if (hv > 0) {
            if (hv > record_end - p)
                goto fail;
            p += hv;
        }
    }
    *pos = p;
    return 1;
fail:
    *pos = p;
    return 0;
}

typedef struct {
    int64_t found, pos, min_ts, max_ts, max_ts_delta, previous;
    int has_null_key, ok;
} walk_result;

static void walk(const uint8_t *b, int64_t pos, int64_t end, int64_t count, int64_t base_timestamp,
                 int from_client, walk_result *r) {
    int64_t min_ts = NO_TIMESTAMP, max_ts = NO_TIMESTAMP, max_ts_delta = -1, previous = -1, found = 0;
    int has_null_key = 0, ok = 0;
    int64_t p = pos;
    for (int64_t index = 0; index < count; index++) {
        if (pos >= end)
            break;
        int64_t length, ts_delta, offset_delta, key_length, value_length, header_count;
        p = pos;
        if (!varint32(b, &p, end, &length) || length < 0 || length > end - p)
            goto done;
        /* The next record starts here whatever the fields below say (they must end exactly here):
         * the loop's only dependency from one record to the next is this length. */
        int64_t record_end = p + length;
        p += 1; /* attributes */
        if (!varint64(b, &p, record_end, &ts_delta) || !varint32(b, &p, record_end, &offset_delta))
            goto done;
        if (from_client ? offset_delta != index : offset_delta <= previous)
            goto done;
        previous = offset_delta;
        if (!varint32(b, &p, record_end, &key_length))
            goto done;
        if (key_length > 0) {
            if (key_length > record_end - p)
                goto done;
            p += key_length;
        } else if (key_length < 0) {
            has_null_key = 1; /* Java reads any negative length as null */
        }
        if (!varint32(b, &p, record_end, &value_length))
            goto done;
        if (value_length > 0) {
            if (value_length > record_end - p)
                goto done;
            p += value_length;
        }
        if (p < record_end && b[p] == 0) {
            p += 1; /* no headers: nearly every record */
        } else {
            if (!varint32(b, &p, record_end, &header_count) || header_count < 0 || header_count > record_end - p)
                goto done;
            if (!skip_headers(b, &p, record_end, header_count))
                goto done;
        }
        if (p != record_end)
            goto done;
        /* int64 wrap-around, as the numba walk's machine integers do */
        int64_t ts = (int64_t)((uint64_t)base_timestamp + (uint64_t)ts_delta);
        if (ts != NO_TIMESTAMP) {
            if (ts > max_ts) {
                max_ts = ts;
                max_ts_delta = offset_delta;
            }
            if (min_ts == NO_TIMESTAMP || ts < min_ts)
                min_ts = ts;
        }
        found++;
        pos = record_end;
        p = pos;
    }
    ok = 1;
done:
    r->ok = ok;
    r->found = found;
    r->pos = p;
    r->min_ts = min_ts;
    r->max_ts = max_ts;
    r->max_ts_delta = max_ts_delta;
    r->has_null_key = has_null_key;
    r->previous = previous;
}

/* Below this many records the walk keeps the GIL: releasing and taking it back costs more. */
#define RELEASE_GIL_RECORDS 512

/* walk() without the GIL when the records are many enough for that to pay. */
static void walk_released(const uint8_t *b, int64_t pos, int64_t end, int64_t count, int64_t base_timestamp,
                          int from_client, walk_result *r) {
    if (count >= RELEASE_GIL_RECORDS) {
        Py_BEGIN_ALLOW_THREADS
        walk(b, pos, end, count, base_timestamp, from_client, r);
        Py_END_ALLOW_THREADS
    } else {
        walk(b, pos, end, count, base_timestamp, from_client, r);
    }
}

/* The argument checks the entry points below start with. */

/* Whether `name` got the `wanted` number of arguments; a TypeError if not. */
static int takes(const char *name, Py_ssize_t nargs, Py_ssize_t wanted) {
    if (nargs == wanted)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", name, wanted);
    return 0;
}

/* `obj`'s bytes as a simple buffer in `view`, holding `size` bytes at `start` (and `valid`: the
 * caller's other checks of its arguments). 1; or 0 with nothing held and a ValueError
 * "<what> a buffer of N bytes", `what` a PyUnicode_FromFormat format of the arguments after it. */
static int get_span(PyObject *obj, Py_buffer *view, long long start, long long size, int valid, const char *what,
                    ...) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return 0;
    if (valid && start >= 0 && size >= 0 && start <= view->len - size)
        return 1;
    va_list args;
    va_start(args, what);
    PyObject *described = PyUnicode_FromFormatV(what, args);
    va_end(args);
    if (described != NULL) {
        PyErr_Format(PyExc_ValueError, "%U a buffer of %zd bytes", described, view->len);
        Py_DECREF(described);
    }
    PyBuffer_Release(view);
    return 0;
}

static PyObject *walk_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (!takes("walk_records", nargs, 6))
        return NULL;
    long long pos = PyLong_AsLongLong(args[1]);
    long long end = PyLong_AsLongLong(args[2]);
    long long count = PyLong_AsLongLong(args[3]);
    long long base_timestamp = PyLong_AsLongLong(args[4]);
    int from_client = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred() || from_client < 0)
        return NULL;
    Py_buffer view;
    int ordered = pos >= 0 && end >= pos; /* end - pos cannot overflow */
    if (!get_span(args[0], &view, pos, ordered ? end - pos : 0, ordered, "records [%lld, %lld) are not inside", pos,
                  end))
        return NULL;
    walk_result r;
    walk_released((const uint8_t *)view.buf, pos, end, count, base_timestamp, from_client, &r);
    PyBuffer_Release(&view);
    return Py_BuildValue("(NLLLLLNL)", PyBool_FromLong(r.ok), (long long)r.found, (long long)r.pos,
                         (long long)r.min_ts, (long long)r.max_ts, (long long)r.max_ts_delta,
                         PyBool_FromLong(r.has_null_key), (long long)r.previous);
}

/* Big-endian reads of the batch header's fields. */
static inline uint32_t be32(const uint8_t *b) {
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | (uint32_t)b[3];
}

static inline int64_t be64(const uint8_t *b) {
    return (int64_t)(((uint64_t)be32(b) << 32) | (uint64_t)be32(b + 4));
}

#define BATCH_HEADER_SIZE 61

/* check_batch(buffer, computed_crc, from_client) -> (min ts, max ts, offsetDelta of max ts, has null key) or None
 *
 * The produce path's checks of a record set that is one whole uncompressed v2 batch, in one call:
 * what parse_and_validate + validate_batch (tierlog.storage.append_validation, tierlog.records.reader)
 * check for it -- the length, the magic, the CRC (computed by the caller over buffer[21:], passed in),
 * the record count, a client's rules (no control batch, lastOffsetDelta + 1 == count > 0, a base
 * sequence with a producer id) and the record walk. It answers the walk's timestamps when every check
 * passes and None otherwise (or for anything it does not take, e.g. a compressed batch): the caller
 * then runs the Python checks, which raise the exact error. reader.check_batch_python is its Python
 * reference; tests/unit/records/test_check_batch.py holds the two equal, damaged headers included. */
/* The checks of check_batch on the bytes b[0:size]: 1 and the walk's result in r when every one passes. */
static int check_one_batch(const uint8_t *b, int64_t size, unsigned long long computed_crc, int from_client,
                           walk_result *r) {
    r->ok = 0;
    if (size < BATCH_HEADER_SIZE || 12 + (int64_t)(int32_t)be32(b + 8) != size || b[16] != 2)
        return 0;
    if ((uint64_t)be32(b + 17) != computed_crc)
        return 0;
    int attributes = (int16_t)((b[21] << 8) | b[22]);
    int64_t last_offset_delta = (int32_t)be32(b + 23);
    int64_t base_timestamp = be64(b + 27);
    int64_t producer_id = be64(b + 43);
    int64_t base_sequence = (int32_t)be32(b + 53);
    int64_t count = (int32_t)be32(b + 57);
    if (count < 0 || (attributes & 0x07) != 0)
        return 0;
    if (from_client && ((attributes & 0x20) || last_offset_delta < 0 || count == 0 ||
                        last_offset_delta + 1 != count || (producer_id > -1 && base_sequence < 0)))
        return 0;
    walk_released(b, BATCH_HEADER_SIZE, size, count, base_timestamp, from_client, r);
    /* What reader._walk takes as a good walk. */
    if (!r->ok || r->found != count || r->pos != size || (count && r->previous > last_offset_delta))
        r->ok = 0;
    return r->ok;
}

/* The arguments of check_batch and check_header, (batch, computed_crc, from_client): 1 with the
 * batch's buffer held in `view`; or 0 with an exception set and nothing held. */
static int check_args(const char *name, PyObject *const *args, Py_ssize_t nargs, unsigned long long *computed_crc,
                      int *from_client, Py_buffer *view) {
    if (!takes(name, nargs, 3))
        return 0;
    *computed_crc = PyLong_AsUnsignedLongLong(args[1]);
    *from_client = PyObject_IsTrue(args[2]);
    if (PyErr_Occurred() || *from_client < 0)
        return 0;
    return PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) == 0;
}

static PyObject *check_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    unsigned long long computed_crc;
    int from_client;
    Py_buffer view;
    if (!check_args("check_batch", args, nargs, &computed_crc, &from_client, &view))
        return NULL;
    walk_result r;
    int ok = check_one_batch((const uint8_t *)view.buf, view.len, computed_crc, from_client, &r);
    PyBuffer_Release(&view);
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLLN)", (long long)r.min_ts, (long long)r.max_ts, (long long)r.max_ts_delta,
                         PyBool_FromLong(r.has_null_key));
}

/* Set the base offset and the partition leader epoch (neither under the CRC) in the batch header `h`. */
static void patch_header(uint8_t *h, long long base_offset, long epoch) {
    uint64_t o = (uint64_t)base_offset;
    for (int i = 0; i < 8; i++)
        h[i] = (uint8_t)(o >> (56 - 8 * i));
    uint32_t e = (uint32_t)(int32_t)epoch;
    for (int i = 0; i < 4; i++)
        h[12 + i] = (uint8_t)(e >> (24 - 8 * i));
}

/* The BatchHeader class (tierlog.records.header) and where each of its slots lives in an instance,
 * given once by set_header_type: check_header builds its instances without running its __init__. */
static const char *const HEADER_SLOTS[] = {
    "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes", "last_offset_delta",
    "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "records_count", "buf",
    "position", "size_bytes",
};
#define HEADER_SLOT_COUNT ((Py_ssize_t)(sizeof(HEADER_SLOTS) / sizeof(HEADER_SLOTS[0])))
static PyTypeObject *header_type = NULL;
static Py_ssize_t header_offsets[sizeof(HEADER_SLOTS) / sizeof(HEADER_SLOTS[0])];

/* set_header_type(cls) -> None
 *
 * Takes a class whose __slots__ are exactly HEADER_SLOTS (in any order), each a plain member slot;
 * anything else raises TypeError, so a field added to BatchHeader without this file knowing fails
 * at import, not with a half-set header. */
static PyObject *set_header_type(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 1 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "set_header_type takes a class");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    PyObject *slots = PyDict_GetItemString(type->tp_dict, "__slots__");  /* borrowed; the class's own */
    Py_ssize_t n = slots == NULL || !PyTuple_Check(slots) ? -1 : PyTuple_GET_SIZE(slots);
    if (n != HEADER_SLOT_COUNT || type->tp_dictoffset != 0 || type->tp_itemsize != 0) {
        PyErr_SetString(PyExc_TypeError, "set_header_type: the class's slots are not the header fields this "
                                         "extension sets");
        return NULL;
    }
    Py_ssize_t offsets[sizeof(HEADER_SLOTS) / sizeof(HEADER_SLOTS[0])];
    for (Py_ssize_t i = 0; i < HEADER_SLOT_COUNT; i++) {
        PyObject *descr = PyDict_GetItemString(type->tp_dict, HEADER_SLOTS[i]);  /* borrowed */
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "set_header_type: %s is not a slot of the class", HEADER_SLOTS[i]);
            return NULL;
        }
        offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    memcpy(header_offsets, offsets, sizeof(offsets));
    Py_INCREF(type);
    Py_XSETREF(header_type, type);
    Py_RETURN_NONE;
}

/* check_header(buffer, computed_crc, from_client)
 *   -> (header, min ts, max ts, offsetDelta of max ts, has null key) or None
 *
 * check_batch, answering also the batch's header as the registered BatchHeader class would parse it
 * (BatchHeader(buffer, 0): every field, buf the buffer object itself, position 0), built here
 * (~0.4 us less than its __init__, once per produced batch). reader.check_header_python is its
 * reference; tests/unit/records/test_check_batch.py holds the two equal, slot by slot. */
static PyObject *check_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (header_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "check_header: set_header_type was not called");
        return NULL;
    }
    unsigned long long computed_crc;
    int from_client;
    Py_buffer view;
    if (!check_args("check_header", args, nargs, &computed_crc, &from_client, &view))
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    walk_result r;
    int ok = check_one_batch(b, view.len, computed_crc, from_client, &r);
    PyObject *values[sizeof(HEADER_SLOTS) / sizeof(HEADER_SLOTS[0])];
    if (ok) {
        /* In HEADER_SLOTS' order, as header._HEADER unpacks them (">qiibIhiqqqhii"). */
        values[0] = PyLong_FromLongLong(be64(b));
        values[1] = PyLong_FromLong((int32_t)be32(b + 8));
        values[2] = PyLong_FromLong((int32_t)be32(b + 12));
        values[3] = PyLong_FromLong((int8_t)b[16]);
        values[4] = PyLong_FromUnsignedLong(be32(b + 17));
        values[5] = PyLong_FromLong((int16_t)((b[21] << 8) | b[22]));
        values[6] = PyLong_FromLong((int32_t)be32(b + 23));
        values[7] = PyLong_FromLongLong(be64(b + 27));
        values[8] = PyLong_FromLongLong(be64(b + 35));
        values[9] = PyLong_FromLongLong(be64(b + 43));
        values[10] = PyLong_FromLong((int16_t)((b[51] << 8) | b[52]));
        values[11] = PyLong_FromLong((int32_t)be32(b + 53));
        values[12] = PyLong_FromLong((int32_t)be32(b + 57));
        values[13] = Py_NewRef(args[0]);
        values[14] = PyLong_FromLong(0);
        values[15] = PyLong_FromLongLong(12 + (int64_t)(int32_t)be32(b + 8));
    }
    PyBuffer_Release(&view);
    if (!ok)
        Py_RETURN_NONE;
    PyObject *header = header_type->tp_alloc(header_type, 0);
    int failed = header == NULL;
    for (Py_ssize_t i = 0; i < HEADER_SLOT_COUNT; i++)
        failed |= values[i] == NULL;
    if (failed) {
        for (Py_ssize_t i = 0; i < HEADER_SLOT_COUNT; i++)
            Py_XDECREF(values[i]);
        Py_XDECREF(header);
        return NULL;
    }
    /* The slots of a fresh instance are NULL: each takes its value's reference. */
    for (Py_ssize_t i = 0; i < HEADER_SLOT_COUNT; i++)
        *(PyObject **)((char *)header + header_offsets[i]) = values[i];
    return Py_BuildValue("(NLLLN)", header, (long long)r.min_ts, (long long)r.max_ts, (long long)r.max_ts_delta,
                         PyBool_FromLong(r.has_null_key));
}

/* header_copy(buffer, position, base_offset, partition_leader_epoch) -> bytearray
 *
 * records.header.header_copy in C (its Python version is the reference, test_check_batch.py holds
 * them equal): a copy of the 61-byte header at `position` with the base offset and the partition
 * leader epoch set, neither under the CRC. ~0.1 us against ~0.4 us: once per produced batch. */
static PyObject *header_copy(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (!takes("header_copy", nargs, 4))
        return NULL;
    long long position = PyLong_AsLongLong(args[1]);
    long long base_offset = PyLong_AsLongLong(args[2]);
    long epoch = PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (epoch < INT32_MIN || epoch > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the partition leader epoch does not fit an int32");
        return NULL;
    }
    Py_buffer view;
    if (!get_span(args[0], &view, position, BATCH_HEADER_SIZE, 1, "no %d-byte header at %lld in", BATCH_HEADER_SIZE,
                  position))
        return NULL;
    PyObject *out = PyByteArray_FromStringAndSize((const char *)view.buf + position, BATCH_HEADER_SIZE);
    PyBuffer_Release(&view);
    if (out == NULL)
        return NULL;
    patch_header((uint8_t *)PyByteArray_AS_STRING(out), base_offset, epoch);
    return out;
}

/* write_patched(fd, buffer, position, size, file_position, base_offset, partition_leader_epoch) -> int
 *
 * The produce path's write of one batch in C: os.pwritev(fd, [header_copy(buffer, position,
 * base_offset, epoch), buffer[position + 61:position + size]], file_position) -- the batch at
 * `position` written with its offset and epoch set in a copy of its header, the request's bytes
 * left as they came -- without the list, the slice, the bytearray and os.pwritev's argument
 * handling (~0.5 us per 16 KiB batch). Like os.pwritev: the GIL is released around the call, an
 * interrupted call is retried after the signal handlers ran, an error raises OSError, and a short
 * write answers the bytes written (FileRecords writes the rest). records.header.write_patched is
 * its Python reference; test_write_patched.py holds the two equal. */
static PyObject *write_patched(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (!takes("write_patched", nargs, 7))
        return NULL;
    long fd = PyLong_AsLong(args[0]);
    long long position = PyLong_AsLongLong(args[2]);
    long long size = PyLong_AsLongLong(args[3]);
    long long file_position = PyLong_AsLongLong(args[4]);
    long long base_offset = PyLong_AsLongLong(args[5]);
    long epoch = PyLong_AsLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (epoch < INT32_MIN || epoch > INT32_MAX || fd < 0 || fd > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the file descriptor or partition leader epoch does not fit an int32");
        return NULL;
    }
    Py_buffer view;
    if (!get_span(args[1], &view, position, size, size >= BATCH_HEADER_SIZE && file_position >= 0,
                  "no batch of %lld bytes at %lld in", size, position))
        return NULL;
    uint8_t h[BATCH_HEADER_SIZE];
    memcpy(h, (const uint8_t *)view.buf + position, BATCH_HEADER_SIZE);
    patch_header(h, base_offset, epoch);
    struct iovec iov[2];
    iov[0].iov_base = h;
    iov[0].iov_len = BATCH_HEADER_SIZE;
    iov[1].iov_base = (uint8_t *)view.buf + position + BATCH_HEADER_SIZE;
    iov[1].iov_len = (size_t)(size - BATCH_HEADER_SIZE);
    ssize_t n;
    int saved_errno;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        n = pwritev((int)fd, iov, 2, (off_t)file_position);
        saved_errno = errno;
        Py_END_ALLOW_THREADS
        if (n >= 0 || saved_errno != EINTR)
            break;
        if (PyErr_CheckSignals() < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    if (n < 0) {
        errno = saved_errno;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSsize_t(n);
}

static PyMethodDef methods[] = {
    {"write_patched", (PyCFunction)(void (*)(void))write_patched, METH_FASTCALL,
     "write_patched(fd, buffer, position, size, file_position, base_offset, partition_leader_epoch) -> int"},
    {"header_copy", (PyCFunction)(void (*)(void))header_copy, METH_FASTCALL,
     "header_copy(buffer, position, base_offset, partition_leader_epoch) -> bytearray"},
    {"set_header_type", (PyCFunction)(void (*)(void))set_header_type, METH_FASTCALL,
     "set_header_type(cls) -> None: the BatchHeader class check_header builds"},
    {"check_header", (PyCFunction)(void (*)(void))check_header, METH_FASTCALL,
     "check_header(buffer, computed_crc, from_client) -> (header, min ts, max ts, offsetDelta of max ts, "
     "has null key) or None"},
    {"check_batch", (PyCFunction)(void (*)(void))check_batch, METH_FASTCALL,
     "check_batch(buffer, computed_crc, from_client) -> (min ts, max ts, offsetDelta of max ts, has null key) "
     "or None"},
    {"walk_records", (PyCFunction)(void (*)(void))walk_records, METH_FASTCALL,
     "walk_records(buffer, pos, end, count, base_timestamp, from_client) -> (ok, found, end position, "
     "min ts, max ts, offsetDelta of max ts, has null key, last offsetDelta)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cwalk", "The record walk and the batch checks of the produce path, in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cwalk(void) {
    return PyModule_Create(&module);
}

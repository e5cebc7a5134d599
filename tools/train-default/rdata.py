"""Minimal reader for R's lazy-load databases (Rdata.rdx / Rdata.rdb).

R packages ship their data sets as a lazy-load database: the .rdx index is a
gzip-compressed R serialization of a list mapping each variable name to an
(offset, length) pair in the .rdb file; each .rdb record is a 4-byte
big-endian uncompressed length, followed by a zlib stream holding one more R
serialization. Only the parts of the XDR serialization format (version 2/3)
that plain data sets use are implemented; anything else raises ValueError
naming the SEXP type, rather than guessing.
"""
import gzip
import struct
import zlib

NILSXP, SYMSXP, LISTSXP = 0, 1, 2
CHARSXP, LGLSXP, INTSXP, REALSXP, CPLXSXP, STRSXP = 9, 10, 13, 14, 15, 16
VECSXP, EXPRSXP, RAWSXP = 19, 20, 24
REFSXP, NILVALUE_SXP, GLOBALENV_SXP, EMPTYENV_SXP, BASEENV_SXP = 255, 254, 253, 242, 241
NA_INTEGER = -2147483648


class RList(list):
    """An R vector/list together with its attributes (names, class, ...)."""
    def __init__(self, items, attrs=None):
        super().__init__(items)
        self.attrs = attrs or {}

    def names(self):
        return self.attrs.get("names")


class _Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0
        self.refs = []

    def int(self):
        (v,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return v

    def length(self):
        n = self.int()
        if n == -1:  # long vector: two more ints, upper then lower
            hi, lo = self.int(), self.int()
            n = (hi << 32) + lo
        return n

    def header(self):
        fmt = self.data[:2]
        if fmt != b"X\n":
            raise ValueError("not an XDR R serialization (format %r)" % fmt)
        self.pos = 2
        version = self.int()
        self.int()  # writer R version
        self.int()  # minimal reader R version
        if version == 3:
            n = self.int()
            self.pos += n  # native encoding name
        elif version != 2:
            raise ValueError("unsupported R serialization version %d" % version)

    def pairlist_to_dict(self, pl):
        out = {}
        while pl is not None:
            tag, car, pl = pl
            out[tag] = car
        return out

    def item(self):
        flags = self.int()
        sxp = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))

        if sxp in (NILVALUE_SXP, NILSXP):
            return None
        if sxp in (GLOBALENV_SXP, EMPTYENV_SXP, BASEENV_SXP):
            return ("env", sxp)
        if sxp == REFSXP:
            idx = flags >> 8
            if idx == 0:
                idx = self.int()
            return self.refs[idx - 1]
        if sxp == SYMSXP:
            name = self.item()
            self.refs.append(name)
            return name
        if sxp == CHARSXP:
            n = self.int()
            if n == -1:
                return None  # NA_character_
            s = self.data[self.pos:self.pos + n]
            self.pos += n
            return s.decode("utf-8", errors="replace")
        if sxp == LISTSXP:
            # Pairlist cell: returned as a (tag, car, cdr) triple.
            attrs = self.pairlist_to_dict(self.item()) if has_attr else None
            tag = self.item() if has_tag else None
            car = self.item()
            cdr = self.item()
            del attrs
            return (tag, car, cdr)

        if sxp in (LGLSXP, INTSXP):
            n = self.length()
            vals = list(struct.unpack_from(">%di" % n, self.data, self.pos))
            self.pos += 4 * n
            vals = [None if v == NA_INTEGER else v for v in vals]
        elif sxp == REALSXP:
            n = self.length()
            vals = list(struct.unpack_from(">%dd" % n, self.data, self.pos))
            self.pos += 8 * n
        elif sxp == CPLXSXP:
            n = self.length()
            raw = struct.unpack_from(">%dd" % (2 * n), self.data, self.pos)
            self.pos += 16 * n
            vals = [complex(raw[2 * i], raw[2 * i + 1]) for i in range(n)]
        elif sxp == RAWSXP:
            n = self.length()
            vals = [self.data[self.pos:self.pos + n]]
            self.pos += n
        elif sxp in (STRSXP, VECSXP, EXPRSXP):
            n = self.length()
            vals = [self.item() for _ in range(n)]
        else:
            raise ValueError("R serialization: SEXP type %d not supported "
                             "(offset %d)" % (sxp, self.pos - 4))
        attrs = self.pairlist_to_dict(self.item()) if has_attr else {}
        return RList(vals, attrs)


def unserialize(data):
    """Decode one XDR R serialization (already decompressed)."""
    r = _Reader(data)
    r.header()
    return r.item()


def load_lazy_db(rdx_path, rdb_path):
    """Return {variable name: value} for every variable in an R lazy-load DB."""
    with gzip.open(rdx_path, "rb") as f:
        index = unserialize(f.read())
    names = index.names()
    entry = dict(zip(names, index))
    variables = entry["variables"]
    with open(rdb_path, "rb") as f:
        rdb = f.read()
    out = {}
    for name, (offset, length) in zip(variables.names(), variables):
        offset, length = int(offset), int(length)
        record = rdb[offset:offset + length]
        (expect,) = struct.unpack(">I", record[:4])
        body = zlib.decompress(record[4:])
        if len(body) != expect:
            raise ValueError("%s: record for %r decompressed to %d bytes, "
                             "index says %d" % (rdb_path, name, len(body), expect))
        out[name] = unserialize(body)
    return out

#!/usr/bin/env python3
"""The peers of the comparison harness: each tool's codec and store, run one operation per process.

Run by harness.py inside the harness's venv; each invocation prints one JSON object on stdout.

    peers.py codec  TOOL FILE.safetensors --threads 1,2 --reps N [--min-time SECONDS]
    peers.py delta  TOOL DIR --reps N [--min-time SECONDS]
    peers.py write  TOOL STORE DIR --reps N
    peers.py verify TOOL STORE DIR
    peers.py read   TOOL STORE DIR --step S --tensor NAME --reps N
    peers.py load   TOOL STORE DIR --step S --reps N

codec tools: zipnn, blosc2, zstd. delta tools: zipnn (its XOR delta of every tensor against the same
tensor at the step before, one thread). Series tools: safetensors, zipnn, zipnn-delta, icechunk, tiledb.
Every decoded output is compared with the input byte for byte; a difference is an error (exit 1),
which the harness reports as a failing round trip. benches/compare/README.md describes how each
tool is configured and what each figure means.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import statistics
import struct
import sys
import threading
import time
import urllib.parse

import numpy as np

# Raw bytes per block where a peer is cut into blocks: the store's default block size.
BLOCK_BYTES = 1 << 20
MAX_REPS = 100

DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
              "U16": 2, "U32": 4, "U64": 8, "BOOL": 1}
# NumPy has no bf16: bf16 tensors are handled as their uint16 bit patterns (same bytes).
NP_DTYPE = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
            "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BOOL": "?"}


class RoundTripError(Exception):
    """A tool gave back bytes that differ from its input."""


# ---------------------------------------------------------------------------------------------
# Input files


class Tensor:
    """One tensor of a safetensors file: name, safetensors dtype, shape and raw bytes."""

    __slots__ = ("name", "dtype", "shape", "data")

    def __init__(self, name, dtype, shape, data):
        self.name, self.dtype, self.shape, self.data = name, dtype, list(shape), data

    def array(self):
        return np.frombuffer(self.data, dtype=NP_DTYPE[self.dtype]).reshape(self.shape)


def read_safetensors(path):
    """The tensors of a safetensors file in file order (parsed here, so bf16 needs no framework)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = []
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = info["data_offsets"]
        out.append(Tensor(name, info["dtype"], info["shape"], raw[base + a:base + b]))
    return out


def series_files(folder):
    """[(step, path)] of the step_N.safetensors files of a folder, by step."""
    found = []
    for name in os.listdir(folder):
        m = re.fullmatch(r"step_(\d+)\.safetensors", name)
        if m:
            found.append((int(m.group(1)), os.path.join(folder, name)))
    return sorted(found)


def check_same(what, got, expected):
    if bytes(got) != bytes(expected):
        raise RoundTripError(f"{what}: decoded bytes differ from the input")


# ---------------------------------------------------------------------------------------------
# Timing and memory


def status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return None


class PeakMemory:
    """Growth of the peak resident memory over the resident memory at start (Linux clear_refs)."""

    def __init__(self):
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.baseline = status_bytes("VmRSS")
        except OSError:
            self.baseline = None

    def growth(self):
        if self.baseline is None:
            return None
        return max(0, status_bytes("VmHWM") - self.baseline)


def timed_reps(fn, reps, min_time=0.0, before=None):
    """Median seconds of fn() over at least `reps` runs (more until min_time), and the last result."""
    times, result = [], None
    while len(times) < reps or (sum(times) < min_time and len(times) < MAX_REPS):
        if before is not None:
            before()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median_low(times), len(times), result


# ---------------------------------------------------------------------------------------------
# Single-model codecs. Each variant compresses every tensor (ZipNN, blosc2: one call per tensor,
# their own threads; zstd: blocks of BLOCK_BYTES, on a thread pool) and decompresses it back.


def blocks_of(tensors):
    out = []
    for t in tensors:
        size = DTYPE_SIZE[t.dtype]
        step = max(1, BLOCK_BYTES // size) * size
        mv = memoryview(t.data)
        out.extend((t, mv[i:i + step]) for i in range(0, len(t.data), step))
    return out


class ZipNNCodec:
    """ZipNN 'byte' input, the dtype of each tensor, its own threads setting (0 = its default: all cores)."""

    def __init__(self, threads):
        from zipnn import ZipNN

        self.threads = threads
        self.config = "ZipNN(input_format='byte', bytearray_dtype per tensor)"
        self.zpn = {dt: ZipNN(input_format="byte", bytearray_dtype=dt, threads=threads)
                    for dt in ("float32", "bfloat16", "float16")}

    def _for(self, t):
        return self.zpn[{"BF16": "bfloat16", "F16": "float16"}.get(t.dtype, "float32")]

    def encode(self, tensors, copies):
        # ZipNN rewrites its input buffer in place: it gets copies made outside the timed region.
        return [bytes(self._for(t).compress(c)) for t, c in zip(tensors, copies)]

    def decode(self, tensors, blobs):
        return [self._for(t).decompress(b) for t, b in zip(tensors, blobs)]


class Blosc2Codec:
    """blosc2.compress2 per tensor: one filter, one codec, default clevel, typesize of the dtype."""

    def __init__(self, threads, codec, filt):
        import blosc2

        self.blosc2 = blosc2
        self.threads = threads
        self.codec = getattr(blosc2.Codec, codec)
        self.filter = getattr(blosc2.Filter, filt)
        self.clevel = blosc2.CParams().clevel
        self.config = f"blosc2 {filt.lower()} + {codec.lower()}, clevel {self.clevel}"

    def encode(self, tensors, _copies):
        b = self.blosc2
        out = []
        for t in tensors:
            cp = b.CParams(codec=self.codec, clevel=self.clevel, filters=[self.filter], filters_meta=[0],
                           typesize=DTYPE_SIZE[t.dtype], nthreads=self.threads)
            out.append(b.compress2(t.data, cparams=cp))
        return out

    def decode(self, _tensors, blobs):
        dp = self.blosc2.DParams(nthreads=self.threads)
        return [self.blosc2.decompress2(c, dparams=dp) for c in blobs]


class ZstdCodec:
    """zstandard at one level on blocks of BLOCK_BYTES; grouped: one frame per byte plane of a block."""

    def __init__(self, threads, level, grouped):
        import zstandard

        self.zstd = zstandard
        self.threads, self.level, self.grouped = threads, level, grouped
        self.local = threading.local()
        self.pool = concurrent.futures.ThreadPoolExecutor(threads) if threads > 1 else None
        kind = "byte-grouped (one frame per byte plane)" if grouped else "plain"
        self.config = f"zstd level {level}, {kind}, 1 MiB blocks, a thread pool when threads > 1"

    def _ctx(self):
        loc = self.local
        if not hasattr(loc, "c"):
            loc.c = self.zstd.ZstdCompressor(level=self.level)
            loc.d = self.zstd.ZstdDecompressor()
        return loc

    def _enc(self, item):
        t, block = item
        c = self._ctx().c
        size = DTYPE_SIZE[t.dtype]
        if not self.grouped or size == 1:
            return [c.compress(block)]
        planes = np.frombuffer(block, dtype=np.uint8).reshape(-1, size).T
        return [c.compress(np.ascontiguousarray(p)) for p in planes]

    def _dec(self, item):
        (t, block), frames = item
        d = self._ctx().d
        size = DTYPE_SIZE[t.dtype]
        if len(frames) == 1:
            return d.decompress(frames[0])
        out = np.empty((len(block) // size, size), dtype=np.uint8)
        for i, f in enumerate(frames):
            out[:, i] = np.frombuffer(d.decompress(f), dtype=np.uint8)
        return out.tobytes()

    def _map(self, fn, items):
        return list(self.pool.map(fn, items)) if self.pool else [fn(x) for x in items]

    def encode(self, tensors, _copies):
        self.blocks = blocks_of(tensors)
        return self._map(self._enc, self.blocks)

    def decode(self, tensors, blobs):
        outs = self._map(self._dec, list(zip(self.blocks, blobs)))
        # Reassemble whole tensors from their blocks (part of decoding).
        res, i = [], 0
        for t in tensors:
            n = -(-len(t.data) // (max(1, BLOCK_BYTES // DTYPE_SIZE[t.dtype]) * DTYPE_SIZE[t.dtype]))
            res.append(b"".join(outs[i:i + n]) if n != 1 else outs[i])
            i += n
        return res


def stored_size(blobs):
    return sum(sum(len(f) for f in b) if isinstance(b, list) else len(b) for b in blobs)


def codec_variants(tool, threads):
    if tool == "zipnn":
        return {"ZipNN": lambda: ZipNNCodec(threads)}
    if tool == "blosc2":
        return {f"blosc2 {f.lower()}-{c.lower()}": (lambda c=c, f=f: Blosc2Codec(threads, c, f))
                for f in ("SHUFFLE", "BITSHUFFLE") for c in ("ZSTD", "LZ4")}
    if tool == "zstd":
        return {f"zstd-{lvl}{' byte-grouped' if g else ''}": (lambda lvl=lvl, g=g: ZstdCodec(threads, lvl, g))
                for g in (False, True) for lvl in (1, 3)}
    raise SystemExit(f"unknown codec tool {tool}")


def cmd_codec(args):
    tensors = read_safetensors(args.file)
    raw = sum(len(t.data) for t in tensors)
    results = {}
    for n in [int(x) for x in args.threads.split(",")]:
        for name, make in codec_variants(args.tool, n).items():
            entry = results.setdefault(name, {"name": name, "raw_bytes": raw, "runs": []})
            if "error" in entry:
                continue
            try:
                codec = make()
                entry["config"] = codec.config
                copies = []

                def fresh():
                    copies[:] = [bytearray(t.data) for t in tensors]

                enc_s, enc_n, blobs = timed_reps(lambda: codec.encode(tensors, copies), args.reps, args.min_time,
                                                 before=fresh if args.tool == "zipnn" else None)
                stored = stored_size(blobs)
                if entry.setdefault("stored_bytes", stored) != stored:
                    raise RoundTripError(f"{n} threads stored {stored} bytes, another count did not")
                dec_s, dec_n, outs = timed_reps(lambda: codec.decode(tensors, blobs), args.reps, args.min_time)
                for t, o in zip(tensors, outs):
                    check_same(f"{name}, tensor {t.name}", o, t.data)
                entry["runs"].append({"threads": n, "encode_s": enc_s, "decode_s": dec_s,
                                      "encode_reps": enc_n, "decode_reps": dec_n})
            except Exception as e:  # any failure of a peer is reported, not measured
                entry["error"] = f"{type(e).__name__}: {e}"
    return {"tool": args.tool, "file": args.file, "variants": list(results.values())}


# ---------------------------------------------------------------------------------------------
# Deltas: ZipNN's XOR delta between consecutive steps, codec calls only (no store).


def delta_items(folder):
    """The step pairs of a series, [(step, tensor, base)] for every tensor of a step after the first whose
    step before has a tensor of the same name, dtype and byte length (its base), and the bytes of the
    tensors left out (no such base), as strata-bench delta takes them."""
    series = load_series(folder)
    items, skipped = [], 0
    for (_, before), (step, tensors) in zip(series, series[1:]):
        bases = {t.name: t for t in before}
        for t in tensors:
            b = bases.get(t.name)
            if b is not None and b.dtype == t.dtype and len(b.data) == len(t.data):
                items.append((step, t, b))
            else:
                skipped += len(t.data)
    return len(series) - 1, items, skipped


def cmd_delta(args):
    if args.tool != "zipnn":
        raise SystemExit(f"unknown delta tool {args.tool}")
    from zipnn import ZipNN

    pairs, items, skipped = delta_items(args.dir)
    if pairs < 1:
        raise SystemExit(f"delta needs two steps or more in {args.dir}")
    zpn = {dt: ZipNN(input_format="byte", bytearray_dtype=dt, delta_compressed_type="byte", threads=1)
           for dt in ("float32", "bfloat16", "float16")}
    z = [zpn[ZipNNStore._dt(t.dtype)] for _, t, _ in items]
    copies = []

    def fresh():
        # ZipNN rewrites its input buffer in place: it gets copies made outside the timed region.
        copies[:] = [bytearray(t.data) for _, t, _ in items]

    def encode():
        return [bytes(zi.compress(c, delta_second_data=b.data)) for zi, c, (_, _, b) in zip(z, copies, items)]

    def decode():
        return [zi.decompress(blob, delta_second_data=b.data) for zi, blob, (_, _, b) in zip(z, blobs, items)]

    enc_s, enc_n, blobs = timed_reps(encode, args.reps, args.min_time, before=fresh)
    dec_s, dec_n, outs = timed_reps(decode, args.reps, args.min_time)
    for (step, t, _), o in zip(items, outs):
        check_same(f"tensor {t.name} at step {step}", o, t.data)
    return {"tool": args.tool, "dir": args.dir, "pairs": pairs, "tensors": len(items),
            "config": "ZipNN(input_format='byte', bytearray_dtype per tensor, delta_compressed_type='byte', "
                      "threads=1): compress(copy, delta_second_data=base) / decompress(blob, delta_second_data=base)",
            "raw_bytes": sum(len(t.data) for _, t, _ in items), "stored_bytes": sum(len(b) for b in blobs),
            "skipped_bytes": skipped, "threads": 1, "encode_s": enc_s, "decode_s": dec_s,
            "encode_reps": enc_n, "decode_reps": dec_n}


# ---------------------------------------------------------------------------------------------
# Series stores. Each class writes every step, reads one tensor at a step, loads a checkpoint.


def dir_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _dirs, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


class SafetensorsStore:
    """Plain safetensors files, one per step (safetensors.numpy; bf16 written as its uint16 bits)."""

    config = "safetensors.numpy.save_file per step; reads with safe_open / load_file"

    def __init__(self, path):
        self.path = path

    def _file(self, step):
        return os.path.join(self.path, f"step_{step:06d}.safetensors")

    def write(self, series):
        from safetensors.numpy import save_file

        os.makedirs(self.path)
        for step, tensors in series:
            save_file({t.name: t.array() for t in tensors}, self._file(step))

    def open(self):
        return None  # nothing to open: a file per step, opened by each read

    def read(self, _h, step, name, _steps):
        from safetensors import safe_open

        with safe_open(self._file(step), framework="numpy") as f:
            return f.get_tensor(name).tobytes()

    def load(self, _h, step, _steps):
        from safetensors.numpy import load_file

        return {k: v.tobytes() for k, v in load_file(self._file(step)).items()}


class ZipNNStore:
    """ZipNN per tensor, one safetensors file per step holding the compressed tensors as uint8
    (ZipNN's own compressed-safetensors layout); with delta, each tensor is ZipNN's XOR delta
    (delta_compressed_type='byte') against the same tensor at the previous step."""

    def __init__(self, path, delta):
        from zipnn import ZipNN

        self.path, self.delta = path, delta
        kinds = ("float32", "bfloat16", "float16")
        self.plain = {dt: ZipNN(input_format="byte", bytearray_dtype=dt) for dt in kinds}
        self.xor = {dt: ZipNN(input_format="byte", bytearray_dtype=dt, delta_compressed_type="byte")
                    for dt in kinds}
        self.config = ("ZipNN XOR delta vs the previous step (delta_compressed_type='byte')" if delta
                       else "ZipNN per tensor") + ", default threads, one safetensors file of uint8 blobs per step"

    @staticmethod
    def _dt(dtype):
        return {"BF16": "bfloat16", "F16": "float16"}.get(dtype, "float32")

    def _file(self, step):
        return os.path.join(self.path, f"step_{step:06d}.znn.safetensors")

    def write(self, series):
        from safetensors.numpy import save_file

        os.makedirs(self.path)
        prev = {}
        for step, tensors in series:
            blobs, index = {}, {}
            for t in tensors:
                base = prev.get(t.name)
                is_delta = self.delta and base is not None and base.dtype == t.dtype and base.shape == t.shape
                z = (self.xor if is_delta else self.plain)[self._dt(t.dtype)]
                # ZipNN rewrites its input in place: it gets a copy.
                blob = z.compress(bytearray(t.data), delta_second_data=base.data) if is_delta \
                    else z.compress(bytearray(t.data))
                blobs[t.name] = np.frombuffer(bytes(blob), dtype=np.uint8)
                index[t.name] = {"dtype": t.dtype, "shape": t.shape, "delta": is_delta}
            save_file(blobs, self._file(step), metadata={"znn": json.dumps(index)})
            prev = {t.name: t for t in tensors}

    def _open(self, step):
        from safetensors import safe_open

        f = safe_open(self._file(step), framework="numpy")
        return f, json.loads(f.metadata()["znn"])

    def _decode(self, info, blob, base):
        if info["delta"]:
            return self.xor[self._dt(info["dtype"])].decompress(blob, delta_second_data=base)
        return self.plain[self._dt(info["dtype"])].decompress(blob)

    def _chain(self, step, steps, names):
        """Decodes `names` at `step`, walking the delta chain from the first step."""
        chain = [s for s in steps if s <= step] if self.delta else [step]
        cur = {}
        for s in chain:
            f, index = self._open(s)
            with f:
                cur = {n: bytes(self._decode(index[n], f.get_tensor(n).tobytes(), cur.get(n)))
                       for n in (names if names is not None else index)}
        return cur

    def open(self):
        return None  # nothing to open: a file per step, opened by each read

    def read(self, _h, step, name, steps):
        return self._chain(step, steps, [name])[name]

    def load(self, _h, step, steps):
        return self._chain(step, steps, None)


def _rows_per_chunk(shape, size):
    row = size
    for d in shape[1:]:
        row *= d
    return max(1, BLOCK_BYTES // max(1, row))


class IcechunkStore:
    """An icechunk repository on the local file system; one zarr array per tensor (chunks of about
    1 MiB along the first axis, byte shuffle + zstd 3 through Blosc), one commit and one tag per step."""

    config = "icechunk local repo, zarr v3 arrays, BloscCodec(zstd, clevel 3, shuffle), ~1 MiB chunks, commit + tag per step"

    def __init__(self, path):
        self.path = path

    def _repo(self, create=False):
        import icechunk

        icechunk.set_logs_filter("error")  # its warnings go to stdout, which carries the JSON result
        storage = icechunk.local_filesystem_storage(self.path)
        return icechunk.Repository.create(storage) if create else icechunk.Repository.open(storage)

    def write(self, series):
        import zarr
        from zarr.codecs import BloscCodec

        repo = self._repo(create=True)
        for i, (step, tensors) in enumerate(series):
            session = repo.writable_session("main")
            group = zarr.open_group(session.store, mode="a")
            for t in tensors:
                a = t.array()
                if i == 0:
                    chunks = (min(a.shape[0], _rows_per_chunk(t.shape, a.itemsize)),) + a.shape[1:] if a.ndim else ()
                    arr = group.create_array(t.name, shape=a.shape, dtype=a.dtype, chunks=chunks,
                                             compressors=BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"))
                else:
                    arr = group[t.name]
                arr[...] = a
            snap = session.commit(f"step {step}")
            repo.create_tag(f"step_{step}", snap)

    def open(self):
        return self._repo()

    @staticmethod
    def _group(repo, step):
        import zarr

        session = repo.readonly_session(tag=f"step_{step}")
        return zarr.open_group(session.store, mode="r")

    def read(self, repo, step, name, _steps):
        return self._group(repo, step)[name][...].tobytes()

    def load(self, repo, step, _steps):
        g = self._group(repo, step)
        return {name: arr[...].tobytes() for name, arr in g.arrays()}


class TileDBStore:
    """One dense TileDB array per tensor (tiles of about 1 MiB along the first axis, byte shuffle +
    zstd 3), each step written at its own timestamp and read back at it."""

    config = "TileDB dense array per tensor, ByteShuffle + Zstd(3), ~1 MiB tiles, timestamp per step"

    def __init__(self, path):
        self.path = path

    def _uri(self, name):
        return os.path.join(self.path, urllib.parse.quote(name, safe=""))

    @staticmethod
    def _ts(step):
        return step + 1  # TileDB timestamps start at 1

    def write(self, series):
        import tiledb

        os.makedirs(self.path)
        index = {t.name: {"dtype": t.dtype, "shape": t.shape} for t in series[0][1]}
        with open(os.path.join(self.path, "index.json"), "w") as f:
            json.dump(index, f)
        for i, (step, tensors) in enumerate(series):
            for t in tensors:
                a = t.array()
                a = a.reshape(a.shape or (1,))
                if i == 0:
                    rows = min(a.shape[0], _rows_per_chunk(list(a.shape), a.itemsize))
                    dims = [tiledb.Dim(name=f"d{k}", domain=(0, n - 1), tile=(rows if k == 0 else n), dtype=np.uint64)
                            for k, n in enumerate(a.shape)]
                    filters = tiledb.FilterList([tiledb.ByteShuffleFilter(), tiledb.ZstdFilter(level=3)])
                    attr = tiledb.Attr(name="v", dtype=a.dtype, filters=filters)
                    schema = tiledb.ArraySchema(domain=tiledb.Domain(*dims), attrs=[attr], sparse=False)
                    tiledb.Array.create(self._uri(t.name), schema)
                with tiledb.open(self._uri(t.name), "w", timestamp=self._ts(step)) as arr:
                    arr[:] = a

    def _get(self, name, step):
        import tiledb

        with tiledb.open(self._uri(name), "r", timestamp=self._ts(step)) as arr:
            r = arr[:]
        return r["v"] if isinstance(r, dict) else r

    def open(self):
        return None  # nothing to open: each read opens its array at the step's timestamp

    def read(self, _h, step, name, _steps):
        return self._get(name, step).tobytes()

    def load(self, _h, step, _steps):
        with open(os.path.join(self.path, "index.json")) as f:
            index = json.load(f)
        return {name: self._get(name, step).tobytes() for name in index}


def make_store(tool, path):
    if tool == "safetensors":
        return SafetensorsStore(path)
    if tool in ("zipnn", "zipnn-delta"):
        return ZipNNStore(path, tool == "zipnn-delta")
    if tool == "icechunk":
        return IcechunkStore(path)
    if tool == "tiledb":
        return TileDBStore(path)
    raise SystemExit(f"unknown series tool {tool}")


def load_series(folder):
    return [(step, read_safetensors(p)) for step, p in series_files(folder)]


def check_checkpoint(what, got, tensors):
    if sorted(got) != sorted(t.name for t in tensors):
        raise RoundTripError(f"{what}: tensor names differ from the input")
    for t in tensors:
        check_same(f"{what}, tensor {t.name}", got[t.name], t.data)


def cmd_write(args):
    series = load_series(args.dir)
    store = make_store(args.tool, args.store)
    mem = PeakMemory()
    times = []
    for _ in range(args.reps):
        if os.path.exists(args.store):
            shutil.rmtree(args.store)  # the store of the previous repetition
        t0 = time.perf_counter()
        store.write(series)
        times.append(time.perf_counter() - t0)
    return {"steps": len(series), "seconds": statistics.median_low(times), "reps": len(times),
            "peak_bytes": mem.growth(), "config": store.config,
            "raw_bytes": sum(len(t.data) for _, ts in series for t in ts), "file_bytes": dir_bytes(args.store)}


def cmd_verify(args):
    series = load_series(args.dir)
    steps = [s for s, _ in series]
    store = make_store(args.tool, args.store)
    for step, tensors in series:
        check_checkpoint(f"step {step}", store.load(store.open(), step, steps), tensors)
    return {"ok": True, "steps": len(series)}


def open_then(store, op, reps):
    """Repetitions of: open the store (timed apart; None when the tool has nothing to open), then op
    on the fresh handle. Medians of both, the repetitions, and the last result."""
    opens, times, result, nothing = [], [], None, False
    while len(times) < reps:
        t0 = time.perf_counter()
        handle = store.open()
        t1 = time.perf_counter()
        result = op(handle)
        times.append(time.perf_counter() - t1)
        opens.append(t1 - t0)
        nothing = handle is None
        del handle
    return (None if nothing else statistics.median_low(opens)), statistics.median_low(times), len(times), result


def cmd_read(args):
    series = dict(load_series(args.dir))
    steps = sorted(series)
    expected = next(t for t in series[args.step] if t.name == args.tensor)
    store = make_store(args.tool, args.store)
    mem = PeakMemory()
    open_s, seconds, reps, got = open_then(store, lambda h: store.read(h, args.step, args.tensor, steps), args.reps)
    check_same(f"tensor {args.tensor} at step {args.step}", got, expected.data)
    return {"open_seconds": open_s, "seconds": seconds, "reps": reps, "bytes": len(expected.data),
            "peak_bytes": mem.growth()}


def cmd_load(args):
    series = dict(load_series(args.dir))
    steps = sorted(series)
    store = make_store(args.tool, args.store)
    mem = PeakMemory()
    open_s, seconds, reps, got = open_then(store, lambda h: store.load(h, args.step, steps), args.reps)
    check_checkpoint(f"step {args.step}", got, series[args.step])
    return {"open_seconds": open_s, "seconds": seconds, "reps": reps,
            "bytes": sum(len(t.data) for t in series[args.step]), "peak_bytes": mem.growth()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("codec")
    c.add_argument("tool")
    c.add_argument("file")
    c.add_argument("--threads", default="1")
    c.add_argument("--reps", type=int, default=5)
    c.add_argument("--min-time", type=float, default=1.0, help="repeat past --reps until this many seconds")
    d = sub.add_parser("delta")
    d.add_argument("tool")
    d.add_argument("dir")
    d.add_argument("--reps", type=int, default=5)
    d.add_argument("--min-time", type=float, default=1.0, help="repeat past --reps until this many seconds")
    for name in ("write", "verify", "read", "load"):
        s = sub.add_parser(name)
        s.add_argument("tool")
        s.add_argument("store")
        s.add_argument("dir")
        if name in ("write", "read", "load"):
            s.add_argument("--reps", type=int, default=5)
        if name in ("read", "load"):
            s.add_argument("--step", type=int, required=True)
        if name == "read":
            s.add_argument("--tensor", required=True)
    args = p.parse_args()
    fn = {"codec": cmd_codec, "delta": cmd_delta, "write": cmd_write, "verify": cmd_verify, "read": cmd_read, "load": cmd_load}[args.cmd]
    try:
        result = fn(args)
    except RoundTripError as e:
        print(f"peers.py: round trip failed: {e}", file=sys.stderr)
        sys.exit(1)
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()

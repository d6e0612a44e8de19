"""torch tensors in and out, bf16, and the safetensors.torch drop-ins."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import strata
import strata.torch as stt


def model_sd():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50))
    m[1].weight = m[0].weight  # tied weights: one storage, two names
    sd = m.state_dict()
    sd["bf16"] = torch.randn(33, 7).to(torch.bfloat16)
    sd["half"] = torch.randn(5).half()
    sd["i32"] = torch.arange(9, dtype=torch.int32)
    sd["flag"] = torch.tensor([True, False, True])
    sd["scalar"] = torch.tensor(2.5)
    return sd


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype == torch.bool:
        assert torch.equal(a, b)
    else:
        assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def test_roundtrip_pt(store_path):
    sd = model_sd()
    with strata.Store(store_path) as st:
        st.save_checkpoint(1000, sd, metadata={"loss": 1.93})
        back = st.load_checkpoint(1000, framework="pt")
        assert list(back) == list(sd)
        for k in sd:
            same(back[k], sd[k])
        w = st.get("bf16", step=1000, framework="pt")
        same(w, sd["bf16"])
        # tied weights are stored under both names, read back as two tensors
        assert back["0.weight"].data_ptr() != back["1.weight"].data_ptr()
        # numpy view of bf16: ml_dtypes.bfloat16 if installed, else uint16 bits
        arr = st.get("bf16", 1000)
        assert arr.dtype.itemsize == 2
        assert arr.view(np.uint16).tobytes() == sd["bf16"].view(torch.int16).numpy().tobytes()


def test_zero_copy_output(store_path):
    """The tensor handed out shares memory with the array the native module filled."""
    with strata.Store(store_path) as st:
        st.save_checkpoint(1, {"w": torch.randn(64, 64)})
        dtype, shape, data = st._s.get("w", 1)
        t = strata._convert.from_bytes(dtype, shape, data, "pt")
        assert t.data_ptr() == data.ctypes.data


def test_non_contiguous_grad_and_views(store_path):
    base = torch.randn(8, 10, requires_grad=True)
    nc = base.t()[::2]
    assert not nc.is_contiguous()
    conj = torch.randn(4).to(torch.float32)
    with strata.Store(store_path) as st:
        st.save_checkpoint(1, {"nc": nc, "view": base[2:5, 1:3], "c": conj})
        got = st.load_checkpoint(1, framework="pt")
        assert torch.equal(got["nc"], nc.detach())
        assert torch.equal(got["view"], base[2:5, 1:3].detach())


def test_unsupported_torch(store_path):
    with strata.Store(store_path) as st:
        with pytest.raises(TypeError, match="unsupported dtype"):
            st.save_checkpoint(1, {"c": torch.zeros(3, dtype=torch.complex128)})
        with pytest.raises(TypeError, match="layout"):
            st.save_checkpoint(1, {"s": torch.eye(3).to_sparse()})
        with pytest.raises(TypeError, match="meta"):
            st.save_checkpoint(1, {"m": torch.empty(3, device="meta")})
        assert st.steps() == []


def test_async_from_torch(store_path):
    sd = model_sd()
    with strata.Store(store_path) as st:
        fut = st.save_checkpoint_async(1100, sd)
        for v in sd.values():
            v.zero_() if v.dtype != torch.bool else v.fill_(False)
        fut.result()
        fresh = model_sd()
        for k, v in st.load_checkpoint(1100, framework="pt").items():
            same(v, fresh[k])


def test_drop_ins_match_safetensors(tmp_path):
    sst = pytest.importorskip("safetensors.torch")
    sd = {k: v for k, v in model_sd().items() if k != "1.weight"}  # safetensors refuses ties
    sd = {k: v.contiguous() for k, v in sd.items()}
    ref = tmp_path / "ref.safetensors"
    sst.save_file(sd, str(ref), metadata={"a": "b"})
    store = tmp_path / "m.strata"
    assert stt.save_file(sd, store, metadata={"a": "b"}) == 0
    assert stt.save_file(sd, store) == 1
    assert stt.save_file(sd, store, step=10) == 10
    with pytest.raises(ValueError):
        stt.save_file(sd, store, metadata={"a": 1})
    a = sst.load_file(str(ref))
    b = stt.load_file(store, step=0)
    assert a.keys() == b.keys()
    for k in a:
        same(a[k], b[k])
    assert stt.load_file(store).keys() == a.keys()  # latest (10)
    from safetensors import safe_open as ref_open

    with ref_open(str(ref), framework="pt") as f, stt.safe_open(store, framework="pt", step=0) as g:
        assert sorted(f.keys()) == sorted(g.keys())
        assert f.metadata() == g.metadata()
        for k in f.keys():
            same(f.get_tensor(k), g.get_tensor(k))
        x, y = f.get_slice("0.weight")[10:20], g.get_slice("0.weight")[10:20]
        same(x, y)
        assert f.get_slice("0.weight").get_shape() == g.get_slice("0.weight").get_shape()
    # leaving the with block closed the store: it can be opened again
    strata.Store(store).close()


def test_complex_and_float8_round_trip(store_path):
    """torch's complex64 and float8 tensors come back with their dtype, bit-exact."""
    src = {"c": torch.randn(4, 3, dtype=torch.complex64)}
    bits = torch.arange(256, dtype=torch.uint8).reshape(16, 16)
    for name in ["float8_e4m3fn", "float8_e5m2"]:
        src[name] = bits.view(getattr(torch, name))
    with strata.Store(store_path) as st:
        st.save_checkpoint(1, src)
        back = st.load_checkpoint(1, framework="pt")
        for k, v in src.items():
            assert back[k].dtype == v.dtype, k
        assert torch.equal(back["c"], src["c"])
        for k in ["float8_e4m3fn", "float8_e5m2"]:
            assert torch.equal(back[k].view(torch.uint8), bits), k


def _safetensors_file(path, tensors):
    """A safetensors file written by hand: (name, dtype name, shape, bytes) in order."""
    import json
    import struct

    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors))


def _read_safetensors(path):
    """{name: (dtype, shape, bytes)} of a safetensors file, parsed by hand."""
    import json
    import struct

    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8 : 8 + n]), raw[8 + n :]
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[slice(*v["data_offsets"])]) for k, v in header.items()}


def test_packed_fp4_and_fp6(store_path, tmp_path):
    """FP4 pairs are torch's float4_e2m1fn_x2 both ways; FP6 groups come back as their bytes."""
    bits = torch.arange(256, dtype=torch.uint8).reshape(8, 32)
    fp4 = bits.view(torch.float4_e2m1fn_x2)
    with strata.Store(store_path) as st:
        st.save_checkpoint(1, {"fp4": fp4})
        back = st.load_checkpoint(1, framework="pt")["fp4"]
        assert back.dtype == torch.float4_e2m1fn_x2 and back.shape == fp4.shape
        assert torch.equal(back.view(torch.uint8), bits)
        as_np = st.get("fp4", 1)
        assert as_np.dtype == np.uint8 and as_np.shape == (8, 32)

        # 16 x 8 FP6 values: 16 x 2 groups of 3 bytes, through a safetensors file.
        raw = bytes(range(96))
        src = tmp_path / "fp6.safetensors"
        _safetensors_file(src, [("fp6", "F6_E3M2", [16, 8], raw), ("fp4", "F4", [8, 64], bits.numpy().tobytes())])
        assert st.import_safetensors(src, step=2) == 2
        fp6 = st.get("fp6", 2)
        assert fp6.dtype == np.uint8 and fp6.shape == (16, 2, 3)
        assert fp6.tobytes() == raw
        assert torch.equal(st.get("fp4", 2, framework="pt").view(torch.uint8), bits)
        out = tmp_path / "back.safetensors"
        st.export_safetensors(2, out)
        assert _read_safetensors(out) == _read_safetensors(src)


def test_save_model_and_load_model(tmp_path):
    """Issue 29 item 6: safetensors' save_model / load_model, tied weights included."""
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

    torch.manual_seed(0)
    model, store = Tied(), tmp_path / "m.strata"
    assert stt.save_model(model, store, metadata={"k": "v"}) == 0
    fresh = Tied()
    assert stt.load_model(fresh, store) == ([], [])
    assert torch.equal(fresh.emb.weight, model.emb.weight)
    assert fresh.head.weight is fresh.emb.weight
    with stt.safe_open(store, framework="pt") as f:
        assert f.metadata() == {"k": "v"}
    other = torch.nn.Linear(4, 4)
    with pytest.raises(RuntimeError, match="Missing key"):
        stt.load_model(other, store)
    missing, unexpected = stt.load_model(other, store, strict=False)
    assert sorted(missing) == ["bias", "weight"] and sorted(unexpected) == ["emb.weight",
                                                                            "head.weight"]
    with pytest.raises(strata.CheckpointExists):
        stt.save_model(model, store, step=0)
    with pytest.raises(strata.NotFound):
        stt.load_model(fresh, tmp_path / "missing.strata")
    assert not (tmp_path / "missing.strata").exists()

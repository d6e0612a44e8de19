"""The core API with NumPy (and torch where it is installed), and bad input."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import strata


def sd(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "embed.weight": rng.standard_normal((300, 64), dtype=np.float32),
        "lm_head.weight": rng.standard_normal((64, 32)).astype(np.float16),
        "counts": np.arange(10, dtype=np.int64),
        "mask": rng.random(7) > 0.5,
        "scalar": np.float64(3.5) * np.ones((), dtype=np.float64),
        "u32": np.arange(5, dtype=np.uint32),
    }


def test_roundtrip_numpy(store_path):
    with strata.Store(store_path) as st:
        a = sd(0)
        st.save_checkpoint(1000, a, metadata={"loss": 1.93})
        back = st.load_checkpoint(1000)
        assert list(back) == list(a)
        for k in a:
            assert back[k].dtype == a[k].dtype and back[k].shape == a[k].shape
            assert back[k].tobytes() == a[k].tobytes()
        assert st.metadata(1000) == {"loss": 1.93}
        streamed = list(st.iter_checkpoint(1000))
        assert [n for n, _ in streamed] == list(a)
        assert all(t.tobytes() == a[n].tobytes() for n, t in streamed)
        w = st.get("embed.weight", step=1000)
        np.testing.assert_array_equal(w, a["embed.weight"])
        assert st.steps() == [1000] and st.latest_step() == 1000
    assert st.closed
    with pytest.raises(strata.StrataError, match="closed"):
        st.steps()


def test_load_checkpoint_fills_arrays_as_get_reads_them(store_path):
    """load_checkpoint decodes every block into arrays it allocated first: blocks of many
    tensors, deltas against the step before, empty tensors; each array owns its bytes."""
    rng = np.random.default_rng(7)
    base = {
        "big": rng.standard_normal((64, 1000), dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "ids": np.arange(3000, dtype=np.int64),
        **{f"small.{i}": rng.standard_normal(17 * i + 1, dtype=np.float32) for i in range(30)},
    }
    with strata.Store(store_path, block_bytes=4096) as st:
        for step in (1, 2):
            tensors = {k: v + step if v.dtype == np.float32 else v for k, v in base.items()}
            st.save_checkpoint(step, tensors)
        for step in (1, 2):
            back = st.load_checkpoint(step)
            assert list(back) == list(base)
            for k, v in back.items():
                want = st.get(k, step)
                assert v.dtype == want.dtype and v.shape == want.shape, k
                assert v.tobytes() == want.tobytes(), (step, k)
        again = st.load_checkpoint(2)
        back["big"][0, 0] = 123.0
        assert again["big"][0, 0] != 123.0 and back["big"].flags.writeable
        with pytest.raises(strata.NotFound):
            st.load_checkpoint(3)


def test_get_at_history_tags_retain(store_path):
    st = strata.open(store_path)
    for s in (10, 20, 30, 40):
        st.save_checkpoint(s, sd(s))
    found, w = st.get_at("embed.weight", 25)
    assert found == 20
    np.testing.assert_array_equal(w, sd(20)["embed.weight"])
    with pytest.raises(strata.NotFound):
        st.get("embed.weight", 25)
    with pytest.raises(strata.NotFound):
        st.get_at("embed.weight", 5)
    h = st.history("embed.weight", index=5)
    assert [s for s, _ in h] == [10, 20, 30, 40]
    assert [v[0] for _, v in h] == [sd(s)["embed.weight"].reshape(-1)[5] for s in (10, 20, 30, 40)]
    h2 = st.history("embed.weight", index=slice(3, 6), steps=(20, 30))
    assert [s for s, _ in h2] == [20, 30] and h2[0][1].shape == (3,)
    st.tag("best", 10)
    assert st.tags() == {"best": 10}
    rep = st.retain(max_to_keep=1, keep_period=30, keep_tagged=True)
    assert st.steps() == [10, 30, 40] and rep["removed"] == [20]
    st.delete_checkpoint(30)
    assert st.steps() == [10, 40]
    before = os.path.getsize(store_path)
    st.compact()
    assert os.path.getsize(store_path) <= before
    with pytest.raises(strata.InvalidInput):
        st.retain()
    st.close()


def test_retain_after_every_save_keeps_room(store_path):
    """A retention after every save (``max_to_keep``) keeps the room it frees for the next save
    and says so, instead of compacting the whole store each call (ADR 0037); the kept
    checkpoints read back exactly, and ``compact`` returns the room."""
    rng = np.random.default_rng(5)
    w = rng.normal(0, 0.02, 3 << 18).astype(np.float32)  # 3 MiB: three blocks
    saved = {}
    with strata.open(store_path) as st:
        for step in range(1, 9):
            w[step::5] += np.float32(1e-4)
            st.save_checkpoint(step, {"w": w})
            saved[step] = w.copy()
            rep = st.retain(max_to_keep=2)
            if step > 2:
                assert rep["removed"] == [step - 2]
                assert rep["compacted"] is False, rep
                assert "kept as room" in rep["compaction_deferred"], rep
        assert st.steps() == [7, 8]
        for step in (7, 8):
            assert st.get("w", step).tobytes() == saved[step].tobytes()
        before = st.stats()["disk_bytes"]
        st.compact()
        assert st.stats()["disk_bytes"] < before


@pytest.mark.parametrize("newest_keyframe", [None, True, False])
def test_newest_keyframe_setting_reads_every_checkpoint_exactly(store_path, newest_keyframe):
    """With the newest kept a keyframe (the default) or forward chains only, every checkpoint of
    a run whose moments change everywhere reads back exactly, through saves, a deletion of the
    newest and a retention."""
    rng = np.random.default_rng(11)
    saved = {}
    with strata.Store(store_path, newest_keyframe=newest_keyframe) as st:
        for step in range(1, 9):
            m = rng.normal(0, 1e-3, 1 << 17).astype(np.float32)  # 512 KiB: a keyframe a block
            st.save_checkpoint(step, {"exp_avg": m})
            saved[step] = m
        st.delete_checkpoint(8)
        del saved[8]
        st.retain(max_to_keep=4)
        for step in (1, 2, 3):
            del saved[step]
        assert st.steps() == sorted(saved)
        for step, m in saved.items():
            assert np.array_equal(st.load_checkpoint(step)["exp_avg"], m), step
    with pytest.raises(TypeError):
        strata.Store(store_path, newest_keyframe="yes")


def test_close_gives_back_the_room_retain_kept(store_path):
    """A handle that retained after every save gives the room it kept back as it closes: no
    save of its follows (ADR 0038). A run resumed in a second handle ends at its compacted
    size."""
    rng = np.random.default_rng(6)
    w = rng.normal(0, 0.02, 3 << 18).astype(np.float32)
    for steps in (range(1, 9), range(9, 11)):
        with strata.open(store_path) as st:
            for step in steps:
                w[step::5] += np.float32(1e-4)
                st.save_checkpoint(step, {"w": w})
                st.retain(max_to_keep=2)
        closed = os.path.getsize(store_path)
        with strata.open(store_path) as st:
            st.compact()
            assert st.get("w", steps[-1]).tobytes() == w.tobytes()
        compacted = os.path.getsize(store_path)
        assert closed <= compacted * 1.05, (closed, compacted)


def test_open_step_slices(store_path):
    with strata.Store(store_path) as st:
        a = sd(1)
        st.save_checkpoint(5, a, metadata={"note": "x", "n": 3})
        with st.open_step(5) as f:
            assert f.keys() == list(a)
            assert f.metadata() == st.metadata(5) == {"note": "x", "n": 3}  # as saved
            e = a["embed.weight"]
            rows = f.get_slice("embed.weight")[100:200]
            np.testing.assert_array_equal(rows, e[100:200])
            np.testing.assert_array_equal(f.get_slice("embed.weight")[7], e[7])
            np.testing.assert_array_equal(f.get_slice("embed.weight")[-3:, 2:5], e[-3:, 2:5])
            np.testing.assert_array_equal(f.get_slice("embed.weight")[10:2:-3], e[10:2:-3])
            np.testing.assert_array_equal(f.get_slice("embed.weight")[::7], e[::7])
            assert f.get_slice("embed.weight").get_shape() == [300, 64]
            np.testing.assert_array_equal(f.get_tensor("counts"), a["counts"])
            with pytest.raises(strata.NotFound):
                f.get_tensor("nope")
            with pytest.raises(IndexError):
                f.get_slice("embed.weight")[300]


def test_safetensors_roundtrip(store_path, tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    a = sd(2)
    with strata.Store(store_path) as st:
        st.save_checkpoint(1, a)
        out = tmp_path / "out" / "model.safetensors"
        st.export_safetensors(1, out)
        back = safetensors_numpy.load_file(str(out))
        for k in a:
            np.testing.assert_array_equal(back[k], a[k])
        assert st.import_safetensors(out, step=2) == len(a)
        for k in a:
            assert st.get(k, 2).tobytes() == a[k].tobytes()


def test_policy_maintain_verify_stats(store_path):
    with strata.Store(store_path) as st:
        st.set_policy("kv.*", tier="hot8", residual="exact")
        x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
        st.put("kv.0", 7, x)
        got = st.get("kv.0", 7)
        assert np.max(np.abs(got - x)) <= np.max(np.abs(x)) / 200
        # The read says what it is worth: 8 bits within the stated bound, not exact.
        got2, fidelity = st.get("kv.0", 7, with_fidelity=True)
        assert fidelity["kind"] == "bounded" and fidelity["bits"] == 8
        assert np.max(np.abs(got2 - x)) <= fidelity["max_rel_error"] * np.max(np.abs(x))
        st.put("w", 7, x)
        assert st.get("w", 7, with_fidelity=True)[1] == {"kind": "exact"}
        rep = st.maintain()
        assert "moves" in rep
        v = st.verify()
        assert v["ok"] and v["issues"] == []
        s = st.stats()
        assert s["versions"] == 2 and s["file_bytes"] > 0
        with pytest.raises(ValueError):
            st.set_policy("x", tier="hot9")
        with pytest.raises(ValueError):
            st.set_policy("x", tier="hot8", residual="topk:2")


def test_async_save(store_path):
    with strata.Store(store_path) as st:
        a = sd(3)
        fut = st.save_checkpoint_async(1100, a)
        a["embed.weight"][:] = 0  # the save works on a copy taken at the call
        assert fut.result() is None
        assert st.get("embed.weight", 1100).tobytes() == sd(3)["embed.weight"].tobytes()
        fut = st.save_checkpoint_async(1100, a)
        with pytest.raises(strata.InvalidInput):
            fut.result()


def test_bf16_numpy(store_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.arange(12, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(3, 4)
    with strata.Store(store_path) as st:
        st.save_checkpoint(1, {"w": x})
        back = st.get("w", 1)
        assert back.dtype == ml_dtypes.bfloat16 and back.tobytes() == x.tobytes()


def test_bad_steps(store_path):
    with strata.Store(store_path) as st:
        a = {"w": np.zeros(3, np.float32)}
        for bad, exc in [(-1, ValueError), (1.0, TypeError), ("1", TypeError), (True, TypeError),
                         (2**64, ValueError), (None, TypeError)]:
            with pytest.raises(exc):
                st.save_checkpoint(bad, a)
            with pytest.raises(exc):
                st.get("w", bad)
        st.save_checkpoint(np.int64(3), a)
        assert st.steps() == [3]
        with pytest.raises(strata.InvalidInput, match="exists"):
            st.save_checkpoint(3, a)


def test_bad_tensors(store_path):
    with strata.Store(store_path) as st:
        with pytest.raises(TypeError, match="complex128"):
            st.save_checkpoint(1, {"c": np.zeros(3, np.complex128)})
        with pytest.raises(TypeError, match="object"):
            st.save_checkpoint(1, {"o": np.array([object()], dtype=object)})
        with pytest.raises(TypeError, match="must be str"):
            st.save_checkpoint(1, {3: np.zeros(3)})
        with pytest.raises(TypeError, match="nested"):
            st.save_checkpoint(1, {"a": {"b": np.zeros(3)}})
        with pytest.raises(TypeError, match="mapping"):
            st.save_checkpoint(1, [np.zeros(3)])
        with pytest.raises(TypeError):
            st.save_checkpoint(1, {"s": "text"})
        with pytest.raises(strata.InvalidInput):
            st.save_checkpoint(1, {"": np.zeros(3)})
        assert st.steps() == []  # nothing was written by the refusals
        # non-contiguous and big-endian arrays are copied, values kept
        base = np.arange(40, dtype=np.float32).reshape(5, 8)
        nc = base[:, ::2]
        be = np.arange(6, dtype=">i4")
        st.save_checkpoint(2, {"nc": nc, "be": be})
        np.testing.assert_array_equal(st.get("nc", 2), nc)
        np.testing.assert_array_equal(st.get("be", 2), be)
        with pytest.raises(ValueError):
            st.get("nc", 2, framework="jax")


def test_in_use_by_another_process(store_path):
    with strata.Store(store_path) as st:
        st.save_checkpoint(1, {"w": np.zeros(3, np.float32)})
        code = textwrap.dedent(f"""
            import strata, sys
            try:
                strata.Store({store_path!r})
            except strata.InUse as e:
                print("InUse:", e); sys.exit(0)
            sys.exit(1)
        """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "in use" in r.stdout
    # and a second handle in this process
    with strata.Store(store_path) as st:
        with pytest.raises(strata.InUse):
            strata.Store(store_path)


def test_not_a_store(tmp_path):
    p = tmp_path / "junk.strata"
    p.write_bytes(b"not a database" * 100)
    with pytest.raises(strata.StrataError):
        strata.Store(p)


def test_exception_hierarchy():
    for e in (strata.NotFound, strata.InvalidInput, strata.Corrupt, strata.InUse, strata.TierError):
        assert issubclass(e, strata.StrataError)
    assert issubclass(strata.StrataError, Exception)


def test_native_module_refuses_bad_input(store_path):
    """The native module itself (bypassing the Python checks) raises, never panics."""
    u8 = np.zeros(4, np.uint8)
    with strata.Store(store_path) as st:
        n = st._s
        with pytest.raises(strata.InvalidInput):
            n.put("w", 1, "f32", [2**63, 4], u8)  # shape overflows
        with pytest.raises(strata.InvalidInput):
            n.put("w", 1, "f32", [3], u8)  # 4 bytes for 3 f32
        with pytest.raises(TypeError):
            n.put("w", 1, "f4", [1], u8)  # a dtype the store does not hold
        with pytest.raises(TypeError):
            n.put("w", 1, "f32", [1], np.zeros(1, np.float32))  # not a uint8 array
        with pytest.raises(ValueError):
            n.put("w", 1, "u8", [2], np.zeros(4, np.uint8)[::2])  # not contiguous
        with pytest.raises(OverflowError):
            n.put("w", -1, "u8", [4], u8)
        with pytest.raises(strata.InvalidInput):
            n.put("x" * 100_000, 1, "u8", [4], u8)  # name too long
        n.put("w", 1, "u8", [4], u8)
        with pytest.raises(ValueError):
            n.get_range("w", 1, 3, 1)
        with pytest.raises(strata.InvalidInput):
            n.get_range("w", 1, 0, 10**6)
        with pytest.raises(ValueError):
            n.set_policy("k*", "hot8", "topk:nan", False)
        assert n.get("w", 1)[2].tobytes() == bytes(4)


def test_options(store_path):
    with strata.Store(store_path, block_bytes=4096, window_bytes=1 << 20, cache_bytes=0) as st:
        a = sd(4)
        st.save_checkpoint(1, a)
        assert st.get("embed.weight", 1).tobytes() == a["embed.weight"].tobytes()
    with pytest.raises(strata.InvalidInput):
        strata.Store(store_path + "2", block_bytes=0)
    with pytest.raises(TypeError):
        strata.Store(store_path + "3", window_bytes=1.5)
    with pytest.raises(OverflowError):
        strata.Store(store_path + "4", max_chain=300)


def test_complex_and_fp8_round_trip(store_path):
    """complex64 and ml_dtypes' 8-bit floats are stored bit-exact."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives NumPy its fp8 types")
    c = (np.arange(12, dtype=np.float32) - 3).view(np.complex64).reshape(2, 3)
    fp8 = {
        n: np.frombuffer(bytes(range(256)), dtype=getattr(ml_dtypes, n)).reshape(16, 16)
        for n in ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]
    }
    with strata.Store(store_path) as st:
        st.save_checkpoint(1, {"c": c, **fp8})
        back = st.load_checkpoint(1)
        assert back["c"].dtype == np.complex64 and back["c"].tobytes() == c.tobytes()
        for n, a in fp8.items():
            assert back[n].dtype == a.dtype, n
            assert back[n].tobytes() == a.tobytes(), n


def test_save_checkpoint_from_other_stores(tmp_path):
    """The DCP coordinator's copy: checkpoints of other stores into one, tensor by tensor."""
    a, b, dst = (str(tmp_path / n) for n in ("a.strata", "b.strata", "dst.strata"))
    with strata.Store(a) as st:
        st.save_checkpoint(0, {"x": np.arange(10, dtype=np.float32), "y": np.ones((3, 3))})
    with strata.Store(b) as st:
        st.save_checkpoint(4, {"z": np.arange(5, dtype=np.int64)})
    with strata.Store(dst) as st:
        assert st.save_checkpoint_from(9, [(a, 0), (b, 4)], metadata={"m": 1}) == 3
        assert st.keys(9) == ["x", "y", "z"] and st.metadata(9) == {"m": 1}
        np.testing.assert_array_equal(st.get("z", 9), np.arange(5))
        np.testing.assert_array_equal(st.get("y", 9), np.ones((3, 3)))
        with pytest.raises(strata.InvalidInput):  # a name twice
            st.save_checkpoint_from(10, [(a, 0), (a, 0)])
        with pytest.raises(strata.NotFound):
            st.save_checkpoint_from(10, [(b, 5)])
        with pytest.raises(strata.CheckpointExists):
            st.save_checkpoint_from(9, [(b, 4)])
        assert st.steps() == [9]

"""Reading beside a writer (issue 29, items 1 and 2): read-only opens in another process follow
the writer's commits; a handle of this process is released on close and on collection, and
the InUse error says what to do."""

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import strata

# A writer in another process: saves checkpoint N when "N" arrives on stdin, answers "saved N".
WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    import strata
    with strata.Store(sys.argv[1]) as st:
        print("open", flush=True)
        for line in sys.stdin:
            step = int(line)
            st.save_checkpoint(step, {"w": np.full(1000, step, np.float32)}, metadata={"s": step})
            print("saved", step, flush=True)
""")


@pytest.fixture
def writer(store_path):
    p = subprocess.Popen([sys.executable, "-c", WRITER, store_path], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "open"

    def save(step):
        p.stdin.write(f"{step}\n")
        p.stdin.flush()
        assert p.stdout.readline().split() == ["saved", str(step)]

    yield save
    p.stdin.close()
    assert p.wait(timeout=60) == 0


def test_reader_follows_a_writer_in_another_process(store_path, writer):
    writer(1)
    with pytest.raises(strata.InUse, match="open_read_only"):
        strata.Store(store_path)
    with strata.open_read_only(store_path) as r, strata.ReadOnlyStore(store_path) as r2:
        assert r.steps() == [1] and r2.steps() == [1]
        writer(2)
        writer(3)
        assert r.steps() == [1, 2, 3]  # the writer's commits, as they come
        assert r.latest_step() == 3 and r2.latest_step() == 3
        np.testing.assert_array_equal(r.get("w", 3), np.full(1000, 3, np.float32))
        assert r.metadata(2) == {"s": 2}
        assert r.load_checkpoint(1)["w"][0] == 1
        with r.open_step() as f:
            assert f.step == 3 and f.metadata() == {"s": 3}
        assert r.verify()["ok"]
        assert r.stats()["checkpoints"] == 3
        for write in ("save_checkpoint", "put", "delete", "retain", "age", "tag", "compact"):
            assert not hasattr(r, write), write
        # The native handle refuses writes too.
        with pytest.raises(strata.InvalidInput, match="read-only"):
            r._s.save_checkpoint(9, [], "")


def test_read_only_open_of_a_missing_file_creates_nothing(tmp_path):
    path = tmp_path / "missing.strata"
    with pytest.raises(strata.NotFound):
        strata.open_read_only(path)
    assert not path.exists()


def test_read_only_beside_a_writer_of_this_process(store_path):
    with strata.Store(store_path) as st:
        st.save_checkpoint(1, {"w": np.ones(3, np.float32)})
        with strata.open_read_only(store_path) as r:
            st.save_checkpoint(2, {"w": np.zeros(3, np.float32)})
            assert r.steps() == [1, 2]


def test_released_on_close_and_collection(store_path):
    st = strata.Store(store_path)
    st.close()
    st = strata.Store(store_path)  # reopened after close
    del st
    st = strata.Store(store_path)  # reopened after the last reference went
    st.cycle = st  # a reference cycle: freed only by the garbage collector
    del st
    st = strata.Store(store_path)  # open collects it and retries
    st.close()


def test_in_use_names_this_process_handle(store_path):
    st = strata.Store(store_path)  # opened here: the error must name this line
    line = sys._getframe().f_lineno - 1
    with pytest.raises(strata.InUse) as e:
        strata.Store(store_path)
    text = str(e.value)
    assert f"{os.path.basename(__file__)}:{line}" in text
    assert "close" in text and "open_read_only" in text
    st.close()
    strata.Store(store_path).close()
    gc.collect()


def test_exceptions_are_strata_names():
    import pickle

    for e in (strata.StrataError, strata.NotFound, strata.InvalidInput, strata.CheckpointExists,
              strata.Corrupt, strata.InUse, strata.TierError, strata.RemoteFailure,
              strata.Conflict, strata.StaleCheckpoint):
        assert e.__module__ == "strata", e
        assert repr(e) == f"<class 'strata.{e.__name__}'>"
        assert getattr(strata, e.__name__) is e
        back = pickle.loads(pickle.dumps(e("why")))
        assert type(back) is e and str(back) == "why"
    assert issubclass(strata.CheckpointExists, strata.InvalidInput)
    assert issubclass(strata.StaleCheckpoint, strata.NotFound)

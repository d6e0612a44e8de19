"""One honest size (ADR 0028): ``stats()`` names one ratio, raw bytes over bytes on disk, and a
training loop's store, once closed, is as long as ``ls -l`` says within a tenth of what it
takes on disk."""

import os

import numpy as np
import pytest

import strata


def length_and_disk(path):
    """The file's length (``ls -l``) and the bytes it takes on disk (``du``)."""
    st = os.stat(path)
    return st.st_size, st.st_blocks * 512


def test_stats_names_one_ratio_raw_over_disk(store_path):
    rng = np.random.default_rng(0)
    with strata.Store(store_path) as st:
        w = rng.standard_normal(1 << 16, dtype=np.float32)
        for step in range(3):
            st.save_checkpoint(step, {"w": w + np.float32(1e-3 * step)})
        s = st.stats()
    assert [k for k in s if "ratio" in k] == ["ratio"], s
    assert s["ratio"] == s["raw_bytes"] / s["disk_bytes"]
    with strata.open_read_only(store_path) as r:
        again = r.stats()
    assert again["ratio"] == again["raw_bytes"] / again["disk_bytes"]


def test_a_training_loop_leaves_a_file_as_long_as_its_disk_bytes(store_path):
    torch = pytest.importorskip("torch")

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
        torch.nn.ReLU(), torch.nn.Linear(256, 10),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(512, 256), torch.randint(0, 10, (512,))

    def training_state():
        state = {f"model/{k}": v for k, v in model.state_dict().items()}
        for name, p in model.named_parameters():
            for moment in ("exp_avg", "exp_avg_sq"):
                state[f"optimizer/{name}/{moment}"] = opt.state[p][moment]
        return state

    room = False
    with strata.Store(store_path) as st:
        # Save every 10 steps until redb has reserved room for growth worth trimming
        # (at least 10 checkpoints), as a trainer's file does between two saves.
        for step in range(1, 601):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if step % 10 == 0:
                st.save_checkpoint(step, training_state())
                length, disk = length_and_disk(store_path)
                if step >= 100 and length > 1.1 * disk:
                    room = True
                    break
        assert room, f"no room for growth to trim: length {length}, on disk {disk}"
        raw = st.stats()["raw_bytes"]
    length, disk = length_and_disk(store_path)
    assert length <= 1.1 * disk, f"after close: length {length}, on disk {disk}"
    with strata.open_read_only(store_path) as r:
        s = r.stats()
        assert s["raw_bytes"] == raw and s["file_bytes"] == length
        back = r.load_checkpoint(step, framework="pt")
        for k, v in training_state().items():
            assert torch.equal(back[k].view(torch.uint8), v.contiguous().view(torch.uint8)), k
        assert r.verify()["ok"]

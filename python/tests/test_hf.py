"""StrataCallback with a real transformers Trainer (a tiny GPT-2 built from a config: no
download), and load_into_model."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import strata
from strata.hf import StrataCallback, load_into_model, load_trainer_state


class Data(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (16, 12), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_model():
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(cfg)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_callback_saves_each_on_save(tmp_path, asynchronous):
    torch.manual_seed(0)
    model = tiny_model()
    store = str(tmp_path / "hf.strata")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=Data(),
        callbacks=[StrataCallback(store, asynchronous=asynchronous)],
    )
    trainer.train()
    with strata.Store(store) as st:
        assert st.steps() == [2, 4]
        assert st.metadata(4)["global_step"] == 4
    fresh = tiny_model()
    assert load_into_model(fresh, store) == 4
    for (k, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), k
    assert load_into_model(fresh, store, step=2) == 2


def test_optimizer_and_scheduler_state_come_back_exact(tmp_path):
    torch.manual_seed(0)
    store = str(tmp_path / "hf.strata")

    def trainer_for(model, callbacks):
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "out"), max_steps=4, save_strategy="steps", save_steps=4,
            per_device_train_batch_size=4, report_to=[], use_cpu=True, disable_tqdm=True,
            learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=2,
        )
        return transformers.Trainer(model=model, args=args, train_dataset=Data(), callbacks=callbacks)

    trainer = trainer_for(tiny_model(), [StrataCallback(store)])
    trainer.train()
    saved = load_trainer_state(store, 4)
    want = trainer.optimizer.state_dict()
    assert saved["optimizer"]["param_groups"] == want["param_groups"]
    assert saved["lr_scheduler"] == trainer.lr_scheduler.state_dict()
    # Into a fresh trainer's optimizer and scheduler.
    fresh = trainer_for(tiny_model(), [])
    fresh.create_optimizer_and_scheduler(num_training_steps=4)
    assert load_into_model(fresh.model, store, optimizer=fresh.optimizer,
                           lr_scheduler=fresh.lr_scheduler) == 4
    got = fresh.optimizer.state_dict()
    assert got["state"].keys() == want["state"].keys()
    for i, s in want["state"].items():
        for k, v in s.items():
            assert torch.equal(got["state"][i][k], v), (i, k)
    assert fresh.lr_scheduler.state_dict() == trainer.lr_scheduler.state_dict()
    with strata.Store(store) as st:
        assert any(k.startswith("__trainer__/") for k in st.keys(4))

"""StrataCallback with a real transformers Trainer (a tiny GPT-2 built from a config: no
download), and load_into_model."""

import os

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


def make_trainer(tmp_path, model, callbacks, max_steps, save_steps, seed=0, **kw):
    settings = dict(
        output_dir=str(tmp_path / "out"), max_steps=max_steps, save_strategy="steps",
        save_steps=save_steps, per_device_train_batch_size=4, report_to=[], use_cpu=True,
        disable_tqdm=True, learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=2,
        seed=seed, logging_steps=1,
    )
    args = transformers.TrainingArguments(**{**settings, **kw})
    return transformers.Trainer(model=model, args=args, train_dataset=Data(), eval_dataset=Data(),
                                callbacks=callbacks)


def weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_second_run_into_the_same_store_is_refused_or_overwrites(tmp_path):
    """Issue 26: a second run with another seed into the same store must never leave the first
    run's checkpoints to be loaded as its own."""
    store = str(tmp_path / "hf.strata")
    torch.manual_seed(1)
    first = make_trainer(tmp_path, tiny_model(), [StrataCallback(store)], 8, 2, seed=1)
    first.train()
    with strata.open_read_only(store) as st:
        first_run = st.metadata(8)["strata.run_id"]

    torch.manual_seed(2)
    second = make_trainer(tmp_path, tiny_model(), [StrataCallback(store)], 4, 2, seed=2)
    before = weights(second.model)
    with pytest.raises(strata.CheckpointExists, match="overwrite=True"):
        second.train()
    for k, v in weights(second.model).items():  # refused before training
        assert torch.equal(v, before[k]), k

    torch.manual_seed(2)
    second = make_trainer(tmp_path, tiny_model(), [StrataCallback(store, overwrite=True)], 4, 2,
                          seed=2)
    second.train()
    with strata.open_read_only(store) as st:
        assert st.steps() == [2, 4]  # the first run's 6 and 8 went too
        runs = {st.metadata(s)["strata.run_id"] for s in st.steps()}
    assert len(runs) == 1 and first_run not in runs
    fresh = tiny_model()
    assert load_into_model(fresh, store) == 4
    for k, v in weights(second.model).items():
        assert torch.equal(fresh.state_dict()[k], v), k


class StopAt(transformers.TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


def test_resume_from_the_store_without_trainer_folders(tmp_path):
    """Issue 29 item 3: a run saved only into the store (no checkpoint-* folders), stopped at
    step 6 and resumed from the store by Trainer.train, ends bit-exact equal to an unbroken
    run: model, optimizer, scheduler, RNG (GPT-2's dropout) and data position come back."""
    def run(store, callbacks, resume=None):
        torch.manual_seed(0)
        t = make_trainer(tmp_path / (os.path.basename(store) + ".out"), tiny_model(),
                         [StrataCallback(store, trainer_folders=False), *callbacks], 8, 3)
        t.train(resume_from_checkpoint=resume)
        return t

    whole = run(str(tmp_path / "whole.strata"), [])
    store = str(tmp_path / "broken.strata")
    run(store, [StopAt(6)])
    with strata.open_read_only(store) as st:
        assert st.steps() == [3, 6]
    assert not [d for d in os.listdir(tmp_path / "broken.strata.out" / "out")
                if d.startswith("checkpoint-")]
    with strata.hf.checkpoint_folder(store, step=6, dir=tmp_path) as folder:
        assert sorted(os.listdir(folder)) == ["model.safetensors", "optimizer.pt",
                                              "rng_state.pth", "scheduler.pt",
                                              "trainer_state.json"]
        resumed = run(store, [], resume=folder)
    assert not os.path.exists(folder)
    assert resumed.state.global_step == 8
    for k, v in weights(whole.model).items():
        assert torch.equal(weights(resumed.model)[k], v), k
    a, b = whole.optimizer.state_dict(), resumed.optimizer.state_dict()
    for i, s in a["state"].items():
        for k, v in s.items():
            assert torch.equal(b["state"][i][k], v), (i, k)
    assert whole.lr_scheduler.state_dict() == resumed.lr_scheduler.state_dict()
    with strata.open_read_only(store) as st:
        assert st.steps() == [3, 6, 8]
        # the resumed run continues the run it resumed (one run id)
        assert len({st.metadata(s)["strata.run_id"] for s in st.steps()}) == 1


def test_without_folders_refuses_what_needs_them(tmp_path):
    store = str(tmp_path / "hf.strata")
    t = make_trainer(tmp_path, tiny_model(), [StrataCallback(store, trainer_folders=False),
                                               transformers.EarlyStoppingCallback()], 4, 2)
    with pytest.raises(ValueError, match="EarlyStoppingCallback"):
        t.train()
    t = make_trainer(tmp_path, tiny_model(), [StrataCallback(store, trainer_folders=False)], 4,
                     2, save_strategy="best", metric_for_best_model="loss",
                     eval_strategy="steps", eval_steps=2)
    with pytest.raises(ValueError, match="save_strategy='best'"):
        t.train()


def test_fresh_optimizer_takes_the_saved_parameter_groups(tmp_path):
    """Issue 29 item 3: load_into_model(optimizer=AdamW(model.parameters())), one group, from
    a Trainer's checkpoint (decay / no-decay groups)."""
    store = str(tmp_path / "hf.strata")
    torch.manual_seed(0)
    t = make_trainer(tmp_path, tiny_model(), [StrataCallback(store)], 4, 4, weight_decay=0.1)
    t.train()
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=5.0)
    assert load_into_model(model, store, optimizer=opt) == 4
    want = t.optimizer.state_dict()
    got = opt.state_dict()
    assert len(got["param_groups"]) == len(want["param_groups"]) == 2
    for g, w in zip(got["param_groups"], want["param_groups"]):
        assert {k: v for k, v in g.items() if k != "params"} == \
            {k: v for k, v in w.items() if k != "params"}
    names = {id(p): n for n, p in model.named_parameters()}
    trained = {id(p): n for n, p in t.model.named_parameters()}
    for g_new, g_old in zip(opt.param_groups, t.optimizer.param_groups):
        assert [names[id(p)] for p in g_new["params"]] == [trained[id(p)] for p in g_old["params"]]
    for i, s in want["state"].items():
        for k, v in s.items():
            assert torch.equal(got["state"][i][k], v), (i, k)
    # A scheduler built before the regrouping is refused with what to do.
    m2 = tiny_model()
    opt2 = torch.optim.AdamW(m2.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt2, lambda s: 1.0)
    with pytest.raises(strata.InvalidInput, match="build the scheduler"):
        load_into_model(m2, store, optimizer=opt2, lr_scheduler=sched)

import dataclasses

import pytest
import torch

from harness.model import (SIZES, KVCache, ModelConfig, Transformer, file_sha256, load_checkpoint,
                           save_checkpoint)
from harness.training import make_optimizer, train_steps


def tiny64(seed=0, **overrides):
    cfg = dataclasses.replace(SIZES["tiny"], **overrides)
    return Transformer(cfg, seed=seed).double()


def random_ids(B, T, seed=0):
    return torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(seed))


def test_sizes():
    assert Transformer(SIZES["tiny"]).num_params() < 150_000
    assert 200_000 <= Transformer(SIZES["smoke"]).num_params() <= 800_000
    polygon = Transformer(SIZES["polygon"]).num_params()
    assert abs(polygon - 9.2e6) / 9.2e6 <= 0.05, polygon


def test_no_biases_and_shapes():
    m = Transformer(SIZES["tiny"])
    assert not [n for n, _ in m.named_parameters() if n.endswith("bias")]
    assert m(random_ids(3, 17)).shape == (3, 17, 256)


def test_init_is_seeded():
    a, b, c = Transformer(SIZES["tiny"], seed=1), Transformer(SIZES["tiny"], seed=1), Transformer(SIZES["tiny"], seed=2)
    torch.manual_seed(123)  # global RNG state must not matter
    for (n, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), n
        if pa.ndim >= 2:
            assert not torch.equal(pa, pc), n


def test_causal():
    m = tiny64()
    x = random_ids(2, 20)
    y = x.clone()
    y[:, 12:] = (y[:, 12:] + 1) % 256
    lx, ly = m(x), m(y)
    assert torch.allclose(lx[:, :12], ly[:, :12], atol=1e-12)
    assert not torch.allclose(lx[:, 12:], ly[:, 12:])


def test_kv_cache_matches_full_forward():
    m = tiny64()
    x = random_ids(3, 30)
    full = m(x)
    cache = KVCache.empty(m.cfg, batch=3, size=30, dtype=torch.float64)
    parts = [m(x[:, :11], cache=cache)] + [m(x[:, t:t + 1], cache=cache) for t in range(11, 30)]
    assert cache.length == 30
    assert torch.allclose(torch.cat(parts, dim=1), full, atol=1e-10)


def test_left_padding_with_positions_matches_unpadded():
    m = tiny64()
    x = random_ids(1, 9)
    pad = 5
    ids = torch.cat([torch.zeros(1, pad, dtype=torch.long), x], dim=1)
    valid = torch.arange(pad + 9)[None] >= pad
    pos = (torch.cumsum(valid.long(), 1) - 1).clamp(min=0)
    padded = m(ids, pos=pos, valid=valid)
    assert torch.isfinite(padded).all()  # padding rows must not produce NaNs
    assert torch.allclose(padded[:, pad:], m(x), atol=1e-10)


def test_too_long_input_is_refused():
    m = Transformer(dataclasses.replace(SIZES["tiny"], max_seq=16))
    with pytest.raises(ValueError, match="max_seq=16"):
        m(random_ids(1, 17))
    with pytest.raises(ValueError, match="exceeds the model's max_seq"):
        KVCache.empty(m.cfg, batch=1, size=17)


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="n_head"):
        ModelConfig(d_model=64, n_head=5)
    with pytest.raises(ValueError, match="n_layer"):
        ModelConfig(n_layer=0)


def test_checkpoint_is_deterministic_and_round_trips(tmp_path):
    model = Transformer(SIZES["tiny"], seed=3)
    opt = make_optimizer(model, 1e-3, 0.1)
    train_steps(model, opt, [("def f(x):\n", "    return x\n")], n_steps=2, batch_size=1, seed=0)
    extra = {"step": 2, "optimizer": opt.state_dict()}
    h1 = save_checkpoint(tmp_path / "a.pt", model, extra)
    h2 = save_checkpoint(tmp_path / "b.pt", model, extra)
    assert h1 == h2 == file_sha256(tmp_path / "a.pt")
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()

    loaded, loaded_extra = load_checkpoint(tmp_path / "a.pt", expected=SIZES["tiny"])
    assert loaded_extra["step"] == 2
    for (n, p), q in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(p, q), n
    # the same weights written again give the same file (sha256 identifies the weights)
    assert save_checkpoint(tmp_path / "c.pt", loaded, loaded_extra) == h1
    # the optimizer state restores into a fresh optimizer
    make_optimizer(loaded, 1e-3, 0.1).load_state_dict(loaded_extra["optimizer"])

    # other weights -> other file
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 1.0
    assert save_checkpoint(tmp_path / "d.pt", model, extra) != h1


def test_checkpoint_keeps_dtype(tmp_path):
    save_checkpoint(tmp_path / "m.pt", tiny64())
    model, _ = load_checkpoint(tmp_path / "m.pt")
    assert next(model.parameters()).dtype == torch.float64


def test_checkpoint_refuses_other_config(tmp_path):
    save_checkpoint(tmp_path / "m.pt", Transformer(SIZES["tiny"]), {})
    with pytest.raises(ValueError, match=r"m\.pt: model config does not match.*d_model"):
        load_checkpoint(tmp_path / "m.pt", expected=SIZES["smoke"])


def test_checkpoint_refuses_garbage(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="junk.pt: not a model checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")
    torch.save({"config": dataclasses.asdict(SIZES["tiny"]), "state_dict": Transformer(SIZES["smoke"]).state_dict()},
               tmp_path / "mismatch.pt")
    with pytest.raises(ValueError, match="mismatch.pt: weights do not fit"):
        load_checkpoint(tmp_path / "mismatch.pt")

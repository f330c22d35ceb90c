import dataclasses

import pytest
import torch

from harness.learning.checkpoint import checkpoint_bytes, load_model_tensors, model_tensors, read_checkpoint
from harness.learning.model import SIZES, KVCache, ModelConfig, Transformer
from harness.learning.training import make_optimizer, train_steps


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


def _round_payload(model, opt) -> tuple[dict, dict]:
    """Tensors and meta as a round's checkpoint holds them: weights, optimizer tensors, the rest."""
    tensors = model_tensors(model)
    scalars = {}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"optim/{i}/{k}"] = v.detach().cpu().clone()
            else:
                scalars[f"{i}/{k}"] = v
    return tensors, {"optim_scalars": scalars, "step": 2, "note": "x"}


def test_checkpoint_bytes_depend_only_on_the_values_and_round_trip(tmp_path):
    model = Transformer(SIZES["tiny"], seed=3)
    opt = make_optimizer(model, 1e-3, 0.1)
    train_steps(model, opt, [("def f(x):\n", "    return x\n")], n_steps=2, batch_size=1, seed=0)
    tensors, meta = _round_payload(model, opt)
    data = checkpoint_bytes(tensors, meta)
    assert checkpoint_bytes(*_round_payload(model, opt)) == data          # the same values, the same bytes
    (tmp_path / "a.pt").write_bytes(data)
    read_tensors, read_meta = read_checkpoint(tmp_path / "a.pt")
    assert read_meta == meta and list(read_tensors) == list(tensors)
    assert all(torch.equal(read_tensors[k], tensors[k]) for k in tensors)
    assert checkpoint_bytes(read_tensors, read_meta) == data              # written again after a resume: same file
    fresh = load_model_tensors(Transformer(SIZES["tiny"], seed=99), read_tensors)
    for (n, p), q in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(p, q), n
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 1.0
    assert checkpoint_bytes(model_tensors(model), meta) != checkpoint_bytes(tensors, meta)
    assert checkpoint_bytes(tensors, {**meta, "step": 3}) != data


def test_checkpoint_refuses_garbage_and_weights_of_another_size(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="junk.pt: not a checkpoint of the harness"):
        read_checkpoint(tmp_path / "junk.pt")
    torch.save({"model": Transformer(SIZES["tiny"]).state_dict(), "size": "tiny"}, tmp_path / "old.pt")
    with pytest.raises(ValueError, match="old.pt: not a checkpoint of the harness .*KeyError"):
        read_checkpoint(tmp_path / "old.pt")
    with pytest.raises(ValueError, match="checkpoint weights do not fit a model of"):
        load_model_tensors(Transformer(SIZES["tiny"]), model_tensors(Transformer(SIZES["smoke"])))

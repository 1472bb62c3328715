"""Plan keys (tkreg.ops.keys): built alike by every path, and the same after a round trip through
plain data, as a later process reads them."""

from __future__ import annotations

import json

import pytest

from tkreg.ops import keys

torch = pytest.importorskip("torch")


def tensors() -> list[object]:
    a = torch.randn(3, 5)
    return [a, a.t(), torch.zeros(2, dtype=torch.int64), torch.randn(6)[1:].view(5, 1).expand(5, 4)]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
def test_generated_and_looped_keys_agree(count: int) -> None:
    inputs = (tensors() * 2)[:count]
    key = keys.tensors_key(inputs)
    assert key is not None and len(key) == keys.PER_TENSOR * count
    assert key == keys._looped(inputs)
    for i, t in enumerate(inputs):
        dtype, shape, stride, device, align = key[i * keys.PER_TENSOR : (i + 1) * keys.PER_TENSOR]
        assert (dtype, tuple(shape), stride, device, align) == (t.dtype, tuple(t.shape), t.stride(), t.device,
                                                                t.data_ptr() % 128)  # fmt: skip


def test_keys_differ_in_anything_a_decision_may_read() -> None:
    a = torch.randn(4, 4)
    base = keys.tensors_key([a])
    for other in (a.double(), a.t(), a.reshape(2, 8), torch.randn(5, 4)[1:]):
        assert keys.tensors_key([other]) != base
    assert keys.plan_key([a], (1e-5,)) != keys.plan_key([a], (1e-6,)) != base
    assert keys.tensors_key([a, "not a tensor"]) is None


def test_a_key_survives_plain_data_with_its_hash() -> None:
    inputs = tensors()
    for has_params, key in ((False, keys.plan_key(inputs, ())), (True, keys.plan_key(inputs, (1e-6, True, 3, "mean")))):
        assert key is not None
        data = json.loads(json.dumps(keys.to_json(key, has_params)))
        again = keys.from_json(data, has_params)
        assert again == key and hash(again) == hash(key)
        assert [s[:4] for s in keys.tensor_specs(again, has_params)] == [(t.dtype, t.shape, t.stride(), t.device)
                                                                         for t in inputs]  # fmt: skip
    with pytest.raises(ValueError, match="not a remembered signature"):
        keys.from_json({"tensors": [{"dtype": "no_such_dtype"}]}, False)
    with pytest.raises(ValueError, match="not a torch dtype"):
        keys.from_json({"tensors": [{"dtype": "add", "shape": [], "stride": [], "device": "cpu", "index": None,
                                     "align": 0}], "params": []}, False)  # fmt: skip

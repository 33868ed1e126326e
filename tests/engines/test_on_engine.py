"""engines.on_engine: a model that is not shipped (random weights of the target's shape) on each
engine gives the readable model's logits through a cached call, and says which engine it is."""
import pytest
import torch

from lessonlib import models
from lessonlib.engines import engine_of, on_engine, unavailable
from lessonlib.models.gpt import GPTConfig

CONFIG = GPTConfig(vocab_size=64, block_size=64, n_layer=2, n_head=2, n_embd=32)


def _random(seed: int) -> models.GPT:
    torch.manual_seed(seed)
    return models.GPT(CONFIG).eval()


@pytest.mark.parametrize("engine", ["readable", "packed", "fast", "native"])
def test_each_engine_gives_the_readable_models_logits_with_a_cache(engine):
    if unavailable(engine) is not None:
        pytest.skip(unavailable(engine))
    reference, model = _random(3), on_engine(_random(3), engine)
    assert engine_of(model) == engine == model.engine
    tokens = torch.randint(64, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        expected = reference(tokens)
        cache = model.new_cache()
        got = torch.cat([model(tokens[:, :9], cache=cache), model(tokens[:, 9:], cache=cache)], dim=1)
    assert torch.allclose(got, expected, atol=1e-4), float((got - expected).abs().max())
    # negative control: another model's weights do not pass the same comparison
    with torch.inference_mode():
        other = on_engine(_random(4), engine)(tokens)
    assert not torch.allclose(other, expected, atol=1e-4)


def test_auto_is_what_load_picks_and_bad_input_is_refused_by_name():
    assert on_engine(_random(0)).engine == ("native" if unavailable("native") is None else "fast")
    with pytest.raises(ValueError, match="model must be a models.GPT"):
        on_engine(torch.nn.Linear(2, 2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="engine must be one of"):
        on_engine(_random(0), "turbo")

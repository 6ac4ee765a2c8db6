"""Every field of every settings class is checked for type and range before a stage reads it (issue 30 item 5)."""

from dataclasses import fields

import pytest

from layerwise_nmt.inference.decode import BeamConfig
from layerwise_nmt.models import MODELS
from layerwise_nmt.scoring.score import ScoreConfig
from layerwise_nmt import UserError
from layerwise_nmt.settings import SettingError
from layerwise_nmt.training.loop import TrainConfig

CLASSES = sorted(
    {TrainConfig, BeamConfig, ScoreConfig, *(m.config_class for m in MODELS.values())}, key=lambda c: c.__name__
)


@pytest.mark.parametrize("settings", CLASSES, ids=lambda c: c.__name__)
def test_every_field_refuses_a_value_of_the_wrong_type(settings):
    for f in fields(settings):
        with pytest.raises(SettingError, match=rf"^{f.name}=\{{'x': 1\}}; expected "):
            settings.from_dict({f.name: {"x": 1}})


@pytest.mark.parametrize(
    "settings, values, expected",
    [
        (BeamConfig, {"beam": 0}, "beam=0; expected an integer ≥ 1"),
        (BeamConfig, {"beam": True}, "beam=True; expected an integer ≥ 1"),  # YAML's `yes`: not a beam size
        (BeamConfig, {"tune_lenpen": [0.6, -1]}, "tune_lenpen=[0.6, -1]; expected a list of numbers ≥ 0"),
        (TrainConfig, {"lr": 0}, "lr=0; expected a number > 0"),
        (  # PyYAML's YAML 1.1 reads `lr: 5e-4` as a string
            TrainConfig,
            {"lr": "5e-4"},
            "lr='5e-4'; expected a number > 0 (YAML reads 5e-4 as text: write 5.0e-4 or 0.0005)",
        ),
        (
            TrainConfig,
            {"clip_norm": "1e1"},
            "clip_norm='1e1'; expected a number ≥ 0 (YAML reads 1e1 as text: write 1.0e+1 or 10.0)",
        ),
        (
            TrainConfig,
            {"clip_norm": "1.0e1"},
            "clip_norm='1.0e1'; expected a number ≥ 0 (YAML reads 1.0e1 as text: write 1.0e+1 or 10.0)",
        ),
        (TrainConfig, {"max_tokens": "4e3"}, "max_tokens='4e3'; expected an integer ≥ 1 or null"),
        (TrainConfig, {"adam_betas": [0.9]}, "adam_betas=[0.9]; expected a list of 2 numbers ≥ 0 and < 1"),
        (TrainConfig, {"max_tokens": 4096.5}, "max_tokens=4096.5; expected an integer ≥ 1 or null"),
        (ScoreConfig, {"lowercase": "yes"}, "lowercase='yes'; expected true or false"),
        (
            MODELS["transformer"].config_class,
            {"attention_dropout": 1.0},
            "attention_dropout=1.0; expected a number ≥ 0 and < 1",
        ),
    ],
)
def test_ranges_and_types_are_named_in_one_line(settings, values, expected):
    with pytest.raises(SettingError) as err:
        settings.from_dict(values)
    assert str(err.value) == expected


def test_good_values_pass_as_given():
    assert TrainConfig.from_dict({"max_tokens": None, "lr": 1, "adam_betas": [0.9, 0.98], "max_update": 5}).lr == 1
    assert BeamConfig.from_dict({"beam": 1, "tune_lenpen": [0, 1.5]}).tune_lenpen == (0.0, 1.5)


@pytest.mark.parametrize(
    "settings, noun",
    [
        (TrainConfig, "training setting"),
        (BeamConfig, "decoding setting"),
        (ScoreConfig, "scoring setting"),
        (MODELS["transformer"].config_class, "model setting"),
    ],
)
def test_an_unknown_key_is_named_with_what_kind_of_setting_it_is_not(settings, noun):
    with pytest.raises(UserError, match=rf"unknown {noun}\(s\) tokenise"):
        settings.from_dict({"tokenise": "13a"})

"""What every claim kind meets, read from the registry (`CLAIM_KINDS`, filled by the modules of
pipeline/verdicts/kinds/ with `@register_claim_kind`): a kind added as a module is held to it with no edit here.
Each kind's own verdicts are tested on synthetic rows in tests/test_claims.py."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest
import yaml

import pipeline.verdicts.kinds as kinds_package
from pipeline.errors import PipelineError
from pipeline.plugins import plugin_modules
from pipeline.verdicts.claim import CLAIM_KINDS, ClaimSpec, SubjectSpec, register_claim_kind
from pipeline.verdicts.claims_file import Claim, parse_claims, registered_kinds

from conftest import REPO_ROOT
from test_claims import TABLES, claims_file, order_claim

KINDS = registered_kinds()
# what judging (`ClaimSpec.judge`) and the report (pipeline/writeup/) call on every claim, with its arguments
HOOKS = {"judge_here": ["self", "judging"], "ours_text": ["self", "result"], "paper_text": ["self", "result", "default_reason"],
         "evidence_text": ["self", "result"], "verdict_text": ["self", "result"], "cross_check": ["self", "tables", "params"],
         "claim_backbone": ["self", "tables"], "subjects": ["self"], "at_edge": ["self", "result"]}


def test_the_kinds_claims_yaml_uses_are_registered():
    used = {claim["kind"] for claim in yaml.safe_load((REPO_ROOT / "claims.yaml").read_text(encoding="utf-8"))["claims"]}
    assert used <= set(KINDS)


@pytest.mark.parametrize("name", KINDS)
def test_a_kind_is_a_claim_spec_declaring_its_registered_name(name):
    kind_class = CLAIM_KINDS[name]
    assert issubclass(kind_class, ClaimSpec)
    annotation = kind_class.model_fields["kind"].annotation
    assert get_origin(annotation) is Literal and get_args(annotation) == (name,)
    assert kind_class.model_fields["kind"].is_required()  # the discriminator: a claim says its kind
    assert kind_class.__module__.startswith(f"{kinds_package.__name__}.")  # declared in the plugin package


@pytest.mark.parametrize("name", KINDS)
def test_a_kind_implements_what_judging_and_the_report_call(name):
    kind_class = CLAIM_KINDS[name]
    assert not inspect.isabstract(kind_class), sorted(kind_class.__abstractmethods__)
    for hook, parameters in HOOKS.items():
        assert list(inspect.signature(getattr(kind_class, hook)).parameters) == parameters, hook


def test_each_module_of_the_kinds_package_declares_a_kind():
    folder = Path(kinds_package.__file__).parent
    declaring = {kind_class.__module__ for kind_class in CLAIM_KINDS.values()}
    assert [module for module in plugin_modules(folder, kinds_package.__name__) if module not in declaring] == []


def test_the_union_holds_every_kind_in_name_order():
    (union, _discriminator) = get_args(Claim)
    assert tuple(CLAIM_KINDS[name] for name in KINDS) == get_args(union)
    assert list(KINDS) == sorted(KINDS)


def test_an_unknown_kind_is_one_line_naming_the_registered_kinds(tiny_params_dict):
    with pytest.raises(PipelineError) as caught:
        parse_claims(claims_file(order_claim(kind="ranking")), TABLES, tiny_params_dict)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("invalid claims.yaml: claims.0: Input tag 'ranking' found using 'kind'")
    assert message.endswith("(claim tncse-beats-untrained)")
    assert all(f"'{name}'" in message for name in KINDS), message


def test_a_kind_name_declared_twice_is_an_error():
    name = KINDS[0]
    with pytest.raises(TypeError, match=f"claim kind '{name}' is declared twice"):
        @register_claim_kind
        class Again(CLAIM_KINDS[name]):  # inherits the registered kind's `kind` Literal
            pass
    assert CLAIM_KINDS[name].__name__ != "Again"


def test_only_a_whole_claim_kind_registers():
    class Unjudged(ClaimSpec):
        kind: Literal["unjudged"]

    for not_a_kind in (SubjectSpec, ClaimSpec, Unjudged):
        with pytest.raises(TypeError):
            register_claim_kind(not_a_kind)
    assert "unjudged" not in CLAIM_KINDS

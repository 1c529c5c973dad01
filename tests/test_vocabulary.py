"""The shared vocabulary is well formed: every name has its actor, level and core method."""

import re

import pytest

from loaderspec.vocabulary import (
    CORE_METHOD,
    PROPERTIES,
    PROPERTY_NAMES,
    Action,
    Actor,
    Kind,
    Level,
    property_named,
)


def test_action_names_are_actor_verb():
    for action in Action:
        assert re.fullmatch(r"(Main|Worker|Pin|Fault)[A-Z][A-Za-z]+", action.value), action
        assert action.value.startswith(action.actor.value)


def test_every_main_action_has_a_core_method_and_nothing_else_does():
    main_actions = {a for a in Action if a.actor is Actor.MAIN}
    assert set(CORE_METHOD) == main_actions
    assert all(re.fullmatch(r"[a-z_]+", name) for name in CORE_METHOD.values())
    assert len(set(CORE_METHOD.values())) == len(CORE_METHOD)


def test_property_names_are_unique_claims():
    assert len(PROPERTY_NAMES) == len(PROPERTIES)
    for prop in PROPERTIES:
        assert re.fullmatch(r"[A-Z][A-Za-z]+", prop.name)
        assert prop.claim.endswith(")") or prop.claim.endswith(".")


def test_levels_grade_torch_weaker_behaviour_as_should():
    should = {p.name for p in PROPERTIES if p.level is Level.SHOULD}
    assert should == {"FailStopAfterWorkerDeath", "PromptFaultHandling"}
    assert property_named("PromptFaultHandling").kind is Kind.MEASURED


def test_unknown_property_error_names_it_and_the_known_ones():
    with pytest.raises(KeyError, match=r"'InOrder'.*InOrderDelivery"):
        property_named("InOrder")

"""`LimitsRequest`: a face's per-run limits apply only when they tighten the policy's."""

from __future__ import annotations

import pytest

from sbx.agent.core.config import load_config
from sbx.agent.core.limits_request import LimitRefused, LimitsRequest, LimitTooLow
from sbx.agent.core.settings import SettingsError
from sbx.sandbox.limits import Limits

POLICY = Limits(memory="512m", cpus="1", pids=256, timeout="30s")


def test_a_request_below_every_ceiling_applies_and_keeps_the_rest() -> None:
    request = LimitsRequest.parse({"memory": "256m", "cpus": "0.5", "pids": 64, "timeout": "10s",
                                   "network": "none", "runtime": "runsc", "nothing": None})
    limits = request.within(POLICY)

    assert (limits.memory, limits.cpus, limits.pids, limits.timeout) == (256 * 1024**2, 0.5, 64,
                                                                          10.0)
    assert (limits.network, limits.runtime) == ("none", "runsc")
    assert limits.tmp_size == POLICY.tmp_size and limits.seccomp == POLICY.seccomp
    assert LimitsRequest().within(POLICY) == POLICY
    assert LimitsRequest(memory="512m").within(POLICY) == POLICY  # equal is within


@pytest.mark.parametrize(("values", "knob", "reason"), [
    ({"memory": "513m"}, "memory", "at most 512 MiB (the policy's [sandbox] memory)"),
    ({"cpus": "1.5"}, "cpus", "at most 1 (the policy's [sandbox] cpus)"),
    ({"pids": 257}, "pids", "at most 256 (the policy's [sandbox] pids)"),
    ({"timeout": "31s"}, "timeout", "at most 30s (the policy's [sandbox] timeout)"),
    ({"network": "bridge"}, "network",
     "'bridge' is more open than the policy's [sandbox] network = 'none'"),
    ({"runtime": "kata"}, "runtime",
     "'kata' is not allowed: only 'runc' or 'runsc' (the policy's [sandbox] runtime)"),
])
def test_above_the_ceiling_is_refused_naming_the_knob_and_the_ceiling(values, knob, reason):
    with pytest.raises(LimitRefused) as refused:
        LimitsRequest.parse(values).within(POLICY)
    assert (refused.value.knob, refused.value.reason) == (knob, reason)
    assert refused.value.describe("--") == f"--{knob}: {reason}"
    assert refused.value.describe("limits.") == f"limits.{knob}: {reason}"
    assert isinstance(refused.value, SettingsError)


def test_below_what_a_sandbox_starts_in_is_refused_naming_the_minimum() -> None:
    with pytest.raises(LimitTooLow) as low:
        LimitsRequest.parse({"memory": "6m"}).within(POLICY)
    assert low.value.describe("limits.") == (
        "limits.memory: at least 24 MiB (the least a sandbox starts in)")
    with pytest.raises(LimitTooLow, match="at least 48 MiB .* under runsc"):
        LimitsRequest.parse({"memory": "32m", "runtime": "runsc"}).within(POLICY)
    assert LimitsRequest.parse({"memory": "24m"}).within(POLICY).memory == 24 * 1024**2


def test_network_and_runtime_follow_the_policy_they_tighten() -> None:
    bridged = Limits(network="bridge", runtime="runsc")
    assert LimitsRequest(network="bridge").within(bridged).network == "bridge"
    assert LimitsRequest(network="none").within(bridged).network == "none"
    assert LimitsRequest(runtime="runsc").within(bridged).runtime == "runsc"
    with pytest.raises(LimitRefused, match="only 'runsc' \\("):  # gVisor is not given up
        LimitsRequest(runtime="runc").within(bridged)
    assert LimitsRequest(runtime="kata").within(Limits(runtime="kata")).runtime == "kata"


def test_a_bad_value_names_the_field_as_the_face_spells_it() -> None:
    with pytest.raises(SettingsError, match="^invalid value for --memory: "):
        LimitsRequest.parse({"memory": "lots"}, prefix="--")
    with pytest.raises(SettingsError, match="^invalid value for --pids: "):
        LimitsRequest.parse({"pids": 8}, prefix="--")
    with pytest.raises(SettingsError, match="^invalid value for --timeout: .* 1d"):
        LimitsRequest.parse({"timeout": "2d"}, prefix="--")
    with pytest.raises(SettingsError, match="unknown key"):
        LimitsRequest.parse({"stdout_bytes": "1g"})


def test_over_applies_without_a_ceiling_for_the_operators_probes() -> None:
    probed = LimitsRequest(memory="2g", network="bridge", runtime="kata").over(POLICY)
    assert (probed.memory, probed.network, probed.runtime) == (2 * 1024**3, "bridge", "kata")


def test_the_app_config_applies_a_request_only_below_its_sandbox_table(tmp_path) -> None:
    path = tmp_path / "sbx.toml"
    path.write_text('[sandbox]\nmemory = "1g"\nnetwork = "bridge"\n')
    config = load_config(path)

    assert config.limited(LimitsRequest()) is config
    tightened = config.limited(LimitsRequest(memory="768m", network="none"))
    assert (tightened.limits.memory, tightened.limits.network) == (768 * 1024**2, "none")
    assert tightened.policy is config.policy and tightened.digest() != config.digest()
    with pytest.raises(LimitRefused, match="at most 1 GiB"):
        config.limited(LimitsRequest(memory="2g"))

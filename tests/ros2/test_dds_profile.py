"""tinker.dds_profile: which Fast DDS set-up a node process gets from its environment (no rclpy here; the
graph tests run the nodes with it, tests/ros2/test_attacks.py checks that joins no longer stall the loop)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tinker.dds_profile import PROFILE_ENV, RANGE_ENV, REPLY_WAIT_S, loop_profile_file, use_loop_profile

NS = "{http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles}"


@pytest.mark.parametrize("discovery", ["", "SUBNET", "SYSTEM_DEFAULT", "OFF"])
def test_a_non_localhost_domain_gets_the_udp_only_profile_and_keeps_its_discovery(discovery):
    env = {RANGE_ENV: discovery} if discovery else {}
    msg = use_loop_profile(env)
    assert env[PROFILE_ENV] == str(loop_profile_file(False)) and "UDPv4 only" in msg
    assert env.get(RANGE_ENV, "") == discovery


def test_localhost_runs_as_system_default_with_the_localhost_profile():
    env = {RANGE_ENV: "LOCALHOST"}
    msg = use_loop_profile(env)
    assert env == {RANGE_ENV: "SYSTEM_DEFAULT", PROFILE_ENV: str(loop_profile_file(True))}, env
    assert "LOCALHOST discovery on UDPv4 only" in msg


@pytest.mark.parametrize("env", [
    {PROFILE_ENV: "/etc/mine.xml", RANGE_ENV: "LOCALHOST"},
    {"FASTRTPS_DEFAULT_PROFILES_FILE": "/etc/mine.xml"},
    {"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp", RANGE_ENV: "LOCALHOST"},
    {"ROS_LOCALHOST_ONLY": "1"},
    {RANGE_ENV: "LOCALHOST", "ROS_STATIC_PEERS": "192.168.1.7"},
])
def test_an_environment_that_configures_dds_itself_is_left_alone_and_the_log_says_so(env):
    before = dict(env)
    msg = use_loop_profile(env)
    assert env == before
    assert "stall" in msg or "cyclonedds" in msg, msg


@pytest.mark.parametrize("localhost", [False, True])
def test_the_profiles_use_udp_only_and_bound_a_service_reply(localhost):
    root = ET.parse(loop_profile_file(localhost)).getroot()
    part = root.find(f".//{NS}participant[@is_default_profile='true']")
    assert part.find(f"{NS}rtps/{NS}useBuiltinTransports").text == "false"
    ids = {t.text for t in part.findall(f"{NS}rtps/{NS}userTransports/{NS}transport_id")}
    kinds = {d.find(f"{NS}transport_id").text: d.find(f"{NS}type").text
             for d in root.findall(f".//{NS}transport_descriptor")}
    assert ids and all(kinds[i] == "UDPv4" for i in ids), (ids, kinds)
    wait = root.find(f".//{NS}publisher[@profile_name='service']/{NS}qos/{NS}reliability/{NS}max_blocking_time")
    assert int(wait.find(f"{NS}sec").text) + int(wait.find(f"{NS}nanosec").text) * 1e-9 == pytest.approx(REPLY_WAIT_S)
    peers = part.findall(f".//{NS}initialPeersList/{NS}locator/{NS}udpv4/{NS}address")
    assert [p.text for p in peers] == (["127.0.0.1"] if localhost else [])

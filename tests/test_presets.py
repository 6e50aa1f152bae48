"""Interconnect presets: figures, resolution, overrides, errors, framing, and the
grid and ``sgdsim predict`` agreeing on a preset network."""

from __future__ import annotations

import json

import polars as pl
import pytest
import yaml
from click.testing import CliRunner
from test_point import CONFIG, WILDCARDS, _workload

from sgdsim.cli import main
from sgdsim.config import schema, with_defaults
from sgdsim.errors import ConfigError
from sgdsim.pipeline.grid import simulate_stage
from sgdsim.presets import (
    DEFAULT_LATENCY_S,
    PRESETS,
    interconnect_network,
    network,
    resolve_network,
)

#: Tensor bytes per byte of an Ethernet rate: 1500-byte MTU less 52 bytes of
#: TCP/IP headers, over the 1538 bytes a frame takes on the wire.
ETH = 1448 / 1538


def test_preset_figures_are_the_cited_ones():
    # rates per direction, bit/s, worked out by hand from the data sheets
    assert PRESETS["10gbe"].bandwidth_bps == 10e9
    assert PRESETS["25gbe"].bandwidth_bps == 25e9
    assert PRESETS["100gbe"].bandwidth_bps == 100e9
    assert PRESETS["ib_fdr"].bandwidth_bps == pytest.approx(54.5454545e9)  # 4 × 13.636
    assert PRESETS["ib_edr"].bandwidth_bps == pytest.approx(100e9)  # 4 × 25
    assert PRESETS["pcie3_x16"].bandwidth_bps / 8 == pytest.approx(15.7538e9, rel=1e-5)
    assert PRESETS["nvlink2"].bandwidth_bps / 8 == 25e9
    # α per ring step: MG-WFBP's P = 8 fits over 14 steps, NCCL 2.5's hop latencies
    assert PRESETS["10gbe"].latency_s == pytest.approx(37.359e-6, rel=1e-4)
    assert PRESETS["ib_fdr"].latency_s == pytest.approx(6.9669e-6, rel=1e-4)
    for name in ("25gbe", "100gbe", "ib_edr"):
        assert PRESETS[name].latency_s == 6.6e-6
    assert PRESETS["pcie3_x16"].latency_s == PRESETS["nvlink2"].latency_s == 5.7e-6
    assert {n for n, p in PRESETS.items() if p.ethernet_framing} == {"10gbe", "25gbe", "100gbe"}
    assert all(p.rate_source and p.latency_source for p in PRESETS.values())


def test_schema_offers_exactly_the_presets():
    props = schema()["properties"]
    net = props["networks"]["items"]["properties"]["preset"]["enum"]
    hw = props["hardware"]["items"]["properties"]["interconnect"]
    assert net == hw["enum"] == list(PRESETS)
    assert hw["default"] in PRESETS


def test_framing_applies_to_ethernet_only():
    eth = network({"name": "e", "preset": "25gbe"})
    assert eth.bandwidth_Bps == pytest.approx(25e9 * ETH / 8)
    assert eth.latency_s == 6.6e-6 and eth.name == "e"
    ib = network({"name": "i", "preset": "ib_edr"})
    assert ib.bandwidth_Bps == pytest.approx(100e9 / 8)
    plain = network({"name": "p", "bandwidth_bps": 1e9})  # no preset: a NIC data sheet
    assert plain.bandwidth_Bps == pytest.approx(1e9 * ETH / 8)
    assert plain.latency_s == DEFAULT_LATENCY_S
    nv = interconnect_network("nvlink2")
    assert (nv.bandwidth_Bps, nv.latency_s, nv.name) == (25e9, 5.7e-6, "nvlink2")


def test_explicit_fields_override_the_preset():
    r = resolve_network({"name": "x", "preset": "ib_fdr", "latency_s": 2e-5})
    assert r["latency_s"] == 2e-5 and r["bandwidth_bps"] == PRESETS["ib_fdr"].bandwidth_bps
    r = resolve_network({"name": "x", "preset": "10gbe", "bandwidth_bps": 4e9, "latency_s": None})
    assert r["bandwidth_bps"] == 4e9 and r["latency_s"] == PRESETS["10gbe"].latency_s
    # framing stays the preset's: 4 Gbit/s of Ethernet still loses its headers
    assert network({"name": "x", "preset": "10gbe", "bandwidth_bps": 4e9}).bandwidth_Bps == (
        pytest.approx(4e9 * ETH / 8)
    )
    # the schema's default (null) does not hide the preset's latency
    filled = with_defaults({**CONFIG, "networks": [{"name": "n", "preset": "nvlink2"}]})
    assert network(filled["networks"][0]).latency_s == 5.7e-6


def test_unknown_preset_is_one_line_naming_field_and_valid_names():
    with pytest.raises(ConfigError) as e:
        resolve_network({"name": "x", "preset": "ib_ndr"}, "my.yaml: networks[2]")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("my.yaml: networks[2].preset: 'ib_ndr'")
    assert all(name in msg for name in PRESETS)
    with pytest.raises(ConfigError, match=r"hardware\[\]\.interconnect: 'pcie5'.*nvlink2"):
        interconnect_network("pcie5")
    with pytest.raises(ConfigError, match=r"networks\[0\]\.preset: 'x' is not one of"):
        with_defaults({**CONFIG, "networks": [{"name": "n", "preset": "x"}]})
    with pytest.raises(ConfigError, match=r"hardware\[0\]\.interconnect: 'x' is not one of"):
        with_defaults({**CONFIG, "hardware": [{"name": "cpu", "interconnect": "x"}]})
    with pytest.raises(ConfigError, match=r"networks\[0\]: 'bandwidth_bps' is a required"):
        with_defaults({**CONFIG, "networks": [{"name": "n"}]})


def test_grid_and_cli_agree_on_a_preset_network(tmp_path):
    workload = _workload(tmp_path)
    config = {**CONFIG, "workers": [2], "networks": [{"name": "n", "preset": "10gbe"}]}
    out = tmp_path / "p.parquet"
    simulate_stage(config, workload, str(out), WILDCARDS)
    row = pl.read_parquet(out).row(0, named=True)
    assert row["bandwidth_bps"] == 10e9 and row["latency_s"] == PRESETS["10gbe"].latency_s
    # the same numbers spelled out give the same prediction
    explicit = {"name": "n", "bandwidth_bps": 10e9, "latency_s": PRESETS["10gbe"].latency_s}
    out2 = tmp_path / "q.parquet"
    simulate_stage({**config, "networks": [explicit]}, workload, str(out2), WILDCARDS)
    assert pl.read_parquet(out2)["steps_per_s"][0] == row["steps_per_s"]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(config))
    args = ["predict", "--workload", workload, "--configfile", str(cfg), "-p", "10gbe"]
    r = CliRunner().invoke(main, [*args, "-n", "2", "--json"])
    assert r.exit_code == 0, r.output
    cli = json.loads(r.output.strip().splitlines()[-1])
    assert cli["preset"] == "10gbe" and cli["steps_per_s"] == row["steps_per_s"]


def test_the_grid_gives_allreduce_the_hardwares_interconnect(tmp_path):
    workload = _workload(tmp_path)

    def allreduce(hardware: dict) -> float:
        config = {
            **CONFIG,
            "hardware": [{"name": "cpu", **hardware}],
            "workers": [2],
            "modes": ["allreduce"],
            "fusions": ["single"],
            "networks": [{"name": "n", "bandwidth_bps": 1e8}],
        }
        out = tmp_path / "a.parquet"
        simulate_stage(config, workload, str(out), WILDCARDS)
        return float(pl.read_parquet(out)["steps_per_s"][0])

    # two workers on one node reduce over its interconnect, not the 100 Mbit/s NIC
    nvlink = allreduce({"gpus_per_node": 2, "interconnect": "nvlink2"})
    ethernet = allreduce({"gpus_per_node": 2, "interconnect": "10gbe"})
    apart = allreduce({"gpus_per_node": 1, "interconnect": "nvlink2"})
    assert nvlink > ethernet > apart
    assert allreduce({"interconnect": "10gbe"}) == apart  # one per node: no interconnect

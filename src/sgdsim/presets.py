"""Interconnect presets: a link's rate and per-message latency (α), each from a cited source.

A ``networks[]`` entry may name a ``preset:`` instead of giving
``bandwidth_bps`` and ``latency_s`` (a field it gives overrides the preset's),
and ``hardware[].interconnect`` names the preset between the workers of one
node. :func:`resolve_network` and :func:`network` are the one place both are
turned into what the simulator sees; config/README.md tables the figures.

Rates are per direction, as the data sheet gives them. The simulator carries
tensor bytes, so an Ethernet preset (and a ``networks[]`` entry without a
preset) loses TCP/IP and Ethernet framing
(:data:`~sgdsim.simulation.bounds.ETHERNET_PAYLOAD_FRACTION`, as
:func:`sgdsim.simulation.point.grid_network` applies it); InfiniBand, PCIe and
NVLink rates are already of data (after line coding) and are taken as they are.

α is the cost of one message, read as one step of a ring all-reduce (the
all-reduce of ``P`` ranks pays ``2(P−1)`` of them). Sources:

- MG-WFBP release (Shi, Chu, Li, INFOCOM 2019; github.com/HKBU-HPML/MG-WFBP,
  ``distributed_optimizer.py``, ``_generate_groups_mgwfbp``): measured fits
  ``T(bytes) = a + b · bytes`` of a whole all-reduce on 10GbE and 56 Gbit/s
  InfiniBand; at P = 8, ``a / (2(P−1))`` is α per ring step.
- NCCL 2.5 tuning model (github.com/NVIDIA/nccl, tag v2.5.6-1,
  ``src/graph/tuning.cc``, ``hwLat``, Ring algorithm, Simple protocol): per-hop
  latency of an NVLink, a PCI and a network (NET) hop, in µs. NCCL's model has
  one NET figure for every network transport (InfiniBand verbs, RoCE, sockets);
  later releases changed it (9.6 µs in v2.7–v2.9, 28 µs in v2.12, 14 µs
  from v2.18).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sgdsim.errors import ConfigError

#: Per-message latency (s) of a ``networks[]`` entry with neither ``preset`` nor ``latency_s``.
DEFAULT_LATENCY_S = 1e-4

#: Ring steps of the MG-WFBP fits used here: 2(P − 1) at P = 8.
_MGWFBP_STEPS_P8 = 2 * (8 - 1)


@dataclass(frozen=True)
class Preset:
    """One interconnect's figures.

    Attributes:
        name: the name a config gives (``preset:``, ``interconnect:``).
        label: human-readable name.
        bandwidth_bps: rate per direction, bit/s, as the data sheet gives it.
        latency_s: α, the fixed cost of one message (one ring step), s.
        ethernet_framing: the rate is an Ethernet link rate, of which the
            simulator carries :data:`~sgdsim.simulation.bounds.ETHERNET_PAYLOAD_FRACTION`.
        rate_source, latency_source: where the figures come from.
    """

    name: str
    label: str
    bandwidth_bps: float
    latency_s: float
    ethernet_framing: bool
    rate_source: str
    latency_source: str


_NCCL = "NCCL v2.5.6-1 src/graph/tuning.cc, hwLat, Ring/Simple"

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "10gbe",
            "10GbE",
            10e9,
            5.230272768511732e-4 / _MGWFBP_STEPS_P8,
            True,
            "IEEE 802.3ae: 10 Gbit/s MAC rate",
            "MG-WFBP release, 10GbE fit at P = 8: a = 5.2303e-4 s over 14 ring steps",
        ),
        Preset(
            "25gbe",
            "25GbE",
            25e9,
            6.6e-6,
            True,
            "IEEE 802.3by: 25 Gbit/s MAC rate",
            f"{_NCCL}, NET hop: 6.6 µs (one figure for every network transport)",
        ),
        Preset(
            "100gbe",
            "100GbE",
            100e9,
            6.6e-6,
            True,
            "IEEE 802.3ba: 100 Gbit/s MAC rate",
            f"{_NCCL}, NET hop: 6.6 µs (one figure for every network transport)",
        ),
        Preset(
            "ib_fdr",
            "InfiniBand FDR 4x",
            4 * 14.0625e9 * 64 / 66,
            9.75367204301171e-05 / _MGWFBP_STEPS_P8,
            False,
            "InfiniBand FDR: 4 lanes × 14.0625 Gbit/s, 64b/66b coding",
            "MG-WFBP release, 56 Gbit/s InfiniBand fit at P = 8: a = 9.7537e-5 s over 14 "
            "ring steps",
        ),
        Preset(
            "ib_edr",
            "InfiniBand EDR 4x",
            4 * 25.78125e9 * 64 / 66,
            6.6e-6,
            False,
            "InfiniBand EDR: 4 lanes × 25.78125 Gbit/s, 64b/66b coding",
            f"{_NCCL}, NET hop: 6.6 µs",
        ),
        Preset(
            "pcie3_x16",
            "PCIe 3.0 x16",
            8e9 * 16 * 128 / 130,
            5.7e-6,
            False,
            "PCIe 3.0: 8 GT/s × 16 lanes, 128b/130b coding (15.75 GB/s)",
            f"{_NCCL}, PCI hop: 5.7 µs",
        ),
        Preset(
            "nvlink2",
            "NVLink 2.0 (one link)",
            25e9 * 8,
            5.7e-6,
            False,
            "NVIDIA Tesla V100 whitepaper: 25 GB/s per direction per link",
            f"{_NCCL}, NVLINK hop: 5.7 µs",
        ),
    )
}


def preset(name: str, where: str = "preset") -> Preset:
    """The preset called ``name``.

    Args:
        where: the file and field that named it, for the error.

    Raises:
        ConfigError: no such preset (one line with the valid names).
    """
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"{where}: {name!r} is not an interconnect preset; use one of "
            f"{', '.join(PRESETS)} (see config/README.md)"
        ) from None


def resolve_network(entry: dict[str, Any], where: str = "networks[]") -> dict[str, Any]:
    """A ``networks[]`` entry with its preset filled in.

    Args:
        entry: ``name`` and either ``preset`` or ``bandwidth_bps`` (bit/s), with
            optional ``latency_s`` (s); a field given overrides the preset's.
        where: the file and field of the entry, for errors.

    Returns:
        A copy with ``bandwidth_bps``, ``latency_s`` (the preset's, or
        :data:`DEFAULT_LATENCY_S` without a preset), ``preset`` (None without)
        and ``ethernet_framing`` (the preset's; True without a preset, as a
        data-sheet NIC rate is an Ethernet one).

    Raises:
        ConfigError: an unknown preset, or neither a preset nor ``bandwidth_bps``.
    """
    out = dict(entry)
    name = out.get("preset")
    if name is None:
        if out.get("bandwidth_bps") is None:
            raise ConfigError(
                f"{where}: gives neither bandwidth_bps nor preset; add one "
                f"(presets: {', '.join(PRESETS)})"
            )
        if out.get("latency_s") is None:
            out["latency_s"] = DEFAULT_LATENCY_S
        out.update(preset=None, ethernet_framing=True)
        return out
    p = preset(name, f"{where}.preset")
    if out.get("bandwidth_bps") is None:
        out["bandwidth_bps"] = p.bandwidth_bps
    if out.get("latency_s") is None:
        out["latency_s"] = p.latency_s
    out["ethernet_framing"] = p.ethernet_framing
    return out


def network(entry: dict[str, Any], where: str = "networks[]") -> Any:
    """The :class:`~sgdsim.simulation.workload.Network` the simulator sees for a
    ``networks[]`` entry (see :func:`resolve_network`): rate in bytes/s less
    Ethernet framing where it applies, α in seconds, named after the entry.

    Raises:
        ConfigError: as :func:`resolve_network`.
        ValueError: rate ≤ 0 or latency < 0.
    """
    from sgdsim.simulation.bounds import ETHERNET_PAYLOAD_FRACTION
    from sgdsim.simulation.workload import Network

    r = resolve_network(entry, where)
    fraction = ETHERNET_PAYLOAD_FRACTION if r["ethernet_framing"] else 1.0
    name = str(r.get("name") or r["preset"] or "net")
    return Network.from_bits(float(r["bandwidth_bps"]) * fraction, float(r["latency_s"]), name)


def interconnect_network(name: str, where: str = "hardware[].interconnect") -> Any:
    """The :class:`~sgdsim.simulation.workload.Network` of the interconnect preset
    ``name`` between the workers of one node (``hardware[].interconnect``), named
    after the preset.

    Raises:
        ConfigError: no such preset (one line naming ``where`` and the valid names).
    """
    preset(name, where)
    return network({"name": name, "preset": name}, where)

"""The configuration: its schema, its defaults, and checks JSON Schema cannot express.

The schema ships in the package (``sgdsim/schemas/config.schema.yaml``;
``workflow/schemas/config.schema.yaml`` links to it) and is the one place
defaults live: Snakemake's ``validate`` fills them in the pipeline, and
:func:`with_defaults` fills them the same way for the library and the CLI.
The schema checks types, ranges and names; :func:`check_config` checks the
relations between keys. Both run when Snakemake parses the workflow, before
any job starts.
"""

from __future__ import annotations

import copy
import functools
from collections import Counter
from collections.abc import Iterator
from importlib import resources
from typing import Any

import jsonschema
import yaml

from sgdsim.errors import ConfigError
from sgdsim.models import MIN_IMAGE_SIZE


@functools.cache
def schema() -> dict[str, Any]:
    """The configuration's JSON Schema (draft 2020-12) as a dict."""
    text = resources.files("sgdsim").joinpath("schemas/config.schema.yaml").read_text()
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def _fill_defaults(
    validator: Any, properties: dict[str, Any], instance: Any, sub: dict[str, Any]
) -> Iterator[Any]:
    # jsonschema's FAQ recipe, as Snakemake's validate(set_default=True) does it
    if isinstance(instance, dict):
        for name, prop in properties.items():
            if "default" in prop:
                instance.setdefault(name, copy.deepcopy(prop["default"]))
    yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](
        validator, properties, instance, sub
    )


_Filling = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"properties": _fill_defaults}
)


def with_defaults(config: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """A copy of ``config`` validated against :func:`schema`, every missing key
    that has a default set to it (nested objects and list entries too).

    Raises:
        ConfigError: the config does not match the schema (one line naming the key).
    """
    out = copy.deepcopy(config)
    error = jsonschema.exceptions.best_match(_Filling(schema()).iter_errors(out))
    if error is not None:
        where = "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path
        ).lstrip(".")
        raise ConfigError(f"{source}: {where or '(top level)'}: {error.message}")
    return out


def defaults() -> dict[str, Any]:
    """The schema's defaults of every key, filled in recursively: what an empty
    config means (its grid lists may be empty, so it is not checked)."""
    out: dict[str, Any] = {}
    for _ in _Filling(schema()).iter_errors(out):
        pass
    return out


def check_config(config: dict[str, Any], source: str = "config") -> None:
    """Raise :class:`ConfigError` naming the key and the fix for the first problem found."""
    for key in ("models", "hardware", "networks"):
        dup = [n for n, c in Counter(e["name"] for e in config.get(key, [])).items() if c > 1]
        if dup:
            raise ConfigError(f"{source}: {key}: duplicate name {dup[0]!r}; names must be unique")
    for i, m in enumerate(config.get("models", [])):
        size, least = m.get("image_size", 64), MIN_IMAGE_SIZE[m["name"]]
        if size < least:
            raise ConfigError(
                f"{source}: models[{i}] ({m['name']}): image_size {size} is below the model's "
                f"minimum {least}; set image_size: {least} or more"
            )
    workers = config.get("workers", [])
    if len(set(workers)) != len(workers):
        raise ConfigError(f"{source}: workers: {workers} lists a worker count twice")
    names = {k: {e["name"] for e in config.get(k, [])} for k in ("models", "hardware", "networks")}
    for i, t in enumerate(config.get("simulation", {}).get("chrome_traces", [])):
        for key, table in (("model", "models"), ("hardware", "hardware"), ("network", "networks")):
            if t[key] not in names[table]:
                raise ConfigError(
                    f"{source}: simulation.chrome_traces[{i}].{key}: {t[key]!r} is not the name "
                    f"of a {table} entry ({', '.join(sorted(names[table]))}); fix the name, or "
                    "set simulation.chrome_traces: [] (a --configfile is merged into "
                    "config/config.yaml, whose simulation.chrome_traces it inherits)"
                )
    _check_validation(config, source, names)
    cost = config.get("cost", {})
    for key, table in (("hardware", "hardware"), ("networks", "networks")):
        for name in cost.get(key, {}):
            if name not in names[table]:
                raise ConfigError(
                    f"{source}: cost.{key}: {name!r} is not the name of a {table} entry "
                    f"({', '.join(sorted(names[table]))}); fix the name or remove the price"
                )
    sim = config.get("simulation", {})
    steps, warm = sim.get("steps_per_worker", 30), sim.get("warmup_steps", 3)
    if warm >= steps:
        raise ConfigError(
            f"{source}: simulation.warmup_steps ({warm}) must be below "
            f"simulation.steps_per_worker ({steps}); lower warmup_steps or raise steps_per_worker"
        )


def _check_validation(config: dict[str, Any], source: str, names: dict[str, set[str]]) -> None:
    val = config.get("validation", {})
    if not val.get("points"):
        return
    hw = val.get("hardware", "cpu")
    if hw not in names["hardware"]:
        raise ConfigError(
            f"{source}: validation.hardware: {hw!r} is not the name of a hardware entry "
            f"({', '.join(sorted(names['hardware']))}); fix the name, or set "
            "validation.points: [] (a --configfile is merged into config/config.yaml, whose "
            "validation it inherits)"
        )
    if next(h for h in config["hardware"] if h["name"] == hw).get("ps_tasks", 1) != 1:
        raise ConfigError(
            f"{source}: validation.hardware: {hw!r} has ps_tasks > 1, but the testbed runs one "
            "PS; name a hardware entry with ps_tasks: 1"
        )
    nets = [n["name"] for n in val.get("networks", [])]
    if not nets:
        raise ConfigError(
            f"{source}: validation.networks is empty but validation.points is not; add an "
            "emulated network, e.g. {name: 50Mbps, bandwidth_bps: 5.0e+7}"
        )
    if len(set(nets)) != len(nets):
        raise ConfigError(f"{source}: validation.networks: a name is used twice ({nets})")
    for i, pt in enumerate(val["points"]):
        if pt["model"] not in names["models"]:
            raise ConfigError(
                f"{source}: validation.points[{i}].model: {pt['model']!r} is not the name of a "
                f"models entry ({', '.join(sorted(names['models']))}); add it to models"
            )
        for n in pt.get("networks", nets):
            if n not in nets:
                raise ConfigError(
                    f"{source}: validation.points[{i}].networks: {n!r} is not the name of a "
                    f"validation.networks entry ({', '.join(nets)})"
                )


def validation_points(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every measured point of ``config['validation']``, one dict each.

    Keys: hardware, model, network, policy, workers, duration_s. Duplicates (same
    hardware, model, network, policy and N) removed, the first kept.
    """
    val = config.get("validation", {})
    nets = [n["name"] for n in val.get("networks", [])]
    hw = val.get("hardware", "cpu")
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for pt in val.get("points", []):
        for net in pt.get("networks", nets):
            for policy in pt.get("policies", ["tf_default"]):
                for n in pt["workers"]:
                    key = (hw, pt["model"], net, policy, n)
                    out.setdefault(
                        key,
                        {
                            "hardware": hw,
                            "model": pt["model"],
                            "network": net,
                            "policy": policy,
                            "workers": n,
                            "duration_s": pt.get("duration_s", val.get("duration_s", 20)),
                        },
                    )
    return list(out.values())


def entry(config: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    """The entry of list ``config[key]`` (models, hardware, networks, …) called ``name``.

    Raises:
        ConfigError: no such entry.
    """
    for e in config[key]:
        if e["name"] == name:
            return dict(e)
    raise ConfigError(f"config: {key}: no entry named {name!r}")

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
import os
from collections import Counter
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sgdsim.errors import ConfigError
from sgdsim.models import UnknownModelError, check_model_name, min_image_size


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
    import jsonschema

    if isinstance(instance, dict):
        for name, prop in properties.items():
            if "default" in prop:
                instance.setdefault(name, copy.deepcopy(prop["default"]))
    yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](
        validator, properties, instance, sub
    )


@functools.cache
def _filling() -> Any:
    """The draft 2020-12 validator class that fills defaults (jsonschema is imported
    here: a simulate job, whose config Snakemake has filled, does without it)."""
    import jsonschema

    return jsonschema.validators.extend(
        jsonschema.Draft202012Validator, {"properties": _fill_defaults}
    )


def with_defaults(config: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """A copy of ``config`` validated against :func:`schema`, every missing key
    that has a default set to it (nested objects and list entries too).

    Raises:
        ConfigError: the config does not match the schema (one line naming the key).
    """
    import jsonschema

    out = copy.deepcopy(config)
    error = jsonschema.exceptions.best_match(_filling()(schema()).iter_errors(out))
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
    for _ in _filling()(schema()).iter_errors(out):
        pass
    return out


#: ``networks[].joins`` value by which the pipeline captures the joins itself.
JOINS_CAPTURE = "capture"
#: ``networks[]`` keys describing the switch port ``joins: capture`` emulates.
CAPTURE_PORT_KEYS = ("queue", "buffer_bytes", "mtu", "congestion_control")


def joins_file(network: dict[str, Any], model: str, hardware: str) -> str | None:
    """The joins JSON a ``networks[]`` entry names for ``model`` on ``hardware``:
    its ``joins`` with ``{model}`` replaced by the model's name; with ``joins:
    capture`` the file the pipeline's rule ``capture_joins`` writes
    (``results/joins/{hardware}/{model}/{network}.json``); None where it names none."""
    path = network.get("joins")
    if not path:
        return None
    if path == JOINS_CAPTURE:
        return f"results/joins/{hardware}/{model}/{network['name']}.json"
    return str(path).replace("{model}", model)


def check_config(config: dict[str, Any], source: str = "config") -> None:
    """Raise :class:`ConfigError` naming the key and the fix for the first problem found."""
    for key in ("models", "hardware", "networks"):
        dup = [n for n, c in Counter(e["name"] for e in config.get(key, [])).items() if c > 1]
        if dup:
            raise ConfigError(f"{source}: {key}: duplicate name {dup[0]!r}; names must be unique")
    for i, m in enumerate(config.get("models", [])):
        try:
            check_model_name(m["name"])
        except UnknownModelError as e:
            raise ConfigError(f"{source}: models[{i}].name: {e}") from None
        size, least = m.get("image_size", 64), min_image_size(m["name"])
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
    for i, net in enumerate(config.get("networks", [])):
        port = [k for k in CAPTURE_PORT_KEYS if k in net]
        if port and net.get("joins") != JOINS_CAPTURE:
            raise ConfigError(
                f"{source}: networks[{i}].{port[0]} ({net['name']}) describes the port that "
                "joins: capture emulates, and this entry captures none; set joins: capture "
                f"or remove {port[0]}"
            )
        if "joins_bandwidth_bps" in net and not net.get("joins"):
            raise ConfigError(
                f"{source}: networks[{i}].joins_bandwidth_bps ({net['name']}) is the rate its "
                "joins are captured at, and this entry takes none; set joins (capture or a "
                "file) or remove joins_bandwidth_bps"
            )
        named = net.get("joins") not in (None, JOINS_CAPTURE)
        for m in config.get("models", []) if named else []:
            file = joins_file(net, m["name"], "")
            if file is not None and not Path(file).is_file():
                raise ConfigError(
                    f"{source}: networks[{i}].joins ({net['name']}): {file} (model {m['name']}) "
                    "does not exist; write it with sgdsim calibrate-joins --out "
                    f"{file}, or set joins: null"
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
    links = [("validation", val)] + [
        (f"validation.networks[{i}] ({n.get('name')})", n)
        for i, n in enumerate(val.get("networks", []))
    ]
    for where, link in links:
        buf = link.get("buffer_bytes", val.get("buffer_bytes"))
        mtu = link.get("mtu", val.get("mtu", 9000))
        if buf is not None and buf < mtu + 14:
            raise ConfigError(
                f"{source}: {where}.buffer_bytes: {buf} does not hold one frame of MTU {mtu} "
                f"(MTU + 14 = {mtu + 14} bytes); raise it or set it to null for the default"
            )
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
        if pt.get("steady") and _entry_protocol(pt, val) != "steady":
            raise ConfigError(
                f"{source}: validation.points[{i}].steady: this entry's points are measured by "
                "episodes, which take no steady rule; set its protocol: steady or drop steady"
            )


#: Fusion rule of every measured ``allreduce`` point: ``MultiWorkerMirroredStrategy``
#: all-reduces every gradient in one pack after back-propagation (docs/validation.md).
TESTBED_FUSION = "single"


def _point_default(key: str) -> Any:
    """The schema's default of ``validation.points[].<key>``."""
    items = schema()["properties"]["validation"]["properties"]["points"]["items"]
    return copy.deepcopy(items["properties"][key]["default"])


def _entry_protocol(entry: dict[str, Any], validation: dict[str, Any]) -> str:
    """A ``validation.points[]`` entry's protocol: its own, else ``validation.protocol``,
    else ``episodes``."""
    return str(entry.get("protocol", validation.get("protocol", "episodes")))


def validation_points(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every measured point of ``config['validation']``, one dict each.

    Keys: hardware, model, network, mode, policy, workers, duration_s, runs
    (independent launches of the point, averaged), protocol (the
    entry's, else ``validation.protocol``, else ``episodes``), steady (the
    entry's keys of ``validation.steady`` to take instead; ``{}``: none). An
    ``allreduce`` point's policy is its fusion rule, :data:`TESTBED_FUSION`
    (the point's ``policies`` order PS pulls; they apply to ``async`` and
    ``sync_ps``). Duplicates (same hardware, model, network, mode, policy and
    N) removed, the first kept.
    """
    val = config.get("validation", {})
    nets = [n["name"] for n in val.get("networks", [])]
    hw = val.get("hardware", "cpu")
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for pt in val.get("points", []):
        for net in pt.get("networks", nets):
            for mode in pt.get("modes", _point_default("modes")):
                policies = pt.get("policies", _point_default("policies"))
                for policy in [TESTBED_FUSION] if mode == "allreduce" else policies:
                    for n in pt["workers"]:
                        key = (hw, pt["model"], net, mode, policy, n)
                        out.setdefault(
                            key,
                            {
                                "hardware": hw,
                                "model": pt["model"],
                                "network": net,
                                "mode": mode,
                                "policy": policy,
                                "workers": n,
                                "duration_s": pt.get("duration_s", val.get("duration_s", 20)),
                                "runs": pt.get("runs", 1),
                                "protocol": _entry_protocol(pt, val),
                                "steady": dict(pt.get("steady", {})),
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


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read one YAML (or JSON) config file into a dict.

    Raises:
        ConfigError: the file is missing, not valid YAML (names the line and
            column), or its top level is not a mapping.
    """
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the config file ({e})") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        ctx, ctx_mark = getattr(e, "context", None), getattr(e, "context_mark", None)
        if ctx and ctx_mark is not None:
            problem = f"{problem}, {ctx} that starts at line {ctx_mark.line + 1}"
        raise ConfigError(
            f"{where}: not valid YAML ({problem}); fix the syntax at that line "
            "(Snakemake only says 'Config file is not valid JSON or YAML')"
        ) from e
    except RecursionError as e:
        raise ConfigError(f"{path}: nested too deeply to be a config file") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of keys (models:, networks:, ...), "
            f"got {type(data).__name__}"
        )
    return data


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base`` as Snakemake merges a --configfile.

    Mappings merge key by key (recursively); any other value, lists included,
    replaces the base's (snakemake.utils.update_config).
    """
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def validate_config(config: Any, schema: dict[str, Any], source: str = "config") -> None:
    """Check ``config`` against the JSON schema, then :func:`check_config`.

    Raises:
        ConfigError: the first problem, in one line naming the key path (as
            ``models[0].image_size``), the value given and what the schema wants.
    """
    import jsonschema

    if not isinstance(config, dict):
        raise ConfigError(f"{source}: the config must be a mapping, got {type(config).__name__}")
    validator = jsonschema.Draft202012Validator(schema)
    try:
        errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.path)))
    except RecursionError as e:
        raise ConfigError(f"{source}: nested too deeply to be a config") from e
    if errors:
        first = errors[0]
        key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.path)
        raise ConfigError(
            f"{source}: {key.lstrip('.') or 'top level'}: {first.message[:300]}; see "
            "config/README.md for the key"
        )
    check_config(config, source)


def check_config_files(
    paths: list[str | os.PathLike[str]],
    base: str | os.PathLike[str] = "config/config.yaml",
    schema_path: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Check config files as the pipeline would use them: ``base`` merged with each of ``paths``,
    against ``schema_path`` (default: the packaged :func:`schema`).

    Returns:
        The merged configuration.

    Raises:
        ConfigError: a file cannot be read or parsed (file, line, column), or
            the merged configuration is invalid (key path and fix).
    """
    rules = schema() if schema_path is None else load_yaml(schema_path)
    config = load_yaml(base)
    for p in paths:
        config = merge(config, load_yaml(p))
    validate_config(config, rules, " + ".join(str(p) for p in [base, *paths]))
    return config

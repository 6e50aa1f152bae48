"""The ``sgdsim`` command line."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click
import duckdb

from sgdsim.presets import DEFAULT_LATENCY_S, PRESETS
from sgdsim.simulation import POLICIES
from sgdsim.simulation.sync import FUSIONS, MODES


class _Group(click.Group):
    """Turns the errors sgdsim raises on purpose into one line and exit code 1.

    Other exceptions give one line and exit code 2 with a pointer to
    ``--debug`` (or ``SGDSIM_DEBUG=1``), which shows the full traceback.
    """

    def invoke(self, ctx: click.Context) -> Any:
        from sgdsim.errors import SgdsimError

        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            e.ctx = None  # one line: the bad option and its range, no usage block
            raise
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except SgdsimError as e:
            if _debug(ctx):
                raise
            raise click.ClickException(str(e)) from e
        except KeyboardInterrupt:
            raise
        except Exception as e:
            if _debug(ctx):
                raise
            click.echo(
                f"Error: unexpected {type(e).__name__}: {e}; rerun with --debug "
                "(sgdsim --debug ...) for the traceback and report it",
                err=True,
            )
            ctx.exit(2)


def _debug(ctx: click.Context) -> bool:
    from sgdsim.errors import debug_enabled

    return bool(ctx.meta.get("sgdsim.debug")) or debug_enabled()


class _Finite(click.ParamType):
    """A finite float in [lo, hi] (``lo`` excluded when ``lo_open``), in the units typed."""

    name = "float"

    def __init__(self, lo: float, hi: float = float("inf"), lo_open: bool = False, unit: str = ""):
        self.lo, self.hi, self.lo_open, self.unit = lo, hi, lo_open, unit

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        low_ok = x > self.lo if self.lo_open else x >= self.lo
        if not (math.isfinite(x) and low_ok and x <= self.hi):
            lo = f"> {self.lo:g}" if self.lo_open else f">= {self.lo:g}"
            hi = f" and <= {self.hi:g}" if math.isfinite(self.hi) else ""
            self.fail(
                f"{value} is out of range: needs a finite number {lo}{hi}{self.unit}", param, ctx
            )
        return x


#: Limits of the numeric options, in the units the user types.
_BANDWIDTH = _Finite(0.0, 1e15, lo_open=True, unit=" bit/s")
_LATENCY = _Finite(0.0, 60.0, unit=" s")
#: The config schema's cap on workers (workflow/schemas/config.schema.yaml).
_WORKERS = click.IntRange(1, 4096)
_STEPS = click.IntRange(2, 100_000)


@click.group(cls=_Group)
@click.version_option(package_name="sgdsim")
@click.option(
    "--debug",
    is_flag=True,
    help="Show the Python traceback of an error (also: SGDSIM_DEBUG=1).",
)
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """sgdsim: distributed SGD throughput predicted from one worker's trace."""
    ctx.meta["sgdsim.debug"] = debug


_DB_OPTION = click.option(
    "--db", default="results/sgdsim.duckdb", show_default=True, help="DuckDB store to query."
)
_SANDBOX_OPTIONS = (
    click.option(
        "--timeout-s",
        default=10.0,
        show_default=True,
        type=_Finite(0.0, 86400.0, lo_open=True, unit=" s"),
        help="Stop a statement after this many seconds.",
    ),
    click.option(
        "--memory-limit",
        default="1GB",
        show_default=True,
        help="Memory a statement may use (DuckDB size: 512MB, 2GB); nothing spills to disk.",
    ),
)


def _sandbox_options(f: Any) -> Any:
    for option in reversed(_SANDBOX_OPTIONS):
        f = option(f)
    return _DB_OPTION(f)


def _open_store(db: str, memory_limit: str) -> duckdb.DuckDBPyConnection:
    from sgdsim.sandbox import connect

    try:
        return connect(db, memory_limit=memory_limit)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--memory-limit") from e


@main.command()
@click.argument("sql")
@_sandbox_options
@click.option(
    "--max-rows",
    default=100,
    show_default=True,
    type=click.IntRange(min=1, max=1_000_000),
    help="Rows to print at most.",
)
def query(sql: str, db: str, timeout_s: float, memory_limit: str, max_rows: int) -> None:
    """Run ONE read-only SQL statement against the store and print the result as a table.

    The store is opened in a sandbox: no files, URLs, other databases or
    extensions are reachable, settings are locked, and each statement runs
    under --timeout-s and --memory-limit (see docs/query.md).

    Example: sgdsim query "SELECT * FROM scaling WHERE network = '1Gbps'"
    """
    from sgdsim.reports import markdown_table
    from sgdsim.sandbox import run

    con = _open_store(db, memory_limit)
    try:
        columns, rows = run(con, sql, timeout_s=timeout_s, max_rows=max_rows + 1)
    except duckdb.Error as e:
        raise click.ClickException(f"query failed: {str(e).strip().splitlines()[0]}") from e
    finally:
        con.close()
    click.echo(markdown_table(columns, rows[:max_rows]))
    if len(rows) > max_rows:
        click.echo(f"(first {max_rows} rows shown; raise --max-rows or add LIMIT/WHERE)")


@main.command()
@_sandbox_options
def tables(db: str, timeout_s: float, memory_limit: str) -> None:
    """List the store's tables and views with their row counts."""
    from sgdsim.sandbox import run

    con = _open_store(db, memory_limit)
    try:
        _, names = run(
            con,
            "SELECT table_name, table_type FROM information_schema.tables "
            "ORDER BY table_type, table_name",
            timeout_s=timeout_s,
        )
        for name, kind in names:
            _, n = run(con, f'SELECT count(*) FROM "{name}"', timeout_s=timeout_s)
            click.echo(f"{name:<20} {kind.lower():<10} {n[0][0] if n else 0:>10,} rows")
    except duckdb.Error as e:
        raise click.ClickException(
            f"reading the store failed: {str(e).strip().splitlines()[0]}"
        ) from e
    finally:
        con.close()


@main.command(name="check-config")
@click.argument("configfiles", nargs=-1, type=click.Path(dir_okay=False))
@click.option(
    "--base",
    default="config/config.yaml",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Config the files are merged into (the Snakefile's configfile).",
)
@click.option(
    "--schema",
    default=None,
    type=click.Path(dir_okay=False),
    help="JSON schema to check against (default: the one sgdsim ships).",
)
def check_config_cmd(configfiles: tuple[str, ...], base: str, schema: str | None) -> None:
    """Check config files as `snakemake --configfile FILE` would use them, in one line.

    Names the file, line and column of a YAML syntax error and the key path of
    an invalid value. Run in the directory holding the Snakefile.

    Example: sgdsim check-config my-cluster.yaml
    """
    from sgdsim.config import check_config_files

    config = check_config_files(list(configfiles), base, schema)
    n = len(config.get("models", [])) * len(config.get("networks", []))
    click.echo(
        f"ok: {' + '.join([base, *configfiles])} ({len(config.get('models', []))} models, "
        f"{len(config.get('networks', []))} networks, {n * len(config.get('workers', []))} "
        "model x network x workers points per hardware, policy and mode)"
    )


def _sim_config(configfile: str | None) -> dict[str, Any]:
    """A config file with its defaults filled in, or the schema's defaults.

    Raises:
        ConfigError: the file is not valid YAML or not a valid config (one line).
    """
    from sgdsim.config import defaults, load_yaml, with_defaults

    return defaults() if configfile is None else with_defaults(load_yaml(configfile), configfile)


def _sim_params(config: dict[str, Any], **overrides: Any) -> Any:
    """The :class:`~sgdsim.simulation.point.SimParams` of a config of
    :func:`_sim_config`, with the options the user gave on top."""
    from sgdsim.simulation.point import SimParams

    given = {k: v for k, v in overrides.items() if v is not None}
    return SimParams.from_config(config, **given)


#: The ``--workload`` option of the commands that need one.
_WORKLOAD_OPTION = click.option(
    "--workload",
    "workload_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Workload JSON written by the normalize stage, e.g. results/workloads/cpu/ResNet50.json.",
)


@main.command(name="calibrate-joins")
@_WORKLOAD_OPTION
@click.option(
    "--bandwidth-bps", "-b", required=True, type=_BANDWIDTH, help="NIC rate per direction, bit/s."
)
@click.option(
    "--queue",
    type=click.Choice(["fair", "fifo"]),
    default="fair",
    show_default=True,
    help="How each NIC queues: fair per peer, or one FIFO (a switch port).",
)
@click.option(
    "--buffer-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="Queue limit of each NIC, bytes (default: 50 ms at the rate, at least 64 KiB).",
)
@click.option("--mtu", type=click.IntRange(68, 65535), default=9000, show_default=True)
@click.option(
    "--congestion-control",
    default=None,
    help="TCP congestion control of every host (bbr, cubic, …; default: the machine's).",
)
@click.option(
    "--workers",
    "-n",
    multiple=True,
    type=click.IntRange(2, 16),
    default=(2, 3, 4),
    show_default=True,
    help="Worker counts to capture (each its own run); repeat for several.",
)
@click.option(
    "--capture-s",
    type=_Finite(0.0, 3600.0, lo_open=True, unit=" s"),
    default=40.0,
    show_default=True,
    help="Seconds each run is captured after its warm-up.",
)
@click.option(
    "--runs",
    type=click.IntRange(1, 10),
    default=1,
    show_default=True,
    help="Captures pooled at each N (each one launch of wandering phases).",
)
@click.option(
    "--threads",
    type=click.IntRange(1, 256),
    default=2,
    show_default=True,
    help="TensorFlow intra- and inter-op threads of each process.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="Joins JSON to write (whole or not at all); read by sgdsim predict --joins.",
)
def calibrate_joins(
    workload_path: str,
    bandwidth_bps: float,
    queue: str,
    buffer_bytes: int | None,
    mtu: int,
    congestion_control: str | None,
    workers: tuple[int, ...],
    capture_s: float,
    runs: int,
    threads: int,
    out: str,
) -> None:
    """Measure how transfers that join others' get their share, on an emulated network.

    N processes on this machine run the skeleton of the profiled step (its
    pulls and pushes through a real TensorFlow PS, its compute as waits),
    phases left to themselves, on network namespaces with the given NICs,
    while the PS's port is captured; for each N, the joins' lateness and
    the two-way share (docs/steady-state-log.md, "The step's skeleton"). Needs
    root, iproute2 and tcpdump; takes about a minute per N.

    Example: sudo sgdsim calibrate-joins --workload results/workloads/cpu/MobileNetV2.json
    -b 1e8 --queue fifo --buffer-bytes 2500000 --mtu 1500 --out joins.json
    """
    from sgdsim.pipeline.validation import join_calibration, write_joins
    from sgdsim.profiling import ProfileSpec
    from sgdsim.simulation import Workload
    from sgdsim.testbed import check_available
    from sgdsim.testbed.capture import tcpdump_missing
    from sgdsim.testbed.netns import Link

    try:
        link = Link(
            mtu=mtu, queue=queue, buffer_bytes=buffer_bytes, congestion_control=congestion_control
        )
    except ValueError as e:
        raise click.ClickException(f"the network given: {e}") from e
    why = check_available() or tcpdump_missing()
    if why is not None:
        raise click.ClickException(f"calibrate-joins needs the emulated testbed: {why}")
    w = Workload.load(workload_path)
    spec = ProfileSpec(
        model=str(w.meta.get("model", Path(workload_path).stem)),
        batch_size=w.batch_size,
        intra_op_threads=threads,
        inter_op_threads=threads,
    )
    row = join_calibration(
        spec, workload_path, bandwidth_bps, link, sorted(set(workers)), capture_s,
        label=f"{bandwidth_bps:g} bit/s {queue}", runs=runs,
    )  # fmt: skip
    write_joins(out, bandwidth_bps, link, row)
    said = ", ".join(f"N = {n}: {j['steps_per_s']:.3g} steps/s" for n, j in row["joins_at"].items())
    click.echo(f"{out}: the joins of {said}")


def _read_joins(
    path: str, mode: str, bandwidth_bps: tuple[float, ...], other_rates: bool = False
) -> dict[str, Any]:
    """A joins JSON for ``predict --joins``, checked: one line naming the file and
    the fix where it is not one, or does not fit the prediction asked for (a rate
    it was not captured at, unless ``other_rates``)."""
    from sgdsim.pipeline.validation import read_joins

    try:
        joins = read_joins(path)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--joins") from e
    if mode != "async":
        raise click.BadParameter(
            f"joins apply to async workers, not to mode {mode}", param_hint="--joins"
        )
    rate = (joins.get("network") or {}).get("bandwidth_bps")
    if rate is None and not bandwidth_bps:
        raise click.BadParameter(
            f"{path} does not record its network's rate; give it with -b", param_hint="--joins"
        )
    if (
        not other_rates
        and rate is not None
        and any(not math.isclose(b, rate, rel_tol=1e-6) for b in bandwidth_bps)
    ):
        raise click.BadParameter(
            f"{path} was captured at {rate:g} bit/s, not at every -b given; predict at its "
            "rate (leave out -b), capture the other rate too, or take its joins at the "
            "other rates with --joins-other-rates",
            param_hint="--joins",
        )
    return joins


@main.command()
@_WORKLOAD_OPTION
@click.option(
    "--bandwidth-bps",
    "-b",
    multiple=True,
    type=_BANDWIDTH,
    help="NIC rate per direction in bit/s (as on a data sheet: Ethernet framing is "
    "taken off as the pipeline does); repeat for several networks. Default: 1e9 "
    "unless --network-preset is given.",
)
@click.option(
    "--network-preset",
    "-p",
    "network_presets",
    multiple=True,
    type=click.Choice(list(PRESETS)),
    help="An interconnect preset (rate and latency; see config/README.md), as a "
    "networks[] entry's preset: names it; repeat for several. --latency-s overrides "
    "its latency.",
)
@click.option(
    "--latency-s",
    default=None,
    show_default=f"a preset's, else {DEFAULT_LATENCY_S:g}",
    type=_LATENCY,
    help="Per-message latency, s.",
)
@click.option(
    "--workers",
    "-n",
    multiple=True,
    type=_WORKERS,
    default=(1, 2, 4, 8),
    show_default=True,
    help="Worker counts (1-4096); repeat for several.",
)
@click.option(
    "--mode",
    default="async",
    show_default=True,
    type=click.Choice(MODES),
    help="async or sync_ps (parameter server), allreduce (ring all-reduce).",
)
@click.option(
    "--policy",
    default=None,
    type=click.Choice(POLICIES + FUSIONS),
    help="Transmission policy (async, sync_ps; default tf_default) or fusion rule "
    "(allreduce; default buckets).",
)
@click.option(
    "--configfile",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Take seed and simulation settings from this config (default: the schema's "
    "defaults, as config/config.yaml leaves them).",
)
@click.option("--workers-per-node", type=_WORKERS, default=None)
@click.option(
    "--protocol",
    type=click.Choice(["steady", "steps"]),
    default=None,
    help="Async N > 1: steady (run until the throughput converges, the long-run rate) or "
    "steps (--steps steps from the start); default: the config's simulation.protocol (steady).",
)
@click.option(
    "--steps",
    type=_STEPS,
    default=None,
    help="Steps per worker (protocol steps, N = 1 and the synchronous modes).",
)
@click.option("--replications", type=click.IntRange(1, 1000), default=None)
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=None)
@click.option(
    "--start-window-s",
    type=click.FloatRange(min=0),
    default=None,
    help="Async: start the workers within this many seconds of the first (a launcher "
    "that starts them together); default: over one step, launched independently.",
)
@click.option(
    "--joins",
    "joins_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Async: the join delays and two-way shares of sgdsim calibrate-joins (or of the "
    "pipeline's calibrate_push_join) at each N, at the file's rate (-b may only repeat it).",
)
@click.option(
    "--joins-other-rates",
    is_flag=True,
    help="Take the --joins file's joins at every -b, not only at the rate it was captured at "
    "(as networks[].joins_bandwidth_bps; under a fair queue they carried across factors of 2 and 4 "
    "of rate: docs/model.md).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON record per point (every column)."
)
def predict(
    workload_path: str,
    bandwidth_bps: tuple[float, ...],
    network_presets: tuple[str, ...],
    latency_s: float | None,
    workers: tuple[int, ...],
    mode: str,
    policy: str | None,
    configfile: str | None,
    workers_per_node: int | None,
    protocol: str | None,
    steps: int | None,
    replications: int | None,
    seed: int | None,
    start_window_s: float | None,
    joins_path: str | None,
    joins_other_rates: bool,
    as_json: bool,
) -> None:
    """Predict throughput for networks and worker counts outside the configured grid,
    exactly as the pipeline's simulate rule predicts a grid point.

    With --joins, each async N takes the join delays and the two-way share
    captured at that N (or at the nearest N captured) on that network; with
    --joins-other-rates also at the other -b given.

    Example: sgdsim predict --workload results/workloads/cpu/MobileNetV2.json -b 2.5e9 -n 3 -n 6
    """
    from sgdsim.pipeline.validation import apply_joins
    from sgdsim.presets import network, resolve_network
    from sgdsim.protocol import describe_window
    from sgdsim.reports import markdown_table
    from sgdsim.simulation import Workload
    from sgdsim.simulation.point import grid_rule, predict_grid_point

    config = _sim_config(configfile)
    if protocol is not None:
        config["simulation"]["protocol"] = protocol
    rule = grid_rule(config)
    params = _sim_params(
        config,
        workers_per_node=workers_per_node,
        steps_per_worker=steps,
        replications=replications,
        seed=seed,
        start_window_s=start_window_s,
    )
    if params.warmup_steps >= params.steps_per_worker:
        raise click.ClickException(
            f"--steps {params.steps_per_worker} must exceed the warm-up steps "
            f"({params.warmup_steps})"
        )
    if policy is None:
        policy = "buckets" if mode == "allreduce" else "tf_default"
    if (mode == "allreduce") != (policy in FUSIONS):
        raise click.BadParameter(
            f"{policy!r} is not a {'fusion rule' if mode == 'allreduce' else 'policy'} of "
            f"mode {mode}; choose one of "
            + ", ".join(FUSIONS if mode == "allreduce" else POLICIES),
            param_hint="--policy",
        )
    w = Workload.load(workload_path)
    if joins_other_rates and joins_path is None:
        raise click.BadParameter("needs --joins", param_hint="--joins-other-rates")
    joins = (
        None
        if joins_path is None
        else _read_joins(joins_path, mode, bandwidth_bps, joins_other_rates)
    )
    if joins is not None and network_presets and not joins_other_rates:
        raise click.BadParameter(
            "joins are captured at one rate; give it with -b, not a preset (or add "
            "--joins-other-rates)",
            param_hint="--joins",
        )
    if joins is not None and not bandwidth_bps and not network_presets:
        bandwidth_bps = (float(joins["network"]["bandwidth_bps"]),)
    entries = [{"name": f"{bw:g}", "bandwidth_bps": bw} for bw in bandwidth_bps]
    entries += [{"name": p, "preset": p} for p in network_presets]
    if not entries:
        entries = [{"name": "1e+09", "bandwidth_bps": 1e9}]
    rows = []
    for given in entries:
        e = resolve_network({**given, "latency_s": latency_s}, "--network-preset")
        for n in workers:
            net, at_n = network(e), params
            if joins is not None:
                net, at_n = apply_joins(joins, n, net, params)
            try:
                r = predict_grid_point(w, net, n, policy, at_n, mode=mode, steady=rule)
            except ValueError as err:
                raise click.ClickException(str(err)) from err
            if as_json:
                fields = {k: e[k] for k in ("bandwidth_bps", "latency_s", "preset")}
                click.echo(json.dumps({**fields, **r}))
                continue
            limit = "CPU" if r["steps_per_s"] < r["sim_steps_per_s"] else ""
            window = describe_window(
                r["protocol"], r.get("converged"), r.get("rel_half_width"), r.get("window_s")
            )
            rows.append(
                (
                    f"{e['bandwidth_bps']:.3g}" + (f" ({e['preset']})" if e["preset"] else ""),
                    n,
                    r["steps_per_s"],
                    r["steps_per_s_std"],
                    r["samples_per_s"],
                    r["mean_step_s"],
                    r["ps_down_util"],
                    r["blocked_fraction"],
                    limit,
                    window,
                )
            )
    if as_json:
        return
    click.echo(
        markdown_table(
            [
                "bandwidth bit/s",
                "N",
                "steps/s",
                "± std",
                "samples/s",
                "step s",
                "PS down util",
                "blocked",
                "bound",
                "long run (first seed)",
            ],
            rows,
        )
    )


@main.command()
def models() -> None:
    """List the model names models[].name accepts (imports TensorFlow).

    Besides these, a name module:function builds your own model (see
    docs/models.md).
    """
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from sgdsim.models import DEFINED_NAMES, keras_application_names

    click.echo("defined in sgdsim.models: " + ", ".join(DEFINED_NAMES))
    click.echo("tf_keras.applications: " + ", ".join(keras_application_names()))
    click.echo("your own: module:function (function(inputs, classes) -> tf_keras.Model)")


@main.command(name="import")
@click.argument("traces", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--model", required=True, help="Name to file the profile under.")
@click.option("--hardware", required=True, help="Node kind the traces were taken on.")
@click.option(
    "--meta", "meta_path", type=click.Path(dir_okay=False), help="meta.json: step times, batch."
)
@click.option(
    "--batch-size",
    default=1,
    type=click.IntRange(1, 1_000_000),
    show_default=True,
    help="Samples per step (if not in --meta).",
)
@click.option("--out", "out_root", default="results/imported", show_default=True)
def import_(
    traces: tuple[str, ...],
    model: str,
    hardware: str,
    meta_path: str | None,
    batch_size: int,
    out_root: str,
) -> None:
    """Import RunMetadata protobufs taken elsewhere into sgdsim's tables.

    Each TRACE is a serialized tensorflow.RunMetadata of one step, taken with
    FULL_TRACE and output_partition_graphs=True on a worker/PS cluster. The
    import is written under temporary names and renamed when complete; the
    pipeline's next run (snakemake, in the directory holding results/) loads
    every import under results/imported into results/sgdsim.duckdb.
    """
    import polars as pl

    from sgdsim.errors import TraceError
    from sgdsim.traces.importer import import_run_metadata

    try:
        tables = import_run_metadata(list(traces), model, hardware, out_root, meta_path, batch_size)
    except TraceError as e:
        raise click.ClickException(str(e)) from e
    p = pl.read_parquet(tables / "profile.parquet").row(0, named=True)
    click.echo(
        f"imported {len(traces)} step(s) as {p['profile_id']}: {p['param_count']:,} parameters, "
        f"untraced step {p['untraced_step_s']:.4f} s, simulated N=1 replay "
        f"{p['replay_step_s']:.4f} s; tables in {tables}"
    )
    if Path(out_root).resolve() == Path("results/imported").resolve():
        click.echo(
            "the next pipeline run (snakemake --cores N, or make run) loads it into "
            "results/sgdsim.duckdb (table profiles, source = 'imported')"
        )
    else:
        click.echo(
            f"not in the store: publish loads imports from results/imported only, not {out_root}"
        )


@main.command()
@click.option(
    "--workload",
    "workload_path",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="Workload JSON written by the normalize stage, e.g. results/workloads/cpu/ResNet50.json "
    "(default: the synthetic ResNet-50 of sgdsim.bench.synthetic_resnet50).",
)
@click.option(
    "--bandwidth-bps", default=1e9, type=_BANDWIDTH, show_default=True, help="NIC capacity, bit/s."
)
@click.option(
    "--latency-s", default=1e-4, type=_LATENCY, show_default=True, help="Per-message latency, s."
)
@click.option(
    "--workers", "-n", multiple=True, type=_WORKERS, default=(1, 8, 64), show_default=True
)
@click.option("--steps", default=50, type=_STEPS, show_default=True, help="Steps per worker.")
@click.option(
    "--repeat",
    default=3,
    type=click.IntRange(1, 100),
    show_default=True,
    help="Runs per point; the fastest counts.",
)
@click.option(
    "--policy",
    "-p",
    "policies",
    multiple=True,
    type=click.Choice(POLICIES),
    help="Policies to time (repeat; default: all).",
)
@click.option(
    "--mode",
    "-m",
    "modes",
    multiple=True,
    type=click.Choice(MODES),
    help="Modes to time (repeat; default: all; allreduce times every fusion rule).",
)
def bench(
    workload_path: str | None,
    bandwidth_bps: float,
    latency_s: float,
    workers: tuple[int, ...],
    steps: int,
    repeat: int,
    policies: tuple[str, ...],
    modes: tuple[str, ...],
) -> None:
    """Benchmark the simulator: events/s and seconds per grid point, per policy and N."""
    from sgdsim.bench import format_table, run_bench, synthetic_resnet50
    from sgdsim.simulation import Workload
    from sgdsim.simulation.point import grid_network

    w = Workload.load(workload_path) if workload_path else synthetic_resnet50()
    rows = run_bench(
        w,
        grid_network(bandwidth_bps, latency_s),
        workers,
        policies or POLICIES,
        steps_per_worker=steps,
        repeat=repeat,
        modes=modes or MODES,
    )
    click.echo(format_table(rows))


@main.command("bench-sweep")
@click.option(
    "--configfile",
    default="config/sweep.yaml",
    show_default=True,
    help="The sweep, merged into config/config.yaml as snakemake --configfile is.",
)
@click.option("--cores", default=2, type=click.IntRange(1, 1024), show_default=True)
@click.option(
    "--networks",
    type=click.IntRange(1, None),
    default=None,
    help="Only N networks of the sweep, spread over its list (a shorter run with its mix).",
)
@click.option(
    "--workers",
    "-n",
    multiple=True,
    type=_WORKERS,
    help="These worker counts in place of the sweep's (repeat; e.g. -n 1 -n 2 for many "
    "jobs with little simulation).",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False),
    default=None,
    help="Run in this directory and keep it (Snakemake's output, results/, logs).",
)
@click.option(
    "--timeout-s",
    default=4 * 3600.0,
    type=click.FloatRange(1, None),
    show_default=True,
    help="Stop the run after this many seconds.",
)
def bench_sweep(
    configfile: str,
    cores: int,
    networks: int | None,
    workers: tuple[int, ...],
    keep: str | None,
    timeout_s: float,
) -> None:
    """Benchmark a sweep over cached profiles: grid points per minute of
    `snakemake --cores N` wall time, split into simulation and overhead.

    Runs in a scratch copy of the workflow (the results/ of this directory are
    only read); run `make run` first so that the profiles are cached.
    """
    from sgdsim.sweep_bench import format_timing, run_sweep_bench

    t = run_sweep_bench(
        ".",
        configfile,
        cores=cores,
        networks=networks,
        workers=workers,
        keep=keep,
        timeout_s=timeout_s,
    )
    click.echo(format_timing(t))


@main.command()
@click.argument("capture", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write every tensor's row to this Parquet file (written whole or not at all).",
)
def wire(capture: str, out: str | None) -> None:
    """Per-tensor timeline of a whole-packet capture of the PS's port.

    Reads every TensorFlow RecvTensor call (a pull or a push of one tensor) in
    CAPTURE, a pcap of the PS's port taken with whole packets
    (run_steady_measurement(..., capture_payload=True) on the testbed, or
    tcpdump -s 0), and prints per worker and direction the calls, steps, bytes
    and wire time per step; --out keeps one row per tensor (docs/validation.md).
    """
    import polars as pl

    from sgdsim.io import atomic_path
    from sgdsim.reports import markdown_table
    from sgdsim.testbed.wire import tensor_timeline

    try:
        timeline = tensor_timeline(capture)
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    t = timeline.tensors
    if t.is_empty():
        raise click.ClickException(
            f"{capture}: no RecvTensor calls found (was the capture started before "
            "the workers connected to the PS?)"
        )
    steps = t.group_by("worker", "direction", "step_id").agg(
        pl.len().alias("n"),
        pl.col("bytes").sum(),
        (pl.col("last_s").max() - pl.col("first_s").min()).alias("span_s"),
    )
    summary = (
        steps.group_by("worker", "direction")
        .agg(
            pl.col("n").sum().alias("tensors"),
            pl.len().alias("steps"),
            (pl.col("bytes").median() / 1e6).alias("MB per step"),
            (pl.col("span_s").median() * 1e3).alias("ms on the wire per step"),
        )
        .sort("worker", "direction")
    )
    click.echo(markdown_table(summary.columns, summary.rows()))
    for flow in timeline.cut_short:
        click.echo(f"note: {flow} read only up to a packet the capture missed", err=True)
    if out:
        with atomic_path(out) as tmp:
            t.write_parquet(tmp)
        click.echo(f"{t.height} tensors written to {out}")


if __name__ == "__main__":
    sys.exit(main())

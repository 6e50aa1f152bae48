"""The ``sgdsim`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from sgdsim.simulation import POLICIES


@click.group()
@click.version_option(package_name="sgdsim")
def main() -> None:
    """sgdsim: distributed SGD throughput predicted from one worker's trace."""


@main.command()
@click.argument("sql")
@click.option(
    "--db", default="results/sgdsim.duckdb", show_default=True, help="DuckDB store to query."
)
@click.option("--max-rows", default=100, show_default=True, help="Rows to print at most.")
def query(sql: str, db: str, max_rows: int) -> None:
    """Run SQL against the store (read-only) and print the result as a table.

    Example: sgdsim query "SELECT * FROM scaling WHERE network = '1Gbps'"
    """
    import duckdb

    from sgdsim.store import connect_read_only

    try:
        con = connect_read_only(db)
    except FileNotFoundError as e:
        raise click.ClickException(str(e)) from e
    try:
        rel = con.sql(sql)
        if rel is None:
            return
        rel.show(max_rows=max_rows, max_width=250)
    except duckdb.Error as e:
        raise click.ClickException(f"query failed: {e}") from e
    finally:
        con.close()


@main.command()
@click.option("--db", default="results/sgdsim.duckdb", show_default=True)
def tables(db: str) -> None:
    """List the store's tables and views with their row counts."""
    from sgdsim.store import connect_read_only

    try:
        con = connect_read_only(db)
    except FileNotFoundError as e:
        raise click.ClickException(str(e)) from e
    for name, kind in con.execute(
        "SELECT table_name, table_type FROM information_schema.tables "
        "ORDER BY table_type, table_name"
    ).fetchall():
        n = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()
        click.echo(f"{name:<14} {kind.lower():<10} {n[0] if n else 0:>10,} rows")
    con.close()


def _network_default(key: str) -> Any:
    from sgdsim.config import schema

    return schema()["properties"]["networks"]["items"]["properties"][key]["default"]


def _sim_params(configfile: str | None, **overrides: Any) -> Any:
    """The :class:`~sgdsim.simulation.point.SimParams` of a config file (or of the
    schema's defaults), with the options the user gave on top."""
    import yaml

    from sgdsim.config import defaults, with_defaults
    from sgdsim.errors import ConfigError
    from sgdsim.simulation.point import SimParams

    config = defaults()
    if configfile is not None:
        try:
            loaded = yaml.safe_load(Path(configfile).read_text()) or {}
        except yaml.YAMLError as e:
            raise click.ClickException(f"{configfile}: not valid YAML: {e}") from e
        try:
            config = with_defaults(loaded, configfile)
        except ConfigError as e:
            raise click.ClickException(str(e)) from e
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return SimParams.from_config(config, **given)
    except ValueError as e:
        raise click.ClickException(str(e)) from e


@main.command()
@click.option(
    "--workload",
    "workload_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Workload JSON written by the normalize stage, e.g. results/workloads/cpu/ResNet50.json.",
)
@click.option(
    "--bandwidth-bps",
    "-b",
    multiple=True,
    type=click.FloatRange(min=1e3, max=1e13),
    default=(1e9,),
    show_default=True,
    help="NIC rate per direction in bit/s (as on a data sheet: framing is "
    "taken off as the pipeline does); repeat for several networks.",
)
@click.option(
    "--latency-s",
    default=lambda: _network_default("latency_s"),
    show_default="the config schema's networks[].latency_s",
    type=click.FloatRange(min=0, max=10),
    help="Per-message latency, s.",
)
@click.option(
    "--workers",
    "-n",
    multiple=True,
    type=click.IntRange(min=1, max=4096),
    default=(1, 2, 4, 8),
    show_default=True,
)
@click.option("--policy", default="tf_default", show_default=True, type=click.Choice(POLICIES))
@click.option(
    "--configfile",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Take seed and simulation settings from this config (default: the schema's "
    "defaults, as config/config.yaml leaves them).",
)
@click.option("--workers-per-node", type=click.IntRange(min=1), default=None)
@click.option("--steps", type=click.IntRange(min=2), default=None, help="Steps per worker.")
@click.option("--replications", type=click.IntRange(min=1), default=None)
@click.option("--seed", type=click.IntRange(min=0), default=None)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON record per point (every column)."
)
def predict(
    workload_path: str,
    bandwidth_bps: tuple[float, ...],
    latency_s: float,
    workers: tuple[int, ...],
    policy: str,
    configfile: str | None,
    workers_per_node: int | None,
    steps: int | None,
    replications: int | None,
    seed: int | None,
    as_json: bool,
) -> None:
    """Predict throughput for networks and worker counts outside the configured grid,
    exactly as the pipeline's simulate rule predicts a grid point.

    Example: sgdsim predict --workload results/workloads/cpu/MobileNetV2.json -b 2.5e9 -n 3 -n 6
    """
    from sgdsim.reports import markdown_table
    from sgdsim.simulation import Workload
    from sgdsim.simulation.point import grid_network, predict_point

    params = _sim_params(
        configfile,
        workers_per_node=workers_per_node,
        steps_per_worker=steps,
        replications=replications,
        seed=seed,
    )
    if params.warmup_steps >= params.steps_per_worker:
        raise click.ClickException(
            f"--steps {params.steps_per_worker} must exceed the warm-up steps "
            f"({params.warmup_steps})"
        )
    w = Workload.load(workload_path)
    rows = []
    for bw in bandwidth_bps:
        for n in workers:
            try:
                r = predict_point(w, grid_network(bw, latency_s), n, policy, params)
            except ValueError as e:
                raise click.ClickException(str(e)) from e
            if as_json:
                click.echo(json.dumps({"bandwidth_bps": bw, "latency_s": latency_s, **r}))
                continue
            limit = "CPU" if r["steps_per_s"] < r["sim_steps_per_s"] else ""
            rows.append(
                (
                    f"{bw:.3g}",
                    n,
                    r["steps_per_s"],
                    r["steps_per_s_std"],
                    r["samples_per_s"],
                    r["mean_step_s"],
                    r["ps_down_util"],
                    r["blocked_fraction"],
                    limit,
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
    "--batch-size", default=1, show_default=True, help="Samples per step (if not in --meta)."
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
@click.option("--bandwidth-bps", default=1e9, show_default=True, help="NIC capacity, bit/s.")
@click.option("--latency-s", default=1e-4, show_default=True, help="Per-message latency, s.")
@click.option("--workers", "-n", multiple=True, type=int, default=(1, 8, 64), show_default=True)
@click.option("--steps", default=50, show_default=True, help="Steps per worker.")
@click.option("--repeat", default=3, show_default=True, help="Runs per point; the fastest counts.")
@click.option(
    "--policy",
    "-p",
    "policies",
    multiple=True,
    type=click.Choice(POLICIES),
    help="Policies to time (repeat; default: all).",
)
def bench(
    workload_path: str | None,
    bandwidth_bps: float,
    latency_s: float,
    workers: tuple[int, ...],
    steps: int,
    repeat: int,
    policies: tuple[str, ...],
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
    )
    click.echo(format_table(rows))


if __name__ == "__main__":
    sys.exit(main())

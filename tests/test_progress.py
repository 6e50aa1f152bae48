"""Progress lines of long jobs, as their log files show them."""

from __future__ import annotations

import io
import re

from sgdsim.progress import progress, write_line

LINE = re.compile(r"^\[profile\] steps: (\d+)/500 \[[0-9:]+<[0-9:?]+, .*step/s\]$")


def test_a_log_file_gets_whole_lines_not_carriage_returns():
    log = io.StringIO()  # not a terminal, like a job's log file
    for _ in progress(range(500), desc="[profile] steps", unit="step", file=log):
        pass
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    # 500 fast steps: the first line and the last, nothing in between (< LOG_INTERVAL_S)
    assert [LINE.match(x).group(1) for x in lines] == ["0", "500"], lines  # type: ignore[union-attr]


def test_lines_written_while_a_bar_runs_stay_whole(capsys):
    import sys

    bar = progress(desc="[measure] episodes", total=3, unit="episode", file=sys.stderr)
    write_line("[measure] episode 1/3: every worker is ready")
    bar.update(3)
    bar.close()
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.splitlines()[1] == "[measure] episode 1/3: every worker is ready"
    assert err.splitlines()[-1].startswith("[measure] episodes: 3/3 [")

"""One function per pipeline stage, called by the thin scripts in ``workflow/scripts``.

:mod:`sgdsim.pipeline.grid` holds the prediction grid's stages (profile,
normalize, simulate, chrome_trace, publish, report) and
:mod:`sgdsim.pipeline.validation` the measured validation's (calibrate_testbed,
measure, predict_testbed). Each takes the config (a dict; its defaults are
filled from the schema, :func:`sgdsim.config.with_defaults`) and the job's
wildcards and paths, so that the library itself stays free of Snakemake.
"""

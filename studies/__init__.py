"""What the benchmark scripts (``benchmarks/``) and the experiments (``experiments/``) share,
so that neither imports the other: both stand on this and on ``ella``, and ``ella`` never
imports it.

- :mod:`studies.results`: the results folders, the environment stamp and the guarded
  writers, the one place a script writes a results file (a Markdown file a writer writes
  ends with the generated-file mark, and no writer replaces a file without it);
- :mod:`studies.runner`: the profiles' pinned settings, the common command-line arguments,
  running a list of configurations (resuming an interrupted one), stamping and writing a
  results table, timing a call;
- :mod:`studies.rules`: how a results row's answer is read (whether the evidence's choice
  of paths follows the data's symmetry, over the seeds);
- :mod:`studies.table1`, :mod:`studies.table3`, :mod:`studies.fordes`: the runs of a paper's
  table that a benchmark reproduces and an experiment trains again or probes (their
  profiles, rows and the configuration of one run).
"""

"""What the process runs on: the machine (:mod:`~ella.runtime.system`: CPUs, memory,
devices, threads), the third-party imports that break outside ella
(:mod:`~ella.runtime.dependencies`), and the wall-clock sections of ella's own work
(:mod:`~ella.runtime.timing`)."""

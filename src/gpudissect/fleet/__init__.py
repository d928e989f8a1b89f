"""Fleet mode: the same per-GPU run (``bench/runner.py``) on every GPU of a Ray cluster, gathered
into one store, with the GPUs that differ from the fleet listed beside their evidence.

* :mod:`~gpudissect.fleet.profile`: what runs on each GPU (the quick profile, ``data/fleet.toml``);
* :mod:`~gpudissect.fleet.task`: one GPU's task (device, local store, the runner, NVML evidence);
* :mod:`~gpudissect.fleet.nvml`: the evidence: clocks, temperature, throttle reasons, ECC;
* :mod:`~gpudissect.fleet.schedule`: Ray: the GPUs found, one task each, timeouts, one retry;
* :mod:`~gpudissect.fleet.merge`: a GPU's runs copied into the fleet store;
* :mod:`~gpudissect.fleet.outliers`: fleet median and spread per measure, each GPU's deviation.

Ray is optional (``pip install 'gpudissect[fleet]'``); only :mod:`schedule` imports it.
"""

"""Engine and app layer of hetsim.

Engine core (knows no device, workload or policy by name):

- ``engine``: :class:`Simulation` (SimPy environment, random streams, recorder), invariants
- ``rng``: named random streams; ``recorder``: tables and spans; ``registry``: the registries
- ``errors``: :class:`ScenarioError`; ``atomic``: atomic file and directory writes
- ``discovery``: imports every module of a package so its decorators register
- ``result``, ``trace``: a run's result, its files and its Perfetto timeline

App layer (the only modules that import devices, workloads and schedulers):

- ``plugins``: fills the registries (shipped packages, user plugins, user catalogues)
- ``paths``: shipped scenarios by name, ``pkg:`` data paths
- ``scenario``: scenario files validated by pydantic; ``runner``: build and run one
- ``sweeps``, ``sweep_design``: sweep grids and designs on process pools or Dask
- ``cli``: the ``hetsim`` command; ``docs``: the generated metrics page
"""

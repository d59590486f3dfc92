"""Collective domain: a microbenchmark of one collective repeated on a group of devices.

Modules (no decision point, so no ``view``):

- ``fabric``: The ring fabric a topology gives a group of devices (bottleneck of the ring's
  routes), for groups without a catalogue fabric.
- ``params``: The ``workload:`` block of a collective microbenchmark.
- ``workload``: Runs N repetitions of one collective and reports their median time.
"""
